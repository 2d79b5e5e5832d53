"""Train a width-W linear student on this instance's teacher with online minibatch SGD.

This is the program behind the task's `train` tool. The harness runs it outside the student's
sandbox, on the instance's hidden teacher (--teacher-dir: teacher.npy and train.json), and meters
its CPU time against the step's experiment budget; /data holds a copy so the student can read
exactly what a run computes, but not the teacher, so it cannot run it (or compute what it would
print) itself. Equivalent to the tool call {"width": 64, "steps": 4000, "seed": 0}:

    python3 train.py --teacher-dir DIR --width 64 --steps 4000 [--seed 0]

Inputs are x ~ N(0, diag(lam)) over the teacher's features; a width-W model sees the first W of
them, and the teacher's signal in the features beyond W reaches it as label noise. Each step draws
a fresh batch (online SGD: the data never repeats), takes one SGD step on the squared error and
records the population loss E[(y - x . w)^2] of the current weights, computed exactly. Prints:

    width=64 steps=4000 seed=0 final_loss=... mean_loss_last_quarter=...

`mean_loss_last_quarter` averages the loss over the last quarter of the steps, which removes most
of the step-to-step SGD noise once a run has converged. Cost grows like width x steps.
teacher.npy holds the teacher's first `max_width` features (row 0: variances lam, row 1: weights);
train.json the batch size, learning rate, max_width, the signal beyond it and the stream seed."""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MAX_STEPS = 100_000_000


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train one width on this instance's teacher; print its loss.")
    parser.add_argument("--teacher-dir", type=Path, default=HERE, help="directory of teacher.npy and train.json (the harness's)")
    parser.add_argument("--width", type=int, required=True, help="features the model sees, 1..max_width")
    parser.add_argument("--steps", type=int, required=True, help=f"SGD steps, 1..{MAX_STEPS}")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data stream (default 0)")
    args = parser.parse_args(argv)
    if not (args.teacher_dir / "train.json").is_file():
        parser.error(f"no teacher in {args.teacher_dir}: the instance's teacher is hidden; train through the task's `train` tool")
    args.inst = json.loads((args.teacher_dir / "train.json").read_text())
    max_width = args.inst["max_width"]
    if not 1 <= args.width <= max_width:
        parser.error(f"--width must be between 1 and {max_width} (the widest model of this instance), got {args.width}")
    if not 1 <= args.steps <= MAX_STEPS:
        parser.error(f"--steps must be between 1 and {MAX_STEPS}, got {args.steps}")
    if args.seed < 0:
        parser.error(f"--seed must be 0 or more, got {args.seed}")
    return args


def main(argv: list[str]) -> None:
    args = parse(argv)
    inst = args.inst
    lam, weights = np.load(args.teacher_dir / "teacher.npy", allow_pickle=False)
    width = args.width
    lam_w = lam[:width]
    root_lam = np.sqrt(lam_w)
    signal = lam * weights * weights
    floor = float(signal[width:].sum()) + inst["signal_beyond_max_width"]  # what width W cannot represent
    root_floor = np.sqrt(floor)
    delta = -weights[:width].copy()  # w - w*, starting from w = 0
    rng = np.random.default_rng([inst["stream_seed"], args.seed])
    lr, batch = inst["learning_rate"], inst["batch"]
    quarter_start = args.steps - max(1, args.steps // 4)
    total, counted, loss = 0.0, 0, 0.0
    for step in range(args.steps):
        x = rng.standard_normal((batch, width)) * root_lam
        residual = x @ delta - rng.standard_normal(batch) * root_floor  # prediction minus label
        delta -= (lr / batch) * (x.T @ residual)
        if step >= quarter_start:  # the loss is only needed for the average and the end
            loss = float(lam_w @ (delta * delta)) + floor
            total += loss
            counted += 1
    if not np.isfinite(total):
        sys.exit("training diverged")
    print(f"width={width} steps={args.steps} seed={args.seed} final_loss={loss:.6e} mean_loss_last_quarter={total / counted:.6e}")


if __name__ == "__main__":
    main(sys.argv[1:])
