"""Check /workdir/weights.npz against /data/valid.npz, the way the grader reads weights.

Run: python3 evaluate.py [weights.npz]

This is a convenience for you: the grader does NOT run it (it uses its own copy of this logic, on
held-out data you never see, after retraining with your train.py on data you never see)."""

import sys

import numpy as np

KEYS = ("mean", "scale", "W1", "b1", "W2", "b2")


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/workdir/weights.npz"
    with np.load(path, allow_pickle=False) as f:
        if set(f.files) != set(KEYS):
            sys.exit(f"weights.npz must hold exactly {', '.join(KEYS)}; it holds {', '.join(f.files)}")
        w = {k: f[k].astype(np.float64) for k in KEYS}
    with np.load("/data/valid.npz") as f:
        X, y = f["X"], f["y"]
    d, k = X.shape[1], int(y.max()) + 1
    h = w["W1"].shape[1]
    for key, shape in {"mean": (d,), "scale": (d,), "W1": (d, h), "b1": (h,), "W2": (h, k), "b2": (k,)}.items():
        if w[key].shape != shape:
            sys.exit(f"{key} has shape {w[key].shape}, expected {shape}")
        if not np.isfinite(w[key]).all():
            sys.exit(f"{key} holds NaN or infinite values")
    hidden = np.maximum(((X - w["mean"]) / w["scale"]) @ w["W1"] + w["b1"], 0.0)
    accuracy = ((hidden @ w["W2"] + w["b2"]).argmax(axis=1) == y).mean()
    print(f"validation accuracy {accuracy:.4f} (chance {np.bincount(y).max() / len(y):.4f})")


if __name__ == "__main__":
    main()
