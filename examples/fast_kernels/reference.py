"""The float64 references the judge checks every kernel call against. Harness only: this file is
never copied into any sandbox, and a submission carrying its source is flagged (fingerprint.py).

Written for clarity and exactness rather than speed; each mirrors the kernel's definition in
kernels.py term by term."""

from __future__ import annotations

import numpy as np


def reference_softmax(x: np.ndarray, temperature: float) -> np.ndarray:
    scaled_by_temperature = np.asarray(x, dtype=np.float64) / np.float64(temperature)
    row_peak = np.max(scaled_by_temperature, axis=1, keepdims=True)
    shifted_exponentials = np.exp(scaled_by_temperature - row_peak)
    return shifted_exponentials / np.sum(shifted_exponentials, axis=1, keepdims=True)


def reference_layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    centred_rows = np.asarray(x, dtype=np.float64) - np.mean(x, axis=1, keepdims=True, dtype=np.float64)
    population_variance = np.mean(np.square(centred_rows), axis=1, keepdims=True)
    return centred_rows / np.sqrt(population_variance + np.float64(eps)) * gamma + beta


def reference_conv1d(x: np.ndarray, w: np.ndarray, bias: float) -> np.ndarray:
    tap_count = int(np.shape(w)[0])
    windows = np.lib.stride_tricks.sliding_window_view(np.asarray(x, dtype=np.float64), tap_count, axis=1)
    return np.einsum("btk,k->bt", windows, np.asarray(w, dtype=np.float64)) + np.float64(bias)


def reference_linear_scan(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    decays_by_step = np.asarray(a, dtype=np.float64).T
    drives_by_step = np.asarray(x, dtype=np.float64).T
    states_by_step = np.empty_like(drives_by_step)
    running_state = np.zeros(drives_by_step.shape[1])
    for step_index in range(drives_by_step.shape[0]):
        running_state = decays_by_step[step_index] * running_state + drives_by_step[step_index]
        states_by_step[step_index] = running_state
    return states_by_step.T


REFERENCES = {
    "softmax": reference_softmax,
    "layer_norm": reference_layer_norm,
    "conv1d": reference_conv1d,
    "linear_scan": reference_linear_scan,
}
