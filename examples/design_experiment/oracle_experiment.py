"""The reference fit (the oracle writes this into /workdir and runs it as the student).

    python3 experiment.py fit TARGET_WIDTH [--fit-last 3] [--runs /workdir/train_runs.jsonl] [--out /workdir/answer.json]

The oracle first trains widths past the knee with the `train` tool, each long enough to converge
(steps ~ 8 x width^1.6, so the slowest feature of the steepest spectrum has settled) and over two
data seeds; the tool appends every run to /workdir/train_runs.jsonl. `fit` averages each width's
`mean_loss_last_quarter` over its runs, fits log(loss) = a + b log(width) by least squares to the
widest measured widths (scaling laws bend at small widths, so narrow runs only show where the
bend is) and writes the extrapolation to the target width. Everything it knows about the instance
it measured. numpy is not needed."""

import argparse
import json
import math
import re

PATTERN = re.compile(r"mean_loss_last_quarter=(\S+)")


def converged_steps(width: int) -> int:
    """Steps after which even the steepest spectrum (lam_W = W^-1.6) has settled (exp(-2 lam S) < 1e-6)."""
    return int(8 * width ** 1.6)


def fit_power_law(widths: list[int], losses: list[float]) -> tuple[float, float]:
    xs, ys = [math.log(w) for w in widths], [math.log(v) for v in losses]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def measured(path: str) -> dict[int, float]:
    """Each width's loss, averaged over its runs."""
    by_width: dict[int, list[float]] = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                run = json.loads(line)
                by_width.setdefault(run["width"], []).append(float(PATTERN.search(run["output"]).group(1)))
    return {w: sum(v) / len(v) for w, v in sorted(by_width.items())}


def fit(args: argparse.Namespace, target: int) -> None:
    rows = list(measured(args.runs).items())[-args.fit_last:]
    intercept, slope = fit_power_law([w for w, _ in rows], [v for _, v in rows])
    predicted = math.exp(intercept + slope * math.log(target))
    print(f"fit over widths {[w for w, _ in rows]}: loss = {math.exp(intercept):.4g} * width^{slope:.4f}; "
          f"predicted at {target}: {predicted:.4e}")
    with open(args.out, "w") as f:
        json.dump({"predicted_loss": predicted}, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["fit"])
    parser.add_argument("width", type=int, help="the target width")
    parser.add_argument("--fit-last", type=int, default=3, help="fit the power law to the widest this many widths")
    parser.add_argument("--runs", default="/workdir/train_runs.jsonl")
    parser.add_argument("--out", default="/workdir/answer.json")
    args = parser.parse_args()
    fit(args, args.width)


if __name__ == "__main__":
    main()
