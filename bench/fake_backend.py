"""How much faster the harness tests run on the fake backend than on the real one, in one process.

    python bench/fake_backend.py [--quick] [--json]

Workload: the scripted rollouts a harness test runs (tests/envs/basics: write-42 with a bash
call and a submit; two-steps with a fresh shell per step; a failing judge), each through
run_rollout with the whole harness (transcript, shell session, custody, judge, result.json), on
`bwrap` and on `fake`, rounds alternating. Goal: fake at least 10x faster.

bwrap needs what the sandbox needs (Linux, root, bubblewrap, cgroups: `make setup`)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.agents import ScriptedAgent  # noqa: E402
from proctor.harness import run_rollout  # noqa: E402
from proctor.sandbox import get_backend  # noqa: E402
from proctor.tasks import Script, load_environment  # noqa: E402

BASICS = Path(__file__).resolve().parents[1] / "tests" / "envs" / "basics"
SUBMIT = {"tool": "submit", "arguments": {}}
WORKLOAD = (
    ("write-42", ["echo 42 > /workdir/answer.txt", SUBMIT], 1.0),
    ("two-steps", ["echo 1 > /workdir/answer.txt", SUBMIT, "echo 2 > /workdir/answer.txt", SUBMIT], 1.0),
    ("crashing-judge", ["echo 42 > /workdir/answer.txt", SUBMIT], 0.0),
)


def _script(turns: list) -> Script:
    return Script(name="bench", turns=[t if isinstance(t, dict) else {"tool": "bash", "arguments": {"command": t}} for t in turns])


def workload(env, backend, out: str) -> float:
    start = time.perf_counter()
    for task_id, turns, want in WORKLOAD:
        result = run_rollout(env.tasks[task_id], ScriptedAgent(_script(turns)), out, env_dir=env.directory, backend=backend)
        if result.score != want:
            raise SystemExit(f"{backend.name}: {task_id} scored {result.score}, not {want}: {result.errors}")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds: a smoke run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = 2 if args.quick else 10
    env = load_environment(str(BASICS))
    backends = {"bwrap": get_backend("bwrap"), "fake": get_backend("fake", allow_fake=True)}
    times: dict[str, list[float]] = {name: [] for name in backends}
    with tempfile.TemporaryDirectory() as out:
        for name, backend in backends.items():
            workload(env, backend, out)  # warm: the confinement probe, imports, the first shell
        for i in range(rounds):
            for name in (("bwrap", "fake") if i % 2 else ("fake", "bwrap")):
                times[name].append(workload(env, backends[name], out))
    real, fake = statistics.median(times["bwrap"]), statistics.median(times["fake"])
    report = {"rounds": rounds, "rollouts_per_round": len(WORKLOAD), "bwrap_ms": real * 1000, "fake_ms": fake * 1000,
              "speedup": real / fake}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"harness test workload ({len(WORKLOAD)} rollouts): bwrap {real * 1000:.1f} ms, fake {fake * 1000:.1f} ms: "
              f"fake is {real / fake:.1f}x faster ({rounds} rounds, medians; goal 10x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
