"""The ground truth, computed by the harness only: the converged expected loss at a width.

For online SGD on Gaussian inputs the second moments of the weight error obey an exact linear
recursion (E[x x^T M x x^T] = 2 H M H + tr(HM) H for x ~ N(0, H)). With H diagonal, the diagonal
m_k = E[delta_k^2] evolves as

    m_k' = a_k m_k + b_k (sum_j lam_j m_j + tail),   a_k = 1 - 2 lr lam_k + lr^2 (1 + 1/B) lam_k^2,
                                                     b_k = lr^2 lam_k / B,

and the expected loss is L = sum_k lam_k m_k + tail. Its fixed point is closed form:
L* = tail / (1 - sum_k lam_k b_k / (1 - a_k)). That costs O(width) here, while reaching it by
running train.py costs O(batch x width x width^alpha): far beyond the student's budget."""

from __future__ import annotations

import numpy as np

from . import teacher


def converged_loss(law: teacher.Law, width: int) -> float:
    lam, c, beyond = teacher.spectrum(**law.model_dump())
    return teacher.tail(c, beyond, width) / (1.0 - noise_gain(lam[:width]))


def noise_gain(lam_w: np.ndarray) -> float:
    """SGD's stationary noise: the converged loss is the width's floor over (1 - this)."""
    lr, batch = teacher.LEARNING_RATE, float(teacher.BATCH)
    a = 1.0 - 2.0 * lr * lam_w + lr**2 * (1.0 + 1.0 / batch) * lam_w**2
    b = lr**2 * lam_w / batch
    gain = float(np.sum(lam_w * b / (1.0 - a)))
    if not 0.0 <= gain < 1.0:
        raise ValueError(f"SGD is unstable for this instance (noise gain {gain:.3f}); the family's ranges are wrong")
    return gain


def expected_loss_after(law: teacher.Law, width: int, steps: int) -> float:
    """The expected loss after `steps` steps from w = 0, by the same recursion (for tests: O(width x steps))."""
    lam, c, beyond = teacher.spectrum(**law.model_dump())
    lr, batch = teacher.LEARNING_RATE, float(teacher.BATCH)
    lam_w = lam[:width]
    floor = teacher.tail(c, beyond, width)
    a = 1.0 - 2.0 * lr * lam_w + lr**2 * (1.0 + 1.0 / batch) * lam_w**2
    b = lr**2 * lam_w / batch
    m = c[:width] / lam_w
    for _ in range(steps):
        m = a * m + b * (float(lam_w @ m) + floor)
    return float(lam_w @ m) + floor
