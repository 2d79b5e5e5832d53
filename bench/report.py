"""How fast `proctor report` reads a big pile of results: 100,000 synthetic rollouts, against
reading and parsing every result.json with the standard library, measured in the same run.

    python bench/report.py [--results N] [--quick] [--json]

The results are RolloutResults as the harness writes them (proctor/results.py: steps, custody,
confinement, usage, timings; two families with a declared parameter, three difficulties, three
students, every status, misbehaviour kinds), one directory each. Figures:

- report: `build_report` over the whole batch (walk, read, parse what a report needs, fold into
  cells), in this process;
- baseline: walking the same tree and `json.loads` of every result.json: the least any tool that
  reads results must do, so the ratio says what the report adds to it;
- memory: the peak resident size of a fresh process that reports on the whole batch, and of one
  that reports on a tenth of it. A report folds results into per-cell sums and keeps none, so the
  two should be close (the goal: bounded memory, and under 10 s for 100,000 results).

The files were just written, so they are in the page cache. Needs no sandbox and no extra."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.insight.report import build_report  # noqa: E402
from proctor.results import MisbehaviourRecord, RolloutResult, StepResult, Timings, Usage  # noqa: E402
from proctor.tasks.models import Instance  # noqa: E402

STATUSES = ["completed"] * 7 + ["misbehaved"] * 2 + ["infra_error"]
KINDS = ["submission_symlink", "processes_left_at_custody", "hidden_path_probe", "network_blocked"]
FAMILIES = {"fast-kernel": ("kernel", ["softmax", "layer_norm", "conv1d", "linear_scan"]), "sum": ("count", [2, 4, 8, 16])}
STUDENTS = ["model:small", "model:large", "script:mediocre"]
CONFINEMENT = {"protections": {name: "enforced" for name in (
    "uid_isolation", "pid_namespace", "mount_namespace", "network_namespace", "memory_limit", "pids_limit", "cpu_limit",
    "workdir_quota", "no_new_privs", "seccomp_filter", "keyrings")}, "degraded": [], "runtime": "bwrap", "cgroup_version": 2}


def _result(i: int, rng: random.Random) -> str:
    family = rng.choice(list(FAMILIES))
    name, values = FAMILIES[family]
    value, difficulty = rng.choice(values), rng.choice([1, 2, 3])
    status = rng.choice(STATUSES)
    solved = status == "completed" and rng.random() < 0.9 / (values.index(value) + difficulty)
    score = 1.0 if solved else (0.0 if status != "completed" else rng.choice([0.0, 0.5]))
    instance = Instance(task_id=f"{family}-{i}-{difficulty}", family=family, seed=i, difficulty=difficulty,
                        params={name: value, "numbers": 12}, varied=(name,), key_fingerprint="0123456789abcdef")
    result = RolloutResult(
        run_id=f"r{i:06d}", task_id=instance.task_id, instance=instance, agent=rng.choice(STUDENTS), status=status,
        score=score, judged_score=score, reward=score,
        steps=[StepResult(index=0, score=score, weight=1.0, explanation="answer.txt: expected 1234, got 1234", judge="ExactAnswer",
                          ended_by="submit", custody=[{"path": "answer.txt", "status": "copied", "bytes": 5}], duration_s=0.01)],
        misbehaviour=[MisbehaviourRecord(kind=rng.choice(KINDS), detail="seen", step=0)] if status == "misbehaved" else [],
        errors=["agent: provider failed"] if status == "infra_error" else [], confinement=CONFINEMENT,
        usage=Usage(input_tokens=rng.randint(100, 90000), output_tokens=rng.randint(10, 9000), model_calls=5, turns=5, tool_calls=4,
                    cpu_s=1.5, peak_memory_bytes=50 << 20),
        timings=Timings(started_at="2026-12-05T08:00:00+00:00", total_s=rng.uniform(1, 300), setup_s=0.2, agent_s=10, judge_s=0.1),
    )
    return result.model_dump_json(indent=2) + "\n"


def make_batch(root: Path, n: int, start: int = 0) -> None:
    rng = random.Random(start)
    for i in range(start, start + n):
        d = root / f"r{i:06d}"
        d.mkdir(parents=True)
        (d / "result.json").write_text(_result(i, rng))


def _baseline(root: Path) -> float:
    started = time.perf_counter()
    for here, dirs, files in os.walk(root):
        if "result.json" in files:
            with open(os.path.join(here, "result.json"), "rb") as f:
                json.loads(f.read())
    return time.perf_counter() - started


_CHILD = """
import resource, sys, time
sys.path.insert(0, sys.argv[2])
from proctor.insight.report import build_report
started = time.perf_counter()
report = build_report([sys.argv[1]])
print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, report.results)
"""


def _child(root: Path) -> tuple[float, int, int]:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(root), str(Path(__file__).resolve().parents[1])],
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="2,000 results (for CI's smoke test)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n = 2_000 if args.quick else args.results

    with tempfile.TemporaryDirectory(prefix="proctor-bench-report-") as tmp:
        whole, tenth = Path(tmp) / "whole", Path(tmp) / "tenth"
        made = time.perf_counter()
        make_batch(whole, n)
        make_batch(tenth, max(1, n // 10), start=n)
        made = time.perf_counter() - made
        baseline = _baseline(whole)
        started = time.perf_counter()
        report = build_report([whole])
        took = time.perf_counter() - started
        assert report.results == n, report.results
        _, rss_whole, _ = _child(whole)
        _, rss_tenth, _ = _child(tenth)

    figures = {
        "results": n, "cells": len(report.cells), "write_s": made, "report_s": took, "baseline_s": baseline,
        "ratio": took / baseline, "results_per_s": n / took, "peak_rss_bytes": rss_whole, "peak_rss_tenth_bytes": rss_tenth,
        "rss_ratio": rss_whole / rss_tenth,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    mib = 1 << 20
    print(f"proctor report over {n} results in {len(report.cells)} cells (written in {made:.1f} s)")
    print(f"  baseline (walk + json.loads of every result.json): {baseline:6.2f} s")
    print(f"  report (walk, read, digest, fold into cells):      {took:6.2f} s  ({figures['ratio']:.2f}x baseline, {n / took:,.0f} results/s)")
    print(f"  peak memory of a fresh process: {rss_whole / mib:.0f} MiB for {n} results, {rss_tenth / mib:.0f} MiB for {max(1, n // 10)} "
          f"({figures['rss_ratio']:.2f}x)")


if __name__ == "__main__":
    main()
