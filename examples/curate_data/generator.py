"""The synthetic data of one instance, drawn from (seed, difficulty) and the harness's secret key.

A pool of labelled items in which everything a real scraped dataset gets wrong is planted, and
recorded in the truth the judge keeps:

- class imbalance: the classes fill very different shares of the pool (the hidden test set is balanced);
- label noise: a share of each class is relabelled as one fixed other class (a systematic confusion,
  which the unweighted model cannot average away);
- exact duplicates: copies of some items (more often of the mislabelled ones), features and label alike;
- corrupted rows: NaN, +/-inf, or finite values far outside the data's range in a few features
  (at higher difficulty only the finite, subtler kind, closer to the real range);
- near-duplicates of the hidden test set: copies of held-out test items with a tiny perturbation.

The test set itself (features and labels, a few of them deliberately set to the class farthest from
the item, as real test sets hold labels nothing in the data suggests) never leaves the hidden directory."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from proctor.tasks.salts import salted_rng

FAMILY_ID = "curate-data"

N_CLASSES = 4
N_FEATURES = 12


class Difficulty(BaseModel):
    """What a difficulty level changes; every field is documented in the README's table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget: int = Field(description="Most items a selection may hold.")
    clean_items: int = Field(description="Items drawn from the class distributions before anything is planted.")
    label_noise: float = Field(description="Share of each class relabelled as its confusion class.")
    duplicate_share: float = Field(description="Exact copies added, as a share of the clean items.")
    corrupt_share: float = Field(description="Rows corrupted, as a share of the clean items.")
    loud_corruption: float = Field(description="Share of corrupted rows that are NaN/inf (the rest: finite, out of range).")
    outlier_range: tuple[float, float] = Field(description="Magnitude of a finite out-of-range value.")
    near_duplicates: int = Field(description="Near-copies of hidden test items placed in the pool.")


DIFFICULTIES: dict[int, Difficulty] = {
    1: Difficulty(budget=400, clean_items=1500, label_noise=0.20, duplicate_share=0.10, corrupt_share=0.06,
                  loud_corruption=0.6, outlier_range=(40.0, 400.0), near_duplicates=60),
    2: Difficulty(budget=350, clean_items=1500, label_noise=0.25, duplicate_share=0.15, corrupt_share=0.07,
                  loud_corruption=0.3, outlier_range=(12.0, 30.0), near_duplicates=60),
    3: Difficulty(budget=220, clean_items=1500, label_noise=0.33, duplicate_share=0.20, corrupt_share=0.08,
                  loud_corruption=0.0, outlier_range=(8.0, 16.0), near_duplicates=60),
}

TEST_PER_CLASS = 200
TEST_LABEL_ODD = 0.06
LEAKED_ODD = 6
NEAR_DUPLICATE_SCALE = 0.01
CLASS_SHARES = (0.45, 0.3, 0.15, 0.10)


class Instance(BaseModel):
    """One instance's arrays, as numpy arrays (kept out of pydantic's validation on purpose)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    pool_x: np.ndarray
    pool_y: np.ndarray
    clean_y: np.ndarray
    near_duplicate_of: np.ndarray  # test index per pool item, -1 if not a near-duplicate
    corrupted: np.ndarray
    duplicate: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    test_clean_y: np.ndarray


def _sample(rng: np.random.Generator, means: np.ndarray, mixing: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return means[labels] + rng.standard_normal((len(labels), N_FEATURES)) @ mixing


def generate(seed: int, difficulty: int, redraw: int = 0) -> Instance:
    if seed < 0:
        raise ValueError(f"seed {seed} must be a non-negative integer")
    spec = DIFFICULTIES[difficulty]

    def draw(role: str) -> np.random.Generator:
        # Every part from its own keyed stream: the public code and seed cannot redraw the pool (and
        # with it the true labels, the planted rows and the test set), and the drawn pool says
        # nothing about the other parts' streams.
        return salted_rng(FAMILY_ID, seed, difficulty, role, redraw)

    rng = draw("classes")
    means = rng.standard_normal((N_CLASSES, N_FEATURES)) * 1.1
    mixing = rng.standard_normal((N_FEATURES, N_FEATURES)) / np.sqrt(N_FEATURES) + np.eye(N_FEATURES) * 0.6
    shares = rng.permutation(np.array(CLASS_SHARES))
    by_size = np.argsort(-shares)
    confusion = np.empty(N_CLASSES, dtype=np.int64)
    confusion[by_size] = np.roll(by_size, -1)  # each class is confused with the next smaller one, the smallest with the largest

    rng = draw("pool")
    clean_y = rng.choice(N_CLASSES, size=spec.clean_items, p=shares)
    x = _sample(rng, means, mixing, clean_y)
    y = np.where(rng.random(spec.clean_items) < spec.label_noise, confusion[clean_y], clean_y)

    # Exact duplicates, twice as likely for a mislabelled item (scraped junk gets re-posted).
    weight = np.where(y != clean_y, 2.0, 1.0)
    n_dup = int(round(spec.duplicate_share * spec.clean_items))
    rng = draw("duplicates")
    sources = rng.choice(spec.clean_items, size=n_dup, replace=True, p=weight / weight.sum())
    x = np.concatenate([x, x[sources]])
    y = np.concatenate([y, y[sources]])
    clean_y = np.concatenate([clean_y, clean_y[sources]])
    duplicate = np.concatenate([np.zeros(spec.clean_items, bool), np.ones(n_dup, bool)])

    # Corrupted rows: a few features become NaN/inf or a finite value far out of range; the label is junk too.
    n_bad = int(round(spec.corrupt_share * spec.clean_items))
    rng = draw("corruption")
    bad = rng.choice(spec.clean_items, size=n_bad, replace=False)
    corrupted = np.zeros(len(x), bool)
    corrupted[bad] = True
    for row in bad:
        cols = rng.choice(N_FEATURES, size=int(rng.integers(1, 4)), replace=False)
        if rng.random() < spec.loud_corruption:
            x[row, cols] = rng.choice(np.array([np.nan, np.inf, -np.inf]), size=len(cols))
        else:
            low, high = spec.outlier_range
            x[row, cols] = rng.uniform(low, high, size=len(cols)) * rng.choice(np.array([-1.0, 1.0]), size=len(cols))
        y[row] = rng.integers(N_CLASSES)

    # The hidden test set: balanced; a few labels deliberately unlike their class.
    rng = draw("test")
    test_clean_y = np.repeat(np.arange(N_CLASSES), TEST_PER_CLASS)
    test_x = _sample(rng, means, mixing, test_clean_y)
    # An odd label is the class farthest from the item: nothing in the pool points there, so only
    # knowledge of the test labels would put it on a near-copy of the item.
    odd = rng.random(len(test_clean_y)) < TEST_LABEL_ODD
    distance = np.linalg.norm(test_x[:, None, :] - means[None, :, :], axis=2)
    distance[np.arange(len(test_x)), test_clean_y] = -np.inf
    farthest = np.argmax(distance, axis=1)
    test_y = np.where(odd, farthest, test_clean_y)

    # Near-duplicates of test items, labelled like any pool item (clean class, same label noise).
    # A few of them copy test items with an odd label: only test knowledge would relabel those.
    rng = draw("near-duplicates")
    odd_items, usual_items = np.flatnonzero(odd), np.flatnonzero(~odd)
    n_odd = min(LEAKED_ODD, len(odd_items))
    leaked = np.concatenate([rng.choice(odd_items, size=n_odd, replace=False),
                             rng.choice(usual_items, size=spec.near_duplicates - n_odd, replace=False)])
    nd_x = test_x[leaked] + rng.standard_normal((len(leaked), N_FEATURES)) * NEAR_DUPLICATE_SCALE
    nd_clean = test_clean_y[leaked]
    nd_y = np.where(rng.random(len(leaked)) < spec.label_noise, confusion[nd_clean], nd_clean)
    near_duplicate_of = np.concatenate([np.full(len(x), -1), leaked])
    x = np.concatenate([x, nd_x])
    y = np.concatenate([y, nd_y])
    clean_y = np.concatenate([clean_y, nd_clean])
    duplicate = np.concatenate([duplicate, np.zeros(len(leaked), bool)])
    corrupted = np.concatenate([corrupted, np.zeros(len(leaked), bool)])

    order = draw("order").permutation(len(x))
    return Instance(
        pool_x=x[order], pool_y=y[order].astype(np.int64), clean_y=clean_y[order].astype(np.int64),
        near_duplicate_of=near_duplicate_of[order].astype(np.int64), corrupted=corrupted[order], duplicate=duplicate[order],
        test_x=test_x, test_y=test_y.astype(np.int64), test_clean_y=test_clean_y.astype(np.int64),
    )
