"""What a gVisor sandbox costs, against bubblewrap's and against a bare `runsc do true`, all
measured in the same process with rounds interleaved (these machines are noisy).

    python bench/gvisor.py [--quick] [--json]

Figures (medians):
1. `runsc do true`: gVisor's own cheapest container (create, start, run `true`, delete);
2. sandbox start: create + first command (`true`) + close, under gvisor and under bwrap;
3. one command in a running sandbox (`true`), under each;
4. one whole oracle rollout of examples/quarterly_revenue through run_rollout, under each.

Goal (issue 20): the gVisor sandbox start within 2x of `runsc do true`.
Needs Linux, root, bubblewrap, cgroups and runsc (`make setup`)."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.agents import make_agent  # noqa: E402
from proctor.harness import run_rollout  # noqa: E402
from proctor.sandbox import SandboxSpec, get_backend  # noqa: E402
from proctor.sandbox.gvisor import PLATFORM, runsc_path  # noqa: E402
from proctor.tasks import load_environment  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quarterly_revenue"
RUNTIMES = ("bwrap", "gvisor")


def runsc_do_true(root: Path) -> float:
    t = time.perf_counter()
    subprocess.run([runsc_path(), "--root", str(root), f"--platform={PLATFORM}", "--network=none", "do", "true"],
                   check=True, timeout=60, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def sandbox_start(runtime: str) -> float:
    t = time.perf_counter()
    with get_backend(runtime).create(SandboxSpec()) as box:
        assert box.run(["true"], timeout=30).ok
    return time.perf_counter() - t


def one_command(box) -> float:
    t = time.perf_counter()
    assert box.run(["true"], timeout=30).ok
    return time.perf_counter() - t


def rollout(runtime: str, task, env, out: str) -> float:
    t = time.perf_counter()
    result = run_rollout(task, make_agent("oracle", task), out, env_dir=env.directory, backend=get_backend(runtime))
    assert result.score == 1.0, (runtime, result.errors)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = 3 if args.quick else 15
    env = load_environment(str(EXAMPLE))
    task = env.tasks["q3-revenue"]
    samples: dict[str, list[float]] = {k: [] for k in (
        "runsc_do_true", "start_bwrap", "start_gvisor", "command_bwrap", "command_gvisor", "rollout_bwrap", "rollout_gvisor")}
    root = Path(tempfile.mkdtemp(prefix="proctor-bench-runsc-"))
    boxes = {r: get_backend(r).create(SandboxSpec()) for r in RUNTIMES}
    try:
        for box in boxes.values():
            box.run(["true"])  # start the session / container once
        with tempfile.TemporaryDirectory() as out:
            rollout("gvisor", task, env, out)  # warm both paths once (imports, templates)
            rollout("bwrap", task, env, out)
            for i in range(rounds):
                order = RUNTIMES if i % 2 else tuple(reversed(RUNTIMES))
                samples["runsc_do_true"].append(runsc_do_true(root))
                for r in order:
                    samples[f"start_{r}"].append(sandbox_start(r))
                    samples[f"command_{r}"].append(one_command(boxes[r]))
                    samples[f"rollout_{r}"].append(rollout(r, task, env, out))
    finally:
        for box in boxes.values():
            box.close()
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    report = {
        "rounds": rounds,
        "platform": PLATFORM,
        **{f"{k}_ms": round(v * 1000, 1) for k, v in med.items()},
        "start_gvisor_vs_runsc_do": med["start_gvisor"] / med["runsc_do_true"],
        "start_gvisor_vs_bwrap": med["start_gvisor"] / med["start_bwrap"],
        "command_gvisor_vs_bwrap": med["command_gvisor"] / med["command_bwrap"],
        "rollout_gvisor_vs_bwrap": med["rollout_gvisor"] / med["rollout_bwrap"],
        "rollout_gvisor_vs_runsc_do": med["rollout_gvisor"] / med["runsc_do_true"],
    }
    if args.json:
        print(json.dumps(report))
        return
    ms = {k: v * 1000 for k, v in med.items()}
    print(f"runsc do true {ms['runsc_do_true']:.0f} ms ({rounds} rounds, medians, platform {PLATFORM})")
    print(f"sandbox start (create + true + close): gvisor {ms['start_gvisor']:.0f} ms, bwrap {ms['start_bwrap']:.0f} ms; "
          f"gvisor is {report['start_gvisor_vs_runsc_do']:.2f}x runsc do true (goal <= 2x), {report['start_gvisor_vs_bwrap']:.2f}x bwrap")
    print(f"one command (true): gvisor {ms['command_gvisor']:.0f} ms, bwrap {ms['command_bwrap']:.0f} ms ({report['command_gvisor_vs_bwrap']:.2f}x)")
    print(f"oracle rollout: gvisor {ms['rollout_gvisor']:.0f} ms, bwrap {ms['rollout_bwrap']:.0f} ms; "
          f"gvisor is {report['rollout_gvisor_vs_bwrap']:.2f}x bwrap, {report['rollout_gvisor_vs_runsc_do']:.2f}x runsc do true")


if __name__ == "__main__":
    main()
