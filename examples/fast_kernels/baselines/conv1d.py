"""Valid 1-D cross-correlation of every row with one filter, plus a bias:
out[i, t] = bias + sum_k w[k] * x[i, t + k] for t in 0 .. cols - taps. x is float64 of shape
(rows, cols), w float64 of shape (taps,), bias a float. Return (rows, cols - taps + 1).
This baseline, a literal loop over
the definition, is correct but slow: make it fast."""

import numpy as np


def conv1d(x, w, bias):
    rows, cols = x.shape
    taps = w.shape[0]
    out = np.empty((rows, cols - taps + 1))
    for i in range(rows):
        for t in range(cols - taps + 1):
            acc = bias
            for k in range(taps):
                acc += w[k] * x[i, t + k]
            out[i, t] = acc
    return out
