import numpy as np


def softmax(x, temperature):
    y = np.multiply(x, 1.0 / temperature)
    y -= y.max(axis=1, keepdims=True)
    np.exp(y, out=y)
    y *= 1.0 / y.sum(axis=1, keepdims=True)
    return y
