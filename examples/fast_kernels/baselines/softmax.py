"""Row-wise softmax: out[i, j] = exp(x[i, j] / T - m_i) / sum_k exp(x[i, k] / T - m_i), where
m_i = max_k x[i, k] / T. x is a float64 array of shape (rows, cols); T > 0 a float. Return an
array of shape (rows, cols). This baseline, a literal loop over
the definition, is correct but slow: make it fast."""

import math

import numpy as np


def softmax(x, temperature):
    rows, cols = x.shape
    out = np.empty((rows, cols))
    for i in range(rows):
        peak = x[i, 0] / temperature
        for j in range(1, cols):
            peak = max(peak, x[i, j] / temperature)
        total = 0.0
        for j in range(cols):
            out[i, j] = math.exp(x[i, j] / temperature - peak)
            total += out[i, j]
        for j in range(cols):
            out[i, j] = out[i, j] / total
    return out
