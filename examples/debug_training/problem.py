"""The synthetic classification problems: a seed and a difficulty give a data distribution.

Each class is a mixture of Gaussian clusters in a latent space; what the student's script sees
is the latent point pushed through a per-feature affine map (scales from 0.1 to 10, offsets of
tens of units), so training without standardising, or standardising with the wrong statistics,
fails. More clusters per class (higher difficulty) make the boundary less linear.

The distribution's parameters never leave the harness: the student gets samples only, and the
judge draws its held-out samples from a stream the student's script is never given."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_TRAIN = 2000
N_VALID = 500
N_TEST = 4000


@dataclass(frozen=True)
class Shape:
    """The size of a problem at one difficulty."""

    features: int
    classes: int
    clusters: int  # per class
    separation: float  # spread of the cluster centres, in units of the cluster width


SHAPES = {
    1: Shape(features=8, classes=3, clusters=1, separation=1.6),
    2: Shape(features=10, classes=4, clusters=2, separation=2.1),
    3: Shape(features=12, classes=5, clusters=4, separation=2.0),
}
LABEL_NOISE = 0.02


@dataclass(frozen=True)
class Problem:
    """One data distribution (everything here is judge-side knowledge)."""

    centres: np.ndarray  # (classes, clusters, features), latent space
    scale: np.ndarray  # (features,)
    offset: np.ndarray  # (features,)

    @property
    def classes(self) -> int:
        return self.centres.shape[0]

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n labelled samples: X float64 (n, features), y int64 (n,), classes balanced in expectation."""
        classes, clusters, features = self.centres.shape
        y = rng.integers(0, classes, n)
        which = rng.integers(0, clusters, n)
        latent = self.centres[y, which] + rng.normal(0.0, 1.0, (n, features))
        flip = rng.random(n) < LABEL_NOISE
        y = np.where(flip, rng.integers(0, classes, n), y)
        return latent * self.scale + self.offset, y.astype(np.int64)


def make_problem(seed: int, difficulty: int) -> Problem:
    shape = SHAPES[difficulty]
    rng = np.random.default_rng([seed, difficulty, 0xD47A])
    centres = rng.normal(0.0, shape.separation, (shape.classes, shape.clusters, shape.features))
    scale = np.exp(rng.uniform(np.log(0.1), np.log(10.0), shape.features))
    offset = rng.normal(0.0, 30.0, shape.features) * scale
    return Problem(centres=centres, scale=scale, offset=offset)


def split_rngs(seed: int, difficulty: int) -> tuple[np.random.Generator, np.random.Generator]:
    """The sample streams of the files a script is given (train, valid) for a problem seed."""
    return np.random.default_rng([seed, difficulty, 1]), np.random.default_rng([seed, difficulty, 2])


def training_files(seed: int, difficulty: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What /data holds for a problem: {"train": (X, y), "valid": (X, y)}."""
    problem = make_problem(seed, difficulty)
    train_rng, valid_rng = split_rngs(seed, difficulty)
    return {"train": problem.sample(N_TRAIN, train_rng), "valid": problem.sample(N_VALID, valid_rng)}


def held_out(seed: int, difficulty: int, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """The judge's held-out samples: a stream no file the script gets is drawn from; `stream` is
    drawn fresh by the judge at grading time, so even the problem's owner cannot predict them."""
    problem = make_problem(seed, difficulty)
    return problem.sample(N_TEST, np.random.default_rng([seed, difficulty, 3, stream]))
