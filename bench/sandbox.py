"""What a sandbox costs, against a bare `bash -c true` measured in the same run.

    python bench/sandbox.py [--quick] [--json]

Four figures, each interleaved with its own baseline samples (these machines are noisy: a
baseline taken minutes earlier says little about the sample next to it):

1. create + first command (`true`) + close, and the three parts separately;
2. one command (`true`) in a sandbox whose session is already running, and one Python start
   importing a few modules (reading the runtime and /usr from the sandbox's own system image);
3. kill_all() of a fork storm that keeps about 500 processes alive and forking;
4. memory of idle sandboxes with many alive at once, against as many bare `sleep 1000`.

Needs what the sandbox needs: Linux, root, bubblewrap, cgroups (`make setup`)."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.errors import ProctorError  # noqa: E402
from proctor.sandbox import Sandbox, SandboxLimits, SandboxSpec  # noqa: E402
from proctor.sandbox.cgroups import ROOT_NAME, layout  # noqa: E402

STORM_PROCS = 500
STORM_SCRIPT = f"for i in $(seq {STORM_PROCS}); do (while :; do sleep 0.01 & wait; done) & done; wait"
# Above what the storm needs at its peak (500 loops + 500 sleeps + the session), so what is
# measured is killing a storm at full strength, not bash retrying forks against the limit.
STORM_PIDS_LIMIT = 2048
STORM_RAMP_DEADLINE_S = 60.0
# Reads dozens of files of the runtime and /usr: from the sandbox's own image, against the host.
PYTHON_IMPORT = ("python3", "-c", "import json, email.parser, urllib.request")


# -- measuring -------------------------------------------------------------------------------------
def baseline_once(argv: tuple[str, ...] = ("bash", "-c", "true")) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t


def summary(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    if len(s) > 1:
        p90 = statistics.quantiles(s, n=10, method="inclusive")[8]
    else:
        p90 = s[0]
    return {"n": len(s), "median": statistics.median(s), "p90": p90, "min": s[0], "max": s[-1]}


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


class _NoGC:
    """Keep the collector out of timed loops (as timeit does)."""

    def __enter__(self) -> None:
        gc.collect()
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def interleaved(n: int, measure: Callable[[], None], base: list[float], baseline: Callable[[], float] = baseline_once) -> None:
    """Alternate one baseline sample and one measured sample, swapping which goes first."""
    for i in range(n):
        if i % 2:
            measure()
            base.append(baseline())
        else:
            base.append(baseline())
            measure()


# -- 1. create + first command + close -------------------------------------------------------------
def bench_lifecycle(n: int) -> dict:
    parts: dict[str, list[float]] = {"create": [], "first_command": [], "close": [], "total": []}
    base: list[float] = []

    def one() -> None:
        t0 = time.perf_counter()
        box = Sandbox.create()
        t1 = time.perf_counter()
        try:
            r = box.run(["true"])
            t2 = time.perf_counter()
        finally:
            box.close()
        t3 = time.perf_counter()
        if not r.ok:
            raise SystemExit(f"`true` failed in a fresh sandbox: {r}")
        parts["create"].append(t1 - t0)
        parts["first_command"].append(t2 - t1)
        parts["close"].append(t3 - t2)
        parts["total"].append(t3 - t0)

    with _NoGC():
        interleaved(n, one, base)
    b = summary(base)
    out = {name: summary(v) for name, v in parts.items()}
    return {"baseline": b, **out, "ratio": ratio(out["total"]["median"], b["median"])}


# -- 2. one command in a running session -----------------------------------------------------------
def bench_run(n: int, argv: tuple[str, ...] = ("true",), base_argv: tuple[str, ...] = ("bash", "-c", "true")) -> dict:
    """`argv` in a running session against `base_argv` on the host. With the student runtime's
    Python importing a module, this is the cost of reading through the sandbox's own overlays."""
    samples: list[float] = []
    base: list[float] = []
    with Sandbox.create() as box:
        box.run(["true"])  # start the session
        for _ in range(5):
            box.run(list(argv))  # warm up

        def one() -> None:
            t = time.perf_counter()
            r = box.run(list(argv))
            samples.append(time.perf_counter() - t)
            if not r.ok:
                raise SystemExit(f"`{' '.join(argv)}` failed in a running sandbox: {r}")

        with _NoGC():
            interleaved(n, one, base, lambda: baseline_once(base_argv))
    b, m = summary(base), summary(samples)
    return {"baseline": b, "run": m, "ratio": ratio(m["median"], b["median"])}


def _runtime_python() -> str:
    from proctor.sandbox.runtime import default_runtime

    runtime = default_runtime()
    return f"{runtime}/bin/python3" if runtime else "python3"


# -- 3. kill_all of a fork storm -------------------------------------------------------------------
def bench_storm(reps: int, base_per_rep: int) -> dict:
    kill: list[float] = []
    ramp: list[float] = []
    alive_at_kill: list[int] = []
    killed: list[int] = []
    rounds: list[int] = []
    base: list[float] = []
    with Sandbox.create(SandboxSpec(limits=SandboxLimits(pids=STORM_PIDS_LIMIT))) as box:
        for rep in range(reps):
            for _ in range(base_per_rep // 2):
                base.append(baseline_once())
            t0 = time.perf_counter()
            proc = box.spawn(["/bin/bash", "-c", STORM_SCRIPT])  # restarts the session after a kill_all
            proc.popen.stdin.close()  # type: ignore[union-attr]
            end = time.monotonic() + STORM_RAMP_DEADLINE_S
            while True:
                count = len(box._cg.pids())
                if count >= STORM_PROCS:
                    break
                if time.monotonic() > end or not proc.alive():
                    box.kill_all()
                    raise SystemExit(f"fork storm reached only {count} processes (rep {rep})")
                time.sleep(0.02)
            ramp.append(time.perf_counter() - t0)
            with _NoGC():
                t = time.perf_counter()
                report = box.kill_all()
                kill.append(time.perf_counter() - t)
            if not report.empty:
                raise SystemExit(f"kill_all left processes behind: {report.detail} {report.remaining[:20]}")
            alive_at_kill.append(count)
            killed.append(report.killed)
            rounds.append(report.rounds)
            for stream in (proc.popen.stdout, proc.popen.stderr):
                stream.close()  # type: ignore[union-attr]
            proc.popen.wait(timeout=5)
            for _ in range(base_per_rep - base_per_rep // 2):
                base.append(baseline_once())
    b, k = summary(base), summary(kill)
    return {
        "baseline": b,
        "kill_all": k,
        "ratio": ratio(k["median"], b["median"]),
        "ramp_s": summary(ramp),
        "processes_seen": alive_at_kill,
        "killed": killed,
        "rounds": rounds,
        "pids_limit": STORM_PIDS_LIMIT,
    }


# -- 4. memory of idle sandboxes ---------------------------------------------------------------------
def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def self_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cgroup_memory(d: Path) -> dict[str, int]:
    """Usage of one memory cgroup (hierarchical): total, anonymous, file cache, kernel."""
    stat = {}
    for line in (d / "memory.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if value.isdigit():
            stat[key] = int(value)
    if (d / "memory.current").exists():  # v2
        return {
            "usage": int((d / "memory.current").read_text()),
            "anon": stat.get("anon", 0),
            "file": stat.get("file", 0),
            "kernel": stat.get("kernel", stat.get("slab", 0) + stat.get("kernel_stack", 0)),
        }
    kmem = d / "memory.kmem.usage_in_bytes"
    return {
        "usage": int((d / "memory.usage_in_bytes").read_text()),
        "anon": stat.get("total_rss", stat.get("rss", 0)),
        "file": stat.get("total_cache", stat.get("cache", 0)),
        "kernel": int(kmem.read_text()) if kmem.exists() else 0,
    }


def pss(pids: list[int]) -> int:
    """Proportional set size of these processes (shared pages split among their users)."""
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
                break
    return total


def _settle() -> None:
    gc.collect()
    time.sleep(0.3)


def mem_round_sandboxes(count: int) -> dict[str, float]:
    boxes: list[Sandbox] = []
    try:
        _settle()
        avail0, rss0 = mem_available(), self_rss()
        for _ in range(count):
            box = Sandbox.create()
            boxes.append(box)
            if not box.run(["true"]).ok:
                raise SystemExit("`true` failed in a fresh sandbox")
        time.sleep(1.0)  # idle
        avail1, rss1 = mem_available(), self_rss()
        per = [cgroup_memory(b._cg.dir("memory")) for b in boxes]
        pids = [b._cg.pids() for b in boxes]
        procs = [len(p) for p in pids]
        pss_each = [pss(p) for p in pids]
    finally:
        for box in boxes:
            box.close()
    return {
        "mem_available_delta": (avail0 - avail1) / count,
        "harness_rss_delta": (rss1 - rss0) / count,
        "cgroup_usage": statistics.mean(p["usage"] for p in per),
        "cgroup_anon": statistics.mean(p["anon"] for p in per),
        "cgroup_file": statistics.mean(p["file"] for p in per),
        "cgroup_kernel": statistics.mean(p["kernel"] for p in per),
        "pss": statistics.mean(pss_each),
        "processes": statistics.mean(procs),
    }


def mem_round_sleeps(count: int) -> dict[str, float]:
    """As many bare `sleep 1000`, in one cgroup of their own (joined before exec, as a sandbox's
    processes join theirs), so the cgroup figures are comparable."""
    d = layout().mounts["memory"] / ROOT_NAME / f"bench-baseline-{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    try:
        _settle()
        avail0, rss0 = mem_available(), self_rss()
        for _ in range(count):
            procs.append(subprocess.Popen(
                ["/bin/sh", "-c", 'echo $$ > "$1" && exec sleep 1000', "sh", str(d / "cgroup.procs")],
                stdin=subprocess.DEVNULL, start_new_session=True,
            ))
        time.sleep(1.0)
        avail1, rss1 = mem_available(), self_rss()
        alive = sum(p.poll() is None for p in procs)
        if alive != count:
            raise SystemExit(f"only {alive} of {count} baseline sleeps are alive")
        usage = cgroup_memory(d)
        pss_all = pss([p.pid for p in procs])
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        for _ in range(200):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)
    return {
        "mem_available_delta": (avail0 - avail1) / count,
        "harness_rss_delta": (rss1 - rss0) / count,
        "cgroup_usage": usage["usage"] / count,
        "cgroup_anon": usage["anon"] / count,
        "cgroup_file": usage["file"] / count,
        "cgroup_kernel": usage["kernel"] / count,
        "pss": pss_all / count,
        "processes": 1.0,
    }


def bench_memory(count: int, rounds: int) -> dict:
    base: list[dict[str, float]] = []
    boxes: list[dict[str, float]] = []
    for i in range(rounds):  # alternate which goes first
        if i % 2:
            boxes.append(mem_round_sandboxes(count))
            base.append(mem_round_sleeps(count))
        else:
            base.append(mem_round_sleeps(count))
            boxes.append(mem_round_sandboxes(count))
    keys = base[0].keys()
    b = {k: statistics.median(r[k] for r in base) for k in keys}
    s = {k: statistics.median(r[k] for r in boxes) for k in keys}
    return {
        "count": count,
        "rounds": rounds,
        "baseline": b,
        "sandbox": s,
        "ratio_mem_available": ratio(s["mem_available_delta"], b["mem_available_delta"]),
        "ratio_cgroup_usage": ratio(s["cgroup_usage"], b["cgroup_usage"]),
        "ratio_pss": ratio(s["pss"], b["pss"]),
    }


# -- report ------------------------------------------------------------------------------------------
def _ms(x: float) -> str:
    return f"{x * 1000:9.2f}"


def _kib(x: float) -> str:
    return f"{x / 1024:10.0f}"


def _ratio(x: float) -> str:
    return f"{x:7.1f}x"


def render(res: dict) -> str:
    lines = []
    m = res["meta"]
    lines.append(
        f"proctor sandbox benchmark ({'quick' if m['quick'] else 'full'}), cgroup v{m['cgroup_version']}, "
        f"{m['cpus']} CPUs, kernel {m['kernel']}"
    )
    lines.append(f"first Sandbox.create() in this process (confinement probe + reclaim): {m['cold_create_s'] * 1000:.1f} ms")
    lines.append("baseline = subprocess.run(['bash', '-c', 'true']), sampled alternately with each measurement")
    lines.append("")
    head = f"{'measurement':<44}{'n':>5}{'median ms':>10}{'p90 ms':>10}{'base ms':>10}{'ratio':>9}"
    lines.append(head)
    lines.append("-" * len(head))

    def row(name: str, s: dict, base: dict | None) -> None:
        b = base["median"] if base else None
        lines.append(
            f"{name:<44}{s['n']:>5}{_ms(s['median']):>10}{_ms(s['p90']):>10}"
            + (f"{_ms(b):>10}{_ratio(ratio(s['median'], b)):>9}" if b else "")
        )

    lc = res["lifecycle"]
    row("1. create + first `true` + close", lc["total"], lc["baseline"])
    row("   create", lc["create"], lc["baseline"])
    row("   first command (starts the session)", lc["first_command"], lc["baseline"])
    row("   close (kill_all + teardown)", lc["close"], lc["baseline"])
    row("   baseline bash -c true", lc["baseline"], None)
    rn = res["run_in_session"]
    row("2. `true` in a running session", rn["run"], rn["baseline"])
    row("   baseline bash -c true", rn["baseline"], None)
    py = res["python_in_session"]
    row("2b. python3 importing json, email, urllib", py["run"], py["baseline"])
    row("   baseline: the same on the host", py["baseline"], None)
    st = res["kill_all_fork_storm"]
    row(f"3. kill_all, {STORM_PROCS}-process fork storm", st["kill_all"], st["baseline"])
    row("   storm ramp-up (spawn until >= 500 pids)", st["ramp_s"], None)
    row("   baseline bash -c true", st["baseline"], None)
    lines.append(
        f"   pids seen at kill: {st['processes_seen']}; killed: {st['killed']}; rounds: {st['rounds']}; "
        f"pids limit {st['pids_limit']}"
    )
    lines.append("")
    mem = res["idle_memory"]
    head = f"4. memory per idle process set, {mem['count']} alive at once ({mem['rounds']} round(s), median)"
    lines.append(head)
    head = f"{'   KiB each':<44}{'sandbox':>10}{'sleep':>10}{'ratio':>9}"
    lines.append(head)
    lines.append("-" * len(head))
    for key, label in (
        ("cgroup_usage", "cgroup memory usage"),
        ("cgroup_anon", "  of which anon (rss)"),
        ("cgroup_file", "  of which file cache"),
        ("cgroup_kernel", "  kernel memory (kmem)"),
        ("pss", "PSS of its processes"),
        ("harness_rss_delta", "harness RSS growth / count"),
        ("mem_available_delta", "MemAvailable drop / count (host-wide)"),
    ):
        s, b = mem["sandbox"][key], mem["baseline"][key]
        lines.append(f"   {label:<41}{_kib(s)}{_kib(b)}{_ratio(ratio(s, b)) if b > 0 else '        -':>9}")
    lines.append(f"   {'processes each':<41}{mem['sandbox']['processes']:>10.1f}{mem['baseline']['processes']:>10.1f}")
    lines.append("   (MemAvailable moves with everything else on the host: only the cgroup and PSS rows are stable)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few samples: a smoke run in well under 30 s")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = ap.parse_args(argv)
    if args.quick:
        n_life, n_run, storm_reps, storm_base, mem_count, mem_rounds = 6, 30, 1, 6, 10, 1
    else:
        n_life, n_run, storm_reps, storm_base, mem_count, mem_rounds = 30, 200, 5, 10, 50, 3

    try:
        t = time.perf_counter()
        with Sandbox.create() as box:  # the probe and reclaim run once per process: keep them out
            cold = time.perf_counter() - t
            box.run(["true"])
        for _ in range(3):
            baseline_once()
        res = {
            "meta": {
                "quick": args.quick,
                "cgroup_version": layout().version,
                "cpus": os.cpu_count(),
                "kernel": os.uname().release,
                "python": sys.version.split()[0],
                "cold_create_s": cold,
            },
            "lifecycle": bench_lifecycle(n_life),
            "run_in_session": bench_run(n_run),
            "python_in_session": bench_run(max(n_run // 5, 6), PYTHON_IMPORT, (_runtime_python(), *PYTHON_IMPORT[1:])),
            "kill_all_fork_storm": bench_storm(storm_reps, storm_base),
            "idle_memory": bench_memory(mem_count, mem_rounds),
        }
    except ProctorError as exc:
        print(f"bench: cannot build a sandbox on this machine: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=2) if args.json else render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
