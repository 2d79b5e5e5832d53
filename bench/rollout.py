"""What the harness adds to one rollout, against the bare sandbox work it wraps, measured in the
same run.

    python bench/rollout.py [--quick] [--json]

Baseline: create a sandbox with the task's limits, run the oracle's command in it as the student,
close it. Measured: a whole oracle rollout of examples/quarterly_revenue through run_rollout
(transcript, shell session, custody with proof of emptiness, judge, result.json). Rounds alternate.

Needs what the sandbox needs: Linux, root, bubblewrap, cgroups (`make setup`)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.agents import make_agent  # noqa: E402
from proctor.harness import run_rollout  # noqa: E402
from proctor.sandbox import Sandbox, SandboxSpec  # noqa: E402
from proctor.tasks import load_environment  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quarterly_revenue"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = 3 if args.quick else 20
    env = load_environment(str(EXAMPLE))
    task = env.tasks["q3-revenue"]
    command = task.oracle.turns[0].arguments["command"]
    spec = SandboxSpec(limits=task.limits.sandbox, data_dir=str(task.data))
    bare, full = [], []
    with tempfile.TemporaryDirectory() as out:
        for i in range(rounds):
            for which in ((0, 1) if i % 2 else (1, 0)):
                start = time.perf_counter()
                if which:
                    result = run_rollout(task, make_agent("oracle", task), out, env_dir=env.directory)
                    assert result.score == 1.0, result.errors
                    full.append(time.perf_counter() - start)
                else:
                    with Sandbox.create(spec) as box:
                        assert box.run(["/bin/bash", "-c", command], timeout=30).ok
                    bare.append(time.perf_counter() - start)
    b, f = statistics.median(bare), statistics.median(full)
    report = {"rounds": rounds, "bare_sandbox_ms": b * 1000, "rollout_ms": f * 1000, "ratio": f / b}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"oracle rollout {f * 1000:.1f} ms vs bare sandbox create+run+close {b * 1000:.1f} ms: {f / b:.2f}x ({rounds} rounds, medians)")


if __name__ == "__main__":
    main()
