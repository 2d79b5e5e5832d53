"""Linear recurrence along each row: h[i, 0] = x[i, 0] and h[i, t] = a[i, t] * h[i, t-1] + x[i, t].
a and x are float64 of shape (rows, cols), with 0.5 <= a < 1 and -1 <= x < 1. Return h, of shape
(rows, cols). This baseline, a literal loop over
the definition, is correct but slow: make it fast."""

import numpy as np


def linear_scan(a, x):
    rows, cols = x.shape
    h = np.empty((rows, cols))
    for i in range(rows):
        state = 0.0
        for t in range(cols):
            state = a[i, t] * state + x[i, t]
            h[i, t] = state
    return h
