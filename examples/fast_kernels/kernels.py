"""The kernels of the family, their shapes by difficulty, their per-instance parameters and the
speedup each difficulty asks for.

A difficulty moves the input shapes towards ones where half-vectorised code loses (many short
rows, long sequential scans, wide filters) and raises the target speedup over the baseline."""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

from .inputs import KERNEL_NAMES


class ShapeRange(BaseModel):
    """Inclusive ranges the judge draws each call's (rows, cols) from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: tuple[int, int]
    cols: tuple[int, int]


class Level(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    shapes: ShapeRange
    target_speedup: float = Field(gt=1.0, description="Speedup over the baseline that earns the full score.")
    taps: tuple[int, int] | None = Field(None, description="conv1d only: the filter length range.")


class KernelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    signature: str
    definition: str
    levels: dict[int, Level]


def _level(rows: tuple[int, int], cols: tuple[int, int], target: float, taps: tuple[int, int] | None = None) -> Level:
    return Level(shapes=ShapeRange(rows=rows, cols=cols), target_speedup=target, taps=taps)


KERNELS: dict[str, KernelSpec] = {
    "softmax": KernelSpec(
        name="softmax", signature="softmax(x, temperature)",
        definition="out[i, j] = exp(x[i, j] / T - m_i) / sum_k exp(x[i, k] / T - m_i), m_i = max_k x[i, k] / T (row-wise softmax)",
        levels={1: _level((8, 16), (2048, 4096), 15.0), 2: _level((64, 128), (256, 512), 18.0),
                3: _level((512, 1024), (32, 64), 12.0)},
    ),
    "layer_norm": KernelSpec(
        name="layer_norm", signature="layer_norm(x, gamma, beta, eps)",
        definition="out[i, j] = (x[i, j] - mean_i) / sqrt(var_i + eps) * gamma[j] + beta[j], var_i the population variance of row i",
        levels={1: _level((8, 16), (2048, 4096), 15.0), 2: _level((64, 128), (256, 512), 18.0),
                3: _level((512, 1024), (32, 64), 12.0)},
    ),
    "conv1d": KernelSpec(
        name="conv1d", signature="conv1d(x, w, bias)",
        definition="out[i, t] = bias + sum_k w[k] * x[i, t + k], t = 0 .. cols - taps (valid cross-correlation of each row)",
        levels={1: _level((8, 16), (1024, 2048), 15.0, (4, 6)), 2: _level((4, 8), (1024, 2048), 20.0, (12, 16)),
                3: _level((4, 8), (1024, 2048), 25.0, (24, 32))},
    ),
    "linear_scan": KernelSpec(
        name="linear_scan", signature="linear_scan(a, x)",
        definition="h[i, 0] = x[i, 0]; h[i, t] = a[i, t] * h[i, t - 1] + x[i, t] (0.5 <= a < 1), a linear recurrence along each row",
        levels={1: _level((256, 512), (128, 256), 4.0), 2: _level((32, 64), (1024, 2048), 4.5),
                3: _level((8, 16), (4096, 8192), 4.5)},
    ),
}
assert tuple(KERNELS) == KERNEL_NAMES

DIFFICULTIES = (1, 2, 3)


def kernel_for(seed: int, requested: str) -> KernelSpec:
    """The kernel of an instance: the one asked for, else one chosen by the seed."""
    if requested:
        if requested not in KERNELS:
            raise ValueError(f"unknown kernel {requested!r}; choose one of {', '.join(KERNELS)} (or leave it empty)")
        return KERNELS[requested]
    return KERNELS[KERNEL_NAMES[seed % len(KERNEL_NAMES)]]


def instance_params(spec: KernelSpec, seed: int, difficulty: int) -> dict[str, float | int]:
    """The scalar parameters fixed for the whole instance (stated in the instructions)."""
    rng = random.Random(f"fast-kernels/{spec.name}/{seed}/{difficulty}")
    if spec.name == "softmax":
        return {"temperature": round(rng.uniform(0.5, 2.0), 3)}
    if spec.name == "layer_norm":
        return {"eps": rng.choice([1e-5, 1e-6])}
    if spec.name == "conv1d":
        low, high = spec.levels[difficulty].taps or (4, 4)
        return {"taps": rng.randint(low, high)}
    return {}
