import numpy as np


def layer_norm(x, gamma, beta, eps):
    y = x - x.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", y, y)
    var *= 1.0 / x.shape[1]
    var += eps
    y *= (1.0 / np.sqrt(var))[:, None]
    y *= gamma
    y += beta
    return y
