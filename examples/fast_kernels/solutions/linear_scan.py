import numpy as np

CHUNK = 128  # 0.5**128 is far from underflow, so products inside a chunk stay well scaled


def linear_scan(a, x):
    rows, n = x.shape
    size = min(CHUNK, n)
    chunks = -(-n // size)
    pad = chunks * size - n
    if pad:
        a = np.pad(a, ((0, 0), (0, pad)), constant_values=1.0)
        x = np.pad(x, ((0, 0), (0, pad)))
    decay = np.cumprod(a.reshape(rows, chunks, size), axis=2)
    h = np.cumsum(x.reshape(rows, chunks, size) / decay, axis=2)
    h *= decay
    if chunks > 1:
        carry = np.empty((rows, chunks - 1))
        state = h[:, 0, -1].copy()
        carry[:, 0] = state
        for c in range(1, chunks - 1):
            state = decay[:, c, -1] * state + h[:, c, -1]
            carry[:, c] = state
        h[:, 1:, :] += decay[:, 1:, :] * carry[:, :, None]
    return h.reshape(rows, chunks * size)[:, :n]
