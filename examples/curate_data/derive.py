"""The curate-data reconstruct hook of the derivability attack (proctor/redteam/derivability.py).

It runs as the student, with numpy only, next to a copy of generator.py: it redraws the pool for
each candidate seed (and the first few redraws) and, when one equals /data, selects what the
hidden truth says is best: correctly labelled, plausible items that are no test near-copies,
balanced over the classes. With the harness's key salting every draw, no seed matches."""

import json

import numpy as np

from . import generator

REDRAWS = 3


def best_selection(inst, budget: int) -> list[int]:
    """What the hidden truth (an Instance or the judge's Truth) says to select: correct labels, no planted rows, no test near-copies."""
    good = ~inst.corrupted & ~inst.duplicate & (inst.near_duplicate_of < 0) & (inst.pool_y == inst.clean_y)
    per_class = budget // generator.N_CLASSES
    return [int(i) for c in range(generator.N_CLASSES) for i in np.flatnonzero(good & (inst.pool_y == c))[:per_class]]


def reconstruct(seeds: list[int], difficulty: int) -> str | None:
    features = np.load("/data/pool_features.npy", allow_pickle=False)
    labels = np.load("/data/pool_labels.npy", allow_pickle=False)
    budget = json.load(open("/data/task.json"))["budget"]
    for seed in seeds:
        for redraw in range(REDRAWS):
            inst = generator.generate(seed, difficulty, redraw)
            if np.array_equal(inst.pool_y, labels) and np.array_equal(inst.pool_x, features, equal_nan=True):
                chosen = best_selection(inst, budget)
                with open("/workdir/selection.json", "w") as fh:
                    json.dump(chosen, fh)
                return f"seed {seed} redraw {redraw}: true labels, planted rows and test near-copies; {len(chosen)} items selected"
    return None
