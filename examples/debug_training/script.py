"""The training script the student debugs, and the catalog of bugs planted in it.

The script is one template with named slots; each slot has its correct text and, for the bugs
that live there, a buggy text. The bug-free script (every slot correct) is the reference the
judge retrains with and what the oracle submits. A bug is `destructive` when on its own it takes
held-out accuracy to about chance (score 0), and costs part of the score otherwise (not zeroing
the gradients works as a badly tuned momentum, for instance); `subtle` ones are harder to see in
the code. Every instance's first bug is destructive, so the unfixed script always scores 0, and an
instance plants bugs of different categories only, so two bugs never cancel (a negative learning
rate and an ascending update, say). tests/test_family_debug_training.py measures both claims."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proctor.tasks.salts import salted_rng

TEMPLATE = '''\
"""Train a small MLP classifier on /data/train.npz and write the weights to /workdir/weights.npz.

Run as: TRAIN_SEED=<int> python3 train.py   (the grader sets TRAIN_SEED and gives other data)
Data:   /data/train.npz and /data/valid.npz, each with X float64 (n, d) and y int64 (n,) in 0..k-1.
Output: /workdir/weights.npz (np.savez, no pickled objects) with float arrays
        mean (d,), scale (d,), W1 (d, h), b1 (h,), W2 (h, k), b2 (k,)
Model:  logits = relu(((x - mean) / scale) @ W1 + b1) @ W2 + b2; the prediction is argmax(logits).
"""
import os

import numpy as np

SEED = int(os.environ.get("TRAIN_SEED", "0"))
DATA_DIR = os.environ.get("DATA_DIR", "/data")
WEIGHTS_PATH = os.environ.get("WEIGHTS_PATH", "/workdir/weights.npz")
HIDDEN = @HIDDEN@
EPOCHS = @EPOCHS@
BATCH = 100
BASE_LR = 0.2
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4


def load(name):
    with np.load(os.path.join(DATA_DIR, name + ".npz")) as f:
        X, y = f["X"].astype(np.float64), f["y"].astype(np.int64)
@@load@@
    return X, y


def standardise_stats(X):
    mean = X.mean(axis=0)
    scale = X.std(axis=0) + 1e-8
    return mean, scale


def softmax(z):
@@softmax@@


def lr_at(step, total):
    """Linear decay from BASE_LR to zero over the run."""
@@lr@@


def predict(params, X):
    hidden = np.maximum(X @ params["W1"] + params["b1"], 0.0)
    return (hidden @ params["W2"] + params["b2"]).argmax(axis=1)


def main():
    rng = np.random.default_rng(SEED)
    X, y = load("train")
    Xv, yv = load("valid")
    classes = int(max(y.max(), yv.max())) + 1
    mean, scale = standardise_stats(X)
    Xn = (X - mean) / scale
    Xvn = (Xv - mean) / scale
    n, d = Xn.shape
    params = {
@@init@@
        "b1": np.zeros(HIDDEN),
        "W2": rng.normal(0.0, np.sqrt(1.0 / HIDDEN), (HIDDEN, classes)),
        "b2": np.zeros(classes),
    }
    grads = {name: np.zeros_like(value) for name, value in params.items()}
    velocity = {name: np.zeros_like(value) for name, value in params.items()}
    steps_per_epoch = n // BATCH
    total = EPOCHS * steps_per_epoch
    step = 0
@@zero_once@@
    for epoch in range(EPOCHS):
        order = rng.permutation(n)
        losses = []
        for start in range(0, steps_per_epoch * BATCH, BATCH):
            idx = order[start:start + BATCH]
@@batch@@
            pre = xb @ params["W1"] + params["b1"]
            hidden = np.maximum(pre, 0.0)
            probs = softmax(hidden @ params["W2"] + params["b2"])
            rows = np.arange(len(yb))
            losses.append(-np.log(probs[rows, yb] + 1e-12).mean())
            dlogits = probs.copy()
            dlogits[rows, yb] -= 1.0
@@reduce@@
@@zero_each@@
            grads["W2"] += hidden.T @ dlogits + WEIGHT_DECAY * params["W2"]
            grads["b2"] += dlogits.sum(axis=0)
            dhidden = (dlogits @ params["W2"].T) * (pre > 0)
            grads["W1"] += xb.T @ dhidden + WEIGHT_DECAY * params["W1"]
            grads["b1"] += dhidden.sum(axis=0)
            lr = lr_at(step, total)
            for name in params:
@@update@@
            step += 1
        accuracy = (predict(params, Xvn) == yv).mean()
        print(f"epoch {epoch + 1:3d}  train loss {np.mean(losses):.4f}  valid accuracy {accuracy:.4f}")
@@export@@
    np.savez(WEIGHTS_PATH, mean=mean, scale=scale, **params)
    print("wrote", WEIGHTS_PATH)


if __name__ == "__main__":
    main()
'''

CORRECT = {
    "load": "",
    "softmax": "    z = z - z.max(axis=1, keepdims=True)\n    e = np.exp(z)\n    return e / e.sum(axis=1, keepdims=True)",
    "lr": "    return BASE_LR * (1.0 - step / total)",
    "init": '        "W1": rng.normal(0.0, np.sqrt(2.0 / d), (d, HIDDEN)),',
    "zero_once": "",
    "batch": "            xb, yb = Xn[idx], y[idx]",
    "reduce": "            dlogits /= len(yb)",
    "zero_each": "            for g in grads.values():\n                g.fill(0.0)",
    "update": "                velocity[name] = MOMENTUM * velocity[name] - lr * grads[name]\n                params[name] += velocity[name]",
    "export": "",
}


@dataclass(frozen=True)
class Bug:
    """One plantable bug: what it is, where it goes, and how it reads in the script."""

    id: str
    category: str  # at most one bug per category in an instance
    subtle: bool  # hard to see in the code
    destructive: bool  # alone, it takes held-out accuracy to about chance (score 0); else it costs part of it
    description: str
    slots: dict[str, str]


BUGS: tuple[Bug, ...] = (
    Bug("grads-never-zeroed", "gradient-accumulation", False, False,
        "gradient accumulators are never reset, so every update adds up all past gradients",
        {"zero_each": ""}),
    Bug("grads-zeroed-once", "gradient-accumulation", True, False,
        "gradient accumulators are zeroed once before training instead of before every step",
        {"zero_each": "", "zero_once": "    for g in grads.values():\n        g.fill(0.0)"}),
    Bug("loss-summed", "loss-reduction", True, True,
        "the loss gradient is summed over the batch, not averaged: the effective learning rate is BATCH times too large",
        {"reduce": ""}),
    Bug("labels-shifted", "label-alignment", False, True,
        "features and labels are shifted by one row against each other when the data is loaded",
        {"load": "    X, y = X[1:], y[:-1]  # drop the first row"}),
    Bug("labels-shifted-in-batch", "label-alignment", True, True,
        "each batch takes its labels from the rows one before its features",
        {"batch": "            xb, yb = Xn[idx], y[idx - 1]"}),
    Bug("gradient-ascent", "lr-sign", False, True,
        "the update adds the gradient instead of subtracting it",
        {"update": "                velocity[name] = MOMENTUM * velocity[name] + lr * grads[name]\n                params[name] += velocity[name]"}),
    Bug("lr-schedule-negative", "lr-sign", True, True,
        "the learning-rate schedule has its sign flipped (it runs from -BASE_LR up to zero)",
        {"lr": "    return BASE_LR * (step / total - 1.0)"}),
    Bug("stats-not-exported", "normalisation", False, False,
        "the exported normalisation is the identity, though the network was trained on standardised inputs",
        {"export": "    mean, scale = np.zeros(d), np.ones(d)  # inputs are standardised above"}),
    Bug("stats-of-normalised-data", "normalisation", True, True,
        "the exported normalisation statistics are recomputed on the already standardised data",
        {"export": "    mean, scale = standardise_stats(Xn)  # export the statistics the network was trained on"}),
    Bug("softmax-over-batch", "softmax-axis", True, False,
        "the softmax is normalised over the batch axis instead of the class axis",
        {"softmax": "    z = z - z.max(axis=0, keepdims=True)\n    e = np.exp(z)\n    return e / e.sum(axis=0, keepdims=True)"}),
    Bug("zero-init", "initialisation", False, True,
        "the first layer starts at zero, so no hidden unit ever activates",
        {"init": '        "W1": np.zeros((d, HIDDEN)),'}),
    Bug("zero-init-integer-division", "initialisation", True, True,
        "the first layer starts at zero (integer division in the He scale), so no hidden unit ever activates",
        {"init": '        "W1": rng.normal(0.0, np.sqrt(2 // d), (d, HIDDEN)),'}),
)
BUGS_BY_ID = {bug.id: bug for bug in BUGS}

# What each difficulty plants, in order: (subtle?, must be destructive?), None meaning either.
# The first bug is always destructive, so every instance's unfixed script scores 0.
PLAN: dict[int, tuple[tuple[bool | None, bool | None], ...]] = {
    1: ((False, True),),
    2: ((False, True), (True, None)),
    3: ((True, True), (True, None), (None, None)),
}
HYPER = {1: {"hidden": 32, "epochs": 20}, 2: {"hidden": 64, "epochs": 30}, 3: {"hidden": 64, "epochs": 40}}


def render(difficulty: int, bugs: tuple[str, ...] = ()) -> str:
    """The script of a difficulty with the named bugs planted (none: the bug-free reference)."""
    slots = dict(CORRECT)
    seen: set[str] = set()
    for bug_id in bugs:
        bug = BUGS_BY_ID[bug_id]
        if bug.category in seen:
            raise ValueError(f"two bugs of category {bug.category!r}; they could cancel out")
        seen.add(bug.category)
        slots.update(bug.slots)
    hyper = HYPER[difficulty]
    out: list[str] = []
    for line in TEMPLATE.split("\n"):
        name = line.strip()
        if name.startswith("@@") and name.endswith("@@"):
            text = slots[name[2:-2]]
            if text:  # an empty slot leaves no line behind
                out.extend(text.split("\n"))
            continue
        out.append(line.replace("@HIDDEN@", str(hyper["hidden"])).replace("@EPOCHS@", str(hyper["epochs"])))
    return "\n".join(out)


def choose_bugs(seed: int, difficulty: int) -> tuple[str, ...]:
    """The bugs an instance plants, following PLAN[difficulty], each of a different category."""
    # Salted: which bugs were planted is what the student must find; the public code and seed
    # alone must not name them (the script shows their effects, not their catalogue ids).
    rng = salted_rng("debug-training", seed, difficulty, "bugs")
    chosen: list[Bug] = []
    for subtle, destructive in PLAN[difficulty]:
        taken = {c.category for c in chosen}
        pool = [b for b in BUGS if b.category not in taken
                and (subtle is None or b.subtle == subtle) and (destructive is None or b.destructive == destructive)]
        chosen.append(pool[int(rng.integers(len(pool)))])
    return tuple(bug.id for bug in chosen)
