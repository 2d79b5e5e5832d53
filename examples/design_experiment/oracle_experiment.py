"""The reference experiment (the oracle writes this into /workdir and runs it as the student).

    python3 experiment.py measure WIDTH [--start-steps 250] [--tolerance 0.02] [--max-steps 64000]
    python3 experiment.py fit TARGET_WIDTH [--fit-last 3] [--out /workdir/answer.json]
    python3 experiment.py all TARGET_WIDTH [--widths 16,32,64,128,256]   (both, in one command)

`measure` trains one width with train.py, doubling the steps until the tail-averaged loss stops
moving (converged when doubling the steps changes it by under 2%, between two data seeds), and
appends the converged loss to measurements.jsonl. `fit` fits log(loss) = a + b log(width) by least
squares to the widest measured widths (scaling laws bend at small widths, so the narrowest runs
only show where the bend is) and writes the extrapolation to the target width. Everything it
knows about the instance it measured. numpy is not needed: it only calls train.py."""

import argparse
import json
import math
import re
import subprocess
import sys

PATTERN = re.compile(r"mean_loss_last_quarter=(\S+)")
SMALLEST = 16


def train(program: str, width: int, steps: int, seed: int) -> float:
    out = subprocess.run([sys.executable, program, "--width", str(width), "--steps", str(steps), "--seed", str(seed)],
                         capture_output=True, text=True, check=True).stdout
    return float(PATTERN.search(out).group(1))


def converged(program: str, width: int, start_steps: int, tolerance: float, max_steps: int) -> tuple[float, int]:
    steps, loss = start_steps, train(program, width, start_steps, seed=0)
    while steps * 2 <= max_steps:
        longer = train(program, width, steps * 2, seed=1)
        if abs(longer / loss - 1.0) < tolerance:
            return 0.5 * (loss + longer), steps * 2
        steps, loss = steps * 2, longer
    return loss, steps


def measure(args: argparse.Namespace, width: int) -> None:
    # Wider models have slower features (lam_W = W^-alpha), so they start with more steps.
    start = max(args.start_steps, int(args.start_steps * (width / SMALLEST) ** 1.3))
    loss, steps = converged(args.program, width, start, args.tolerance, args.max_steps)
    with open(args.measurements, "a") as f:
        f.write(json.dumps({"width": width, "loss": loss, "steps": steps}) + "\n")
    print(f"width {width}: converged loss {loss:.4e} after {steps} steps", flush=True)


def fit_power_law(widths: list[int], losses: list[float]) -> tuple[float, float]:
    xs, ys = [math.log(w) for w in widths], [math.log(v) for v in losses]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def fit(args: argparse.Namespace, target: int) -> None:
    with open(args.measurements) as f:
        rows = sorted((json.loads(line) for line in f if line.strip()), key=lambda r: r["width"])
    rows = rows[-args.fit_last:]
    intercept, slope = fit_power_law([r["width"] for r in rows], [r["loss"] for r in rows])
    predicted = math.exp(intercept + slope * math.log(target))
    print(f"fit over widths {[r['width'] for r in rows]}: loss = {math.exp(intercept):.4g} * width^{slope:.4f}; "
          f"predicted at {target}: {predicted:.4e}")
    with open(args.out, "w") as f:
        json.dump({"predicted_loss": predicted}, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["measure", "fit", "all"])
    parser.add_argument("width", type=int, help="measure: the width to train; fit/all: the target width")
    parser.add_argument("--widths", default="16,32,64,128,256", help="all: the widths to measure")
    parser.add_argument("--start-steps", type=int, default=250, help=f"steps of the first run at width {SMALLEST}")
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--max-steps", type=int, default=64000)
    parser.add_argument("--fit-last", type=int, default=3, help="fit the power law to the widest this many widths")
    parser.add_argument("--measurements", default="/workdir/measurements.jsonl")
    parser.add_argument("--out", default="/workdir/answer.json")
    parser.add_argument("--program", default="/data/train.py")
    args = parser.parse_args()
    if args.action == "measure":
        measure(args, args.width)
        return
    if args.action == "all":
        open(args.measurements, "w").close()
        for width in (int(w) for w in args.widths.split(",")):
            measure(args, width)
    fit(args, args.width)


if __name__ == "__main__":
    main()
