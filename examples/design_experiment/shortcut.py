"""The analytic shortcut: the best answer a student can give without running an experiment.

With the teacher hidden, what the student can see is the public code (teacher.py's prior over
laws, truth.py's closed form, train.py) and /data/instance.json (widths, batch, learning rate,
budget, a salted stream seed that says nothing of the teacher). The best guess from those is the
median over the law's public prior of the expected converged loss at the target width. It is not
a red-team attack: a constant lands within the score's band on some instances by luck (about one
in five), so it is measured across seeds instead (tests/test_family_design_experiment.py)."""

from __future__ import annotations

import math

import numpy as np

from . import teacher, truth


def prior_median(target_width: int, draws: int = 256) -> float:
    """The median, over `draws` laws from the public prior, of the expected converged loss at the width."""
    rng = np.random.default_rng(0)
    harmonic = np.arange(1, target_width + 1, dtype=np.float64) ** -1.0
    losses = []
    for _ in range(draws):
        law = teacher.law_from(rng, seed=0)
        floor = float(teacher.signal_beyond(np.float64(target_width), law.scale, law.inner, law.outer, law.knee))
        # E[jitter] = exp(0.1^2 / 2): the expected floor of a jittered teacher.
        losses.append(floor * math.exp(0.005) / (1.0 - truth.noise_gain(harmonic ** law.alpha)))
    return float(np.median(losses))
