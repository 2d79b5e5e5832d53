"""The reference curation (the oracle's method), numpy only, so it runs in the student's sandbox
exactly as the generator runs it harness-side to set the top of the score scale.

    python3 curation.py /data /workdir/selection.json

1. drop rows with a non-finite value, or a value far outside its feature's robust range
   (more than OUTLIER_Z robust standard deviations, median/MAD, from the feature's median);
2. drop exact duplicates (keep the first copy; a duplicate with a conflicting label drops them all);
3. drop items whose label disagrees with the majority of their K nearest neighbours (a k-NN
   agreement filter, on robustly standardised features);
4. balance the classes: an equal share of the budget per class, the best-agreeing items first;
   a class with too few items leaves its share to the others.
It never relabels; it only selects. Output: a JSON array of pool indices."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

OUTLIER_Z = 6.0
K = 10


def robust_scale(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    median = np.median(x, axis=0)
    mad = np.median(np.abs(x - median), axis=0) * 1.4826
    return median, np.where(mad > 0, mad, 1.0)


def plausible_rows(x: np.ndarray) -> np.ndarray:
    finite = np.all(np.isfinite(x), axis=1)
    median, scale = robust_scale(x[finite])
    z = np.abs(np.where(np.isfinite(x), x, 0.0) - median) / scale
    return finite & np.all(z <= OUTLIER_Z, axis=1)


def unique_rows(x: np.ndarray, y: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Indices (among candidates) of the first copy of each distinct row whose copies all agree on the label."""
    keep = []
    seen: dict[bytes, list[int]] = {}
    for i in candidates:
        seen.setdefault(x[i].tobytes(), []).append(int(i))
    for copies in seen.values():
        if len({int(y[i]) for i in copies}) == 1:
            keep.append(copies[0])
    return np.array(sorted(keep), dtype=np.int64)


def neighbour_agreement(x: np.ndarray, y: np.ndarray, n_classes: int) -> np.ndarray:
    """For each row, the share of its K nearest other rows that carry its label."""
    median, scale = robust_scale(x)
    z = (x - median) / scale
    sq = np.sum(z * z, axis=1)
    dist = sq[:, None] + sq[None, :] - 2.0 * (z @ z.T)
    np.fill_diagonal(dist, np.inf)
    nearest = np.argsort(dist, axis=1, kind="stable")[:, :K]
    return np.mean(y[nearest] == y[:, None], axis=1)


def balanced(agreement: np.ndarray, y: np.ndarray, n_classes: int, budget: int) -> np.ndarray:
    """Positions chosen: per class, the best-agreeing first, equal shares of the budget."""
    by_class = [np.flatnonzero(y == c)[np.argsort(-agreement[y == c], kind="stable")] for c in range(n_classes)]
    taken = [0] * n_classes
    left = min(budget, len(y))
    while left > 0:
        open_classes = [c for c in range(n_classes) if taken[c] < len(by_class[c])]
        share = max(1, left // len(open_classes))
        for c in open_classes:
            more = min(share, len(by_class[c]) - taken[c], left)
            taken[c] += more
            left -= more
            if left == 0:
                break
    return np.sort(np.concatenate([by_class[c][: taken[c]] for c in range(n_classes)]))


def curate(x: np.ndarray, y: np.ndarray, n_classes: int, budget: int) -> list[int]:
    candidates = unique_rows(x, y, np.flatnonzero(plausible_rows(x)))
    agreement = neighbour_agreement(x[candidates], y[candidates], n_classes)
    agreeing = agreement > 0.5
    kept = candidates[agreeing]
    chosen = balanced(agreement[agreeing], y[kept], n_classes, budget)
    return [int(i) for i in kept[chosen]]


def main(data_dir: str, out_path: str) -> None:
    data = Path(data_dir)
    info = json.loads((data / "task.json").read_text())
    x = np.load(data / "pool_features.npy", allow_pickle=False)
    y = np.load(data / "pool_labels.npy", allow_pickle=False)
    Path(out_path).write_text(json.dumps(curate(x, y, info["n_classes"], info["budget"])))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
