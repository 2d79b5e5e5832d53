"""What the judge expects back from one kernel call, and how it compares, with stated tolerances.

The output itself never crosses the channel (it would cost more to serialise than to compute).
The driver returns evidence computed from it with weights drawn per call: one weighted checksum
per row, one global quadratic checksum, and the values at sampled positions. The judge computes
the same evidence from its float64 reference. Tolerances are stated per element and carried into
each checksum exactly, so an output within tolerance always passes:

    |out[i, j] - ref[i, j]| <= RTOL * |ref[i, j]| + ATOL * rms(ref)

RTOL and ATOL admit float32 arithmetic; anything coarser fails."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from .inputs import evidence_weights

RTOL = 1e-4
ATOL = 1e-5
_ROUNDING = 1e-9  # the driver's own float64 summation of the evidence


class Expected(BaseModel):
    """The reference evidence of one call and its tolerance bands."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    out_shape: tuple[int, int]
    rows: np.ndarray
    rows_tol: np.ndarray
    quad: float
    quad_tol: float
    samples: np.ndarray
    samples_tol: np.ndarray


def expected_evidence(ref: np.ndarray, evidence_seed: int, samples: list[tuple[int, int]]) -> Expected:
    w, u, v = evidence_weights(evidence_seed, ref.shape)
    scale = float(np.sqrt(np.mean(ref * ref))) if ref.size else 0.0
    tol = RTOL * np.abs(ref) + ATOL * scale + 1e-300
    abs_w = np.abs(w)
    rows = ref @ w
    rows_tol = tol @ abs_w + _ROUNDING * (np.abs(ref) @ abs_w) + 1e-12 * (1.0 + scale)
    sq = ref * ref
    quad = float(u @ (sq @ v))
    quad_tol = float(u @ ((tol * (2.0 * np.abs(ref) + tol)) @ v)) + _ROUNDING * abs(quad) + 1e-12
    idx = tuple(np.array(samples).T)
    return Expected(out_shape=ref.shape, rows=rows, rows_tol=rows_tol, quad=quad, quad_tol=quad_tol,
                    samples=ref[idx], samples_tol=tol[idx])


def _floats(value: Any, n: int) -> np.ndarray | None:
    if not isinstance(value, list) or len(value) != n:
        return None
    if not all(type(item) in (int, float) for item in value):
        return None
    return np.array(value, dtype=np.float64)


def mismatch(reply: Any, want: Expected) -> str | None:
    """None when the reply is the evidence of an output within tolerance, else why not."""
    if not isinstance(reply, dict):
        return "the driver's reply is not an object"
    shape = reply.get("shape")
    if shape != list(want.out_shape):
        return f"output shape {shape} where {list(want.out_shape)} was expected"
    if reply.get("finite") is not True:
        return "the output has NaN or infinite values"
    rows = _floats(reply.get("rows"), want.out_shape[0])
    samples = _floats(reply.get("samples"), len(want.samples))
    quad = reply.get("quad")
    if rows is None or samples is None or type(quad) not in (int, float):
        return "the driver's evidence is malformed"
    bad_rows = np.flatnonzero(np.abs(rows - want.rows) > want.rows_tol)
    if bad_rows.size:
        return f"{bad_rows.size} of {want.out_shape[0]} rows differ from the reference beyond tolerance (first: row {int(bad_rows[0])})"
    bad = np.flatnonzero(np.abs(samples - want.samples) > want.samples_tol)
    if bad.size:
        return f"{bad.size} of {len(want.samples)} sampled elements differ from the reference beyond tolerance"
    if abs(float(quad) - want.quad) > want.quad_tol:
        return "the quadratic checksum differs from the reference beyond tolerance"
    return None
