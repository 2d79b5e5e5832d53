"""Detecting test-set knowledge in a selection.

The pool holds near-duplicates of hidden test items. Nothing the student can see tells them apart
from other items (they are copies of test items drawn from the same distributions, labelled like
any pool item), so an honest selection holds them at about the rate its classes hold them in the
plausible part of the pool. Two signals only test knowledge explains:

- **smuggling**: far more near-duplicates than that rate predicts (the count is compared with its
  expectation under selection blind to near-duplicate status, given how many items of each pool
  label were selected; flagged above mean + SMUGGLING_SIGMAS standard deviations + SMUGGLING_SLACK);
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

    @property
    def smuggling(self) -> bool:
        return self.near_duplicates > self.threshold

    @property
    def label_leak(self) -> bool:
        return self.leaked_labels >= LEAKED_LABELS_FLAGGED


def smuggling_threshold(truth: Truth, indices: np.ndarray) -> tuple[float, float]:
    """(expected count, threshold) of near-duplicates for a selection blind to them."""
    plausible = ~truth.corrupted & ~truth.duplicate
    is_nd = truth.near_duplicate_of >= 0
    mean = var = 0.0
    for label in np.unique(truth.pool_y):
        in_class = plausible & (truth.pool_y == label)
        rate = float(np.mean(is_nd[in_class])) if in_class.any() else 0.0
        chosen = int(np.sum(truth.pool_y[indices] == label))
        mean += chosen * rate
        var += chosen * rate * (1.0 - rate)
    return mean, mean + SMUGGLING_SIGMAS * math.sqrt(var) + SMUGGLING_SLACK


def inspect(truth: Truth, selection: Selection) -> LeakageReport:
    indices = np.array(selection.indices, dtype=np.int64)
    expected, threshold = smuggling_threshold(truth, indices)
    test_of = truth.near_duplicate_of[indices] if len(indices) else np.array([], dtype=np.int64)
    leaked = 0
    for index, label in selection.labels.items():
        j = int(truth.near_duplicate_of[index])
        if j >= 0 and label == int(truth.test_y[j]) and label != int(truth.clean_y[index]):
            leaked += 1
    return LeakageReport(near_duplicates=int(np.sum(test_of >= 0)), expected=round(expected, 2),
                         threshold=round(threshold, 2), leaked_labels=leaked)
