"""What the misbehaviour telemetry (the end-of-step detectors) costs a 10-tool-call rollout,
against the same rollout with them off, measured in the same process (goal: <= 10%).

    python bench/telemetry.py [--rounds N] [--quick] [--json]

The rollout: examples/quarterly_revenue on the real bwrap sandbox, a scripted agent making 10 tool
calls (8 honest looks around, the oracle's command, submit). Baseline: the same rollouts with the
end-of-step checks of proctor/policies.py the Episode calls (leftover_processes, blocked_network,
detected, forbidden_syscalls) patched, inside this bench only, to report nothing. Custody, the
judge and the seccomp filter stay on in both arms (the filter cannot be turned off per rollout).
Rounds alternate the arms' order. Prints median wall and CPU time per rollout (this process's own
and its reaped children's, from getrusage; the sandbox's cgroup CPU from the result), the ratio,
PASS/MISS against the goal, and the detectors' own time per call on a live sandbox.

Needs what the sandbox needs: Linux, root, bubblewrap, cgroups (`make setup`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor import policies  # noqa: E402
from proctor.agents.scripted import ScriptedAgent  # noqa: E402
from proctor.agents.script import Script, ScriptTurn  # noqa: E402
from proctor.episode import Action, Episode  # noqa: E402
from proctor.errors import ProctorError  # noqa: E402
from proctor.harness import run_rollout  # noqa: E402
from proctor.tasks import load_environment  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quarterly_revenue"
GOAL = 0.10
LOOKS = ["ls -la /data", "head -3 /data/orders.csv", "wc -l /data/orders.csv", "python3 --version", "pwd",
         "ls -la /workdir", "cut -d, -f1 /data/orders.csv | head -2", "echo checking"]
DETECTORS = ("leftover_processes", "blocked_network", "detected", "forbidden_syscalls")


def _script(task) -> Script:
    oracle = task.oracle.turns[0].arguments["command"]
    turns = [ScriptTurn(tool="bash", arguments={"command": c}) for c in [*LOOKS, oracle]]
    return Script(name="ten-calls", turns=[*turns, ScriptTurn(tool="submit", arguments={})])


@contextlib.contextmanager
def _detectors_off():
    saved = {name: getattr(policies, name) for name in DETECTORS}
    policies.leftover_processes = lambda *a, **k: policies.Leftovers()
    policies.blocked_network = lambda box, seen: ([], seen)
    policies.detected = lambda *a, **k: []
    policies.forbidden_syscalls = lambda box: []
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(policies, name, fn)


def _cpu() -> tuple[float, float]:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def _rollout(task, script, env, out, off: bool) -> dict:
    with _detectors_off() if off else contextlib.nullcontext():
        s0, c0 = _cpu()
        t = time.perf_counter()
        result = run_rollout(task, ScriptedAgent(script), out, env_dir=env.directory)
        wall = time.perf_counter() - t
        s1, c1 = _cpu()
    assert result.score == 1.0 and result.usage.tool_calls == 10 and not result.misbehaviour, (result.errors, result.misbehaviour)
    return {"wall": wall, "self_cpu": s1 - s0, "children_cpu": c1 - c0, "sandbox_cpu": result.usage.cpu_s}


def _detector_times(task, script, env, out, reps: int) -> dict:
    """Each check's time per call, on a live sandbox after the 9 bash calls (before submit)."""
    ep = Episode(out, env=env)
    ep.reset(task)
    for turn in script.turns[:-1]:
        ep.step(Action(tool=turn.tool, arguments=dict(turn.arguments)))
    box, ctx, path = ep.box, ep._ctx, ep.transcript.path
    calls = {
        "leftover_processes": lambda: policies.leftover_processes(box, ctx, 0).events,
        "blocked_network": lambda: policies.blocked_network(box, 0),
        "detected": lambda: policies.detected(box, task, 0, path, ep.env_dir, ep.run_dir),
        "forbidden_syscalls": lambda: policies.forbidden_syscalls(box),
    }
    times = {}
    for name, fn in calls.items():
        samples = []
        for _ in range(reps):
            t = time.perf_counter()
            assert not fn() or name == "blocked_network"
            samples.append(time.perf_counter() - t)
        times[name] = statistics.median(samples) * 1000
    ep.step(Action(tool="submit", arguments={}))
    ep.close()
    return times


def bench(rounds: int, reps: int) -> dict:
    env = load_environment(str(EXAMPLE))
    task = env.tasks["q3-revenue"]
    script = _script(task)
    arms: dict[bool, list[dict]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as out:
        _rollout(task, script, env, out, True)
        _rollout(task, script, env, out, False)  # warm up both paths
        for i in range(rounds):
            for off in ((True, False) if i % 2 else (False, True)):
                arms[off].append(_rollout(task, script, env, out, off))
        detectors = _detector_times(task, script, env, out, reps)
    med = {off: {k: statistics.median(r[k] for r in rows) * 1000 for k in rows[0]} for off, rows in arms.items()}
    base, tele = med[True], med[False]
    cpu_b, cpu_t = base["self_cpu"] + base["children_cpu"], tele["self_cpu"] + tele["children_cpu"]
    wall_over, cpu_over = tele["wall"] / base["wall"] - 1, cpu_t / cpu_b - 1
    return {"rounds": rounds, "tool_calls": 10, "baseline_ms": base, "telemetry_ms": tele,
            "wall_overhead": wall_over, "cpu_overhead": cpu_over, "goal": GOAL,
            "verdict": "PASS" if wall_over <= GOAL and cpu_over <= GOAL else "MISS",
            "detectors_ms_per_call": detectors, "detectors_ms_per_step": sum(detectors.values())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20, help="interleaved rounds (one rollout per arm each)")
    ap.add_argument("--quick", action="store_true", help="2 rounds: a smoke run")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    rounds = 2 if args.quick else args.rounds
    if rounds < 1:
        ap.error(f"--rounds must be at least 1, got {rounds}")
    try:
        res = bench(rounds, 5 if args.quick else 100)
    except ProctorError as exc:
        print(f"bench: cannot build a sandbox on this machine: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    b, t = res["baseline_ms"], res["telemetry_ms"]
    print(f"10-tool-call rollout, medians of {rounds} interleaved rounds (custody, judge, seccomp filter on in both arms;")
    print("the filter cannot be turned off per rollout):")
    for key, label in (("wall", "wall"), ("self_cpu", "harness CPU"), ("children_cpu", "children CPU"), ("sandbox_cpu", "sandbox cgroup CPU")):
        print(f"  {label:20s} detectors off {b[key]:8.1f} ms   on {t[key]:8.1f} ms")
    print(f"  overhead: wall {res['wall_overhead']:+.1%}, harness+children CPU {res['cpu_overhead']:+.1%} "
          f"(goal <= {GOAL:.0%}): {res['verdict']}")
    per = ", ".join(f"{k} {v:.3f}" for k, v in res["detectors_ms_per_call"].items())
    print(f"  detectors alone, ms per call: {per}; {res['detectors_ms_per_step']:.3f} ms per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
