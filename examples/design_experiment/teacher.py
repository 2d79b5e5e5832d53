"""The instance's teacher, harness side: the whole law, of which the train tool uses a prefix.

The task's hidden dir holds the first `max_width` features (teacher.npy) and the total signal
beyond them (train.json): enough for train.py, run by the `train` tool outside the sandbox, to
train any width up to max_width exactly. The student sees none of it, only what runs print: the
loss at the target width, beyond max_width, must be inferred by experiment.

The model: inputs x ~ N(0, diag(lam)) with lam_k = k^-alpha over MODES features; the teacher's
label is y = x . w*, with per-feature signal c_k = lam_k w*_k^2 (jittered) whose tail beyond
feature W follows a smoothly broken power law: exponent `inner` below a knee width, `outer` above
it. A width-W student sees the first W features; the rest act as label noise of variance tail(W).
So widths below the knee show the wrong slope: an experiment must reach past it."""

import numpy as np
from pydantic import BaseModel, Field

from proctor.tasks.salts import salted_rng, salted_seed

MODES = 1 << 20  # features of the teacher
LEARNING_RATE = 1.0
BATCH = 8
SHARPNESS = 4.0  # how abruptly the tail's exponent changes at the knee
FAMILY_ID = "scaling-law"
# The teacher's features come in blocks that end at each difficulty's max_width: a difficulty shows
# whole blocks and hides whole blocks, and every block's jitter and signs are their own salted draw,
# so the shown prefix says nothing about the hidden features' draws.
BLOCK_ENDS = (512, 4096, 32768, MODES)


def signal_beyond(width: np.ndarray, scale: float, inner: float, outer: float, knee: float) -> np.ndarray:
    """A smoothly broken power law: about scale * W^-inner below the knee, ~ W^-outer well above it."""
    return scale * width ** -inner * (1.0 + (width / knee) ** SHARPNESS) ** (-(outer - inner) / SHARPNESS)


def _blocks(seed: int, role: str, draw) -> np.ndarray:
    """One array over all MODES features, each block from its own salted stream."""
    parts, start = [], 0
    for block, end in enumerate(BLOCK_ENDS):
        parts.append(draw(salted_rng(FAMILY_ID, seed, 0, role, block), end - start))
        start = end
    return np.concatenate(parts)


def spectrum(alpha: float, inner: float, outer: float, knee: float, scale: float, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(lam, c, beyond): feature variances, per-feature signal c_k = lam_k w*_k^2, and the signal
    beyond the last feature (so tail(W) = c[W:].sum() + beyond)."""
    k = np.arange(1, MODES + 1, dtype=np.float64)
    lam = k ** -alpha
    jitter = np.exp(0.1 * _blocks(seed, "jitter", lambda rng, n: rng.standard_normal(n)))
    levels = signal_beyond(k, scale, inner, outer, knee)  # levels[i] = signal beyond feature i + 1
    c = np.empty(MODES)
    c[0] = 0.5 * scale
    c[1:] = (levels[:-1] - levels[1:]) * jitter[1:]
    return lam, c, float(levels[-1])


class Law(BaseModel):
    """An instance's hidden law, drawn from the seed. The student never sees these numbers, only
    the teacher's first max_width features that they produce."""

    alpha: float = Field(description="Feature spectrum exponent: lam_k = k^-alpha.")
    inner: float = Field(description="Exponent of the tail signal below the knee.")
    outer: float = Field(description="Exponent of the tail signal above the knee: what decides the target.")
    knee: float = Field(description="Width where the exponent changes.")
    scale: float
    seed: int = Field(description="The instance's public seed; with the harness's key it salts every draw.")


def draw_law(seed: int) -> Law:
    # The law depends on the seed only (difficulty 0 in the salt), so the same teacher at a higher
    # difficulty is the same question asked further out. Salted: the public code and seed alone
    # cannot redraw it (a student re-running this function over its seed would read the answer).
    return law_from(salted_rng(FAMILY_ID, seed, 0, "law"), seed)


def law_from(rng: np.random.Generator, seed: int) -> Law:
    """The law's prior: public, so a student can sample it (the red team's prior-median guess does)."""
    outer = float(rng.uniform(0.3, 0.8))
    bend = float(rng.uniform(0.15, 0.35)) * (1.0 if rng.random() < 0.5 else -1.0)
    return Law(alpha=round(float(rng.uniform(1.3, 1.6)), 6), inner=round(min(1.2, max(0.1, outer + bend)), 6),
               outer=round(outer, 6), knee=round(float(np.exp(rng.uniform(np.log(8.0), np.log(32.0)))), 6),
               scale=round(float(np.exp(rng.uniform(np.log(0.003), np.log(3.0)))), 6), seed=seed)


def teacher_weights(lam: np.ndarray, c: np.ndarray, seed: int, width: int) -> np.ndarray:
    """The first `width` teacher weights, with random signs (prefix-consistent across widths)."""
    signs = np.where(_blocks(seed, "signs", lambda rng, n: rng.random(n))[:width] < 0.5, -1.0, 1.0)
    return signs * np.sqrt(c[:width] / lam[:width])


def stream_seed(seed: int) -> int:
    """The seed of train.py's data streams: shown to the student, so drawn apart from everything hidden."""
    return salted_seed(FAMILY_ID, seed, 0, "stream") % 2**63


def tail(c: np.ndarray, beyond: float, width: int) -> float:
    """Signal a width-`width` model cannot represent: the loss floor of that width."""
    return float(c[width:].sum() + beyond)
