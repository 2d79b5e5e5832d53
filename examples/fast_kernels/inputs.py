"""Input and evidence generators, shared by the judge (harness side) and the in-sandbox driver.

This file is plain numpy and is also sent, as source, into the student's grading sandbox, so the
inputs the student's kernel receives and the inputs the judge's float64 reference sees are made by
the same code from the same seed. Nothing here is secret: the seeds are drawn by the judge at
grading time and the student sees each one only when the call that uses it starts."""

import numpy as np

KERNEL_NAMES = ("softmax", "layer_norm", "conv1d", "linear_scan")


def make_inputs(kernel, seed, shape, params):
    """The positional arguments of one kernel call: float64 arrays (and scalars)."""
    rng = np.random.default_rng(seed)
    rows, cols = int(shape[0]), int(shape[1])
    if kernel == "softmax":
        x = rng.random((rows, cols))
        x *= 16.0
        x -= 8.0
        return (x, float(params["temperature"]))
    if kernel == "layer_norm":
        x = rng.random((rows, cols))
        x *= 6.0
        x += rng.random((rows, 1)) * 40.0 - 20.0  # large per-row offsets punish E[x^2] - E[x]^2
        gamma = rng.random(cols) + 0.5
        beta = rng.random(cols) - 0.5
        return (x, gamma, beta, float(params["eps"]))
    if kernel == "conv1d":
        x = rng.random((rows, cols))
        x *= 2.0
        x -= 1.0
        taps = int(params["taps"])
        w = rng.random(taps) * 2.0 - 1.0
        bias = float(rng.random() - 0.5)
        return (x, w, bias)
    if kernel == "linear_scan":
        a = rng.random((rows, cols))
        a *= 0.5
        a += 0.5
        x = rng.random((rows, cols))
        x *= 2.0
        x -= 1.0
        return (a, x)
    raise ValueError(f"unknown kernel {kernel!r}")


def output_shape(kernel, shape, params):
    rows, cols = int(shape[0]), int(shape[1])
    if kernel == "conv1d":
        return (rows, cols - int(params["taps"]) + 1)
    return (rows, cols)


def evidence_weights(seed, out_shape):
    """Random weights for the evidence of one call: w over columns (a checksum per row), and u, v
    over rows and columns for one global quadratic checksum."""
    rng = np.random.default_rng(seed)
    w = rng.random(out_shape[1]) * 2.0 - 1.0
    u = rng.random(out_shape[0])
    v = rng.random(out_shape[1])
    return w, u, v
