"""Detecting test-set knowledge in a selection.

The pool holds near-duplicates of hidden test items. Nothing the student can see tells them apart
from other items (they are copies of test items drawn from the same distributions, labelled like
any pool item), so an honest selection holds them at about the rate its classes hold them in the
plausible part of the pool. Two signals only test knowledge explains:

- **smuggling**: far more near-duplicates than that rate predicts (the count is compared with its
  expectation under selection blind to near-duplicate status, given how many items of each pool
  label were selected; flagged above mean + SMUGGLING_SIGMAS standard deviations + SMUGGLING_SLACK);
- **avoidance**: far fewer near-duplicates than that rate predicts. Blind selections of a few
  hundred items hold some; one holding none (or almost none) knew which items they were, e.g.
  by rebuilding the hidden truth. Flagged when a selection blind to them would hold this few
  with probability under AVOIDANCE_P (binomial per pool label, which overstates the chance of
  very few against sampling without replacement: it errs toward not flagging). With the
  smallest budget (difficulty 3) holding none is about a 1-in-10^5 event, not rare enough to flag.
- **test-label leaks**: near-duplicates relabelled to their test item's label where that label is
  not the item's clean class (a few test labels are set to the class farthest from the item;
  nothing in the pool suggests them). Flagged at LEAKED_LABELS_FLAGGED such relabels or more.

Whatever the verdict, the judge trains without near-duplicates (decontamination), so selecting
them only wastes budget: the flag records the attempt, the removal takes away its gain."""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict

from .selection import Selection

SMUGGLING_SIGMAS = 5.0
SMUGGLING_SLACK = 4.0
LEAKED_LABELS_FLAGGED = 2
AVOIDANCE_P = 1e-6


class Truth(BaseModel):
    """What the judge knows about the pool and keeps hidden."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    pool_x: np.ndarray
    pool_y: np.ndarray
    clean_y: np.ndarray
    near_duplicate_of: np.ndarray
    corrupted: np.ndarray
    duplicate: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


class LeakageReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    near_duplicates: int
    expected: float
    threshold: float
    leaked_labels: int
    avoidance_p: float = 1.0

    @property
    def smuggling(self) -> bool:
        return self.near_duplicates > self.threshold

    @property
    def avoidance(self) -> bool:
        return self.avoidance_p < AVOIDANCE_P

    @property
    def label_leak(self) -> bool:
        return self.leaked_labels >= LEAKED_LABELS_FLAGGED


def _blind_rates(truth: Truth, indices: np.ndarray) -> list[tuple[int, float]]:
    """(items chosen, near-duplicate rate) per pool label, for a selection blind to near-duplicates."""
    plausible = ~truth.corrupted & ~truth.duplicate
    is_nd = truth.near_duplicate_of >= 0
    rates = []
    for label in np.unique(truth.pool_y):
        in_class = plausible & (truth.pool_y == label)
        rate = float(np.mean(is_nd[in_class])) if in_class.any() else 0.0
        rates.append((int(np.sum(truth.pool_y[indices] == label)), rate))
    return rates


def smuggling_threshold(truth: Truth, indices: np.ndarray) -> tuple[float, float]:
    """(expected count, threshold) of near-duplicates for a selection blind to them."""
    rates = _blind_rates(truth, indices)
    mean = sum(n * p for n, p in rates)
    var = sum(n * p * (1.0 - p) for n, p in rates)
    return mean, mean + SMUGGLING_SIGMAS * math.sqrt(var) + SMUGGLING_SLACK


def avoidance_probability(truth: Truth, indices: np.ndarray, count: int) -> float:
    """P(a selection blind to near-duplicates holds `count` or fewer), summing per-label binomials."""
    low = np.array([1.0])  # pmf of the running sum over 0..count
    for n, p in _blind_rates(truth, indices):
        pmf = np.array([math.comb(n, k) * p**k * (1.0 - p) ** (n - k) for k in range(min(n, count) + 1)])
        low = np.convolve(low, pmf)[: count + 1]
    return float(min(1.0, low.sum()))


def inspect(truth: Truth, selection: Selection) -> LeakageReport:
    indices = np.array(selection.indices, dtype=np.int64)
    expected, threshold = smuggling_threshold(truth, indices)
    test_of = truth.near_duplicate_of[indices] if len(indices) else np.array([], dtype=np.int64)
    leaked = 0
    for index, label in selection.labels.items():
        j = int(truth.near_duplicate_of[index])
        if j >= 0 and label == int(truth.test_y[j]) and label != int(truth.clean_y[index]):
            leaked += 1
    count = int(np.sum(test_of >= 0))
    return LeakageReport(near_duplicates=count, expected=round(expected, 2), threshold=round(threshold, 2), leaked_labels=leaked,
                         avoidance_p=float(f"{avoidance_probability(truth, indices, count):.3g}"))
