"""What a warm pool buys: time to a sandbox's first output, and rollouts per second of a batch.

    python bench/pool.py [--quick] [--json] [--only start|batch]

1. From asking for a sandbox to its first command's output (`echo ok` as the student), cold
   (`Sandbox.create` then `run`), warm (`SandboxPool.create` with a sandbox ready, then `run`: a
   new process entered into the sandbox) and warm_shell (the bash tool's way: the pool's waiting
   shell, one line written, one read), each as a ratio against a bare `bash -c true` sampled
   interleaved in the same process.
2. A 10-tool-call scripted rollout of examples/quarterly_revenue (8 bash calls, the answer, submit)
   through `run_many` at -j 2, 4 and 8, without and with a pool: rollouts per second of wall time,
   and CPU per rollout (this process and every child it reaped: the harness, bubblewrap, nsenter,
   the student's shell and commands). Every rollout must score 1.
3. Host memory of idle warm sandboxes (session and shell waiting, then without the shell), 100 of
   them: what each one's cgroup is charged (processes, kernel, the page cache of its own system
   image) plus the harness's growth per sandbox, per sandbox and per 1 000; MemAvailable's drop
   beside it (noisy on a shared machine: other processes move it too).

Needs what the sandbox needs: Linux, root, bubblewrap, cgroups (`make setup`)."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.harness import RolloutConfig  # noqa: E402
from proctor.runner import run_many  # noqa: E402
from proctor.sandbox import Sandbox, SandboxSpec, get_backend  # noqa: E402
from proctor.sandbox.pool import SHELL_ARGV, PoolConfig, SandboxPool  # noqa: E402
from proctor.tasks import load_environment  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox import baseline_once, mem_available, self_rss, summary  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quarterly_revenue"
ANSWER = ("awk -F, '$4==\"paid\" && $2>=\"2024-07-01\" && $2<=\"2024-09-30\" {s+=$3} END {print s}' "
          "/data/orders.csv > /workdir/answer.txt")
SCRIPT = {"name": "ten-calls", "turns": [
    *({"tool": "bash", "arguments": {"command": f"echo step {i}; wc -l /data/orders.csv"}} for i in range(8)),
    {"tool": "bash", "arguments": {"command": ANSWER}},
    {"tool": "submit", "arguments": {}},
]}


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def bench_start(n: int) -> dict:
    spec = SandboxSpec()
    cold, warm, shell, base = [], [], [], []
    with SandboxPool(get_backend("bwrap"), PoolConfig(size=2)) as pool:
        pool.warm_up(spec)
        with Sandbox.create(spec) as box:  # the machine's probe, once, outside the samples
            box.run(["true"])
        for i in range(n):
            end = time.monotonic() + 30
            while pool.stats().ready < 1 and time.monotonic() < end:  # measure warm with one ready
                time.sleep(0.005)
            for which in (("cold", "warm", "shell") if i % 2 else ("shell", "warm", "cold")):
                if which == "shell":  # the bash tool's way: the waiting shell, one line in, one line out
                    while pool.stats().ready < 1 and time.monotonic() < end:
                        time.sleep(0.005)
                    base.append(baseline_once())
                    t = time.perf_counter()
                    box = pool.create(spec)
                    proc = box.spawn(list(SHELL_ARGV), cwd="/workdir")
                    proc.popen.stdin.write(b"echo ok\n")
                    proc.popen.stdin.flush()
                    line = proc.popen.stdout.readline()
                    shell.append(time.perf_counter() - t)
                    assert line == b"ok\n", line
                    box.close()
                    continue
                while which == "warm" and pool.stats().ready < 1 and time.monotonic() < end:
                    time.sleep(0.005)
                base.append(baseline_once())
                t = time.perf_counter()
                box = pool.create(spec) if which == "warm" else Sandbox.create(spec)
                out = box.run(["echo", "ok"])
                took = time.perf_counter() - t
                assert out.stdout == b"ok\n", out
                if which == "warm":
                    assert box.sandbox_start == "warm"
                (warm if which == "warm" else cold).append(took)
                box.close()
    b = statistics.median(base)
    return {"baseline": summary(base), "cold": summary(cold), "warm": summary(warm), "warm_shell": summary(shell),
            "cold_ratio": statistics.median(cold) / b, "warm_ratio": statistics.median(warm) / b,
            "warm_shell_ratio": statistics.median(shell) / b}


def bench_batch(n: int, parallels: tuple[int, ...]) -> dict:
    env = load_environment(str(EXAMPLE))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        agent = Path(tmp) / "ten.json"
        agent.write_text(json.dumps(SCRIPT))
        run_many(env, "q3-revenue", f"script:{agent}", Path(tmp) / "warmup", n=1)  # probe, imports
        for j in parallels:
            for pool in (0, 2 * j):
                out = Path(tmp) / f"j{j}-p{pool}"
                cpu, t = _cpu(), time.perf_counter()
                results = run_many(env, "q3-revenue", f"script:{agent}", out, n=n, parallel=j, pool=pool,
                                   config=RolloutConfig())
                wall, used = time.perf_counter() - t, _cpu() - cpu
                scores = [r.score for r in results]
                assert scores == [1.0] * n, [(j, pool, r.status, r.errors, [s.explanation[:300] for s in r.steps]) for r in results if r.score != 1.0][:3]
                assert all(r.usage.tool_calls == 10 for r in results), [r.usage.tool_calls for r in results][:3]
                rows.append({"parallel": j, "pool": pool, "n": n, "wall_s": wall, "rollouts_per_s": n / wall,
                             "cpu_ms_per_rollout": 1000 * used / n,
                             "warm": sum(r.sandbox_start == "warm" for r in results)})
    return {"rows": rows}


def bench_memory(count: int, shell: bool = True) -> dict:
    """Memory of `count` idle warm sandboxes, each with its session (and shell) waiting, per sandbox
    and per 1 000: what each sandbox's cgroup is charged (its processes, the kernel's memory for
    them, the page cache they read in from the sandbox's own system image) plus what the harness
    grew by, per sandbox. Handing a warm sandbox out leaves its shell waiting, so each is read as
    it sat in the pool. MemAvailable's drop is printed beside it (noisy: everything on the machine moves it)."""
    import gc

    gc.collect()
    before, rss = mem_available(), self_rss()
    with SandboxPool(get_backend("bwrap"), PoolConfig(size=count, refill=2, shell=shell, expected=count)) as pool:
        pool.warm_up(SandboxSpec())
        end = time.monotonic() + 30 + count
        while pool.stats().ready < count and time.monotonic() < end:
            time.sleep(0.05)
        ready = pool.stats().ready
        time.sleep(0.5)
        dropped, grown = before - mem_available(), self_rss() - rss
        boxes = [pool.create(SandboxSpec()) for _ in range(ready)]
        assert all(box.sandbox_start == "warm" for box in boxes)
        usages = [box.usage() for box in boxes]
        charged = sorted(u.memory_bytes for u in usages)
        cache = sorted(u.memory_file_cache_bytes for u in usages)
        for box in boxes:
            box.close()
    n = max(1, ready)
    charged_median = statistics.median(charged) if charged else 0
    cache_median = statistics.median(cache) if cache else 0
    per = charged_median + grown / n if charged else 0.0
    held = per - cache_median
    return {"sandboxes": ready, "charged_median_bytes": charged_median, "page_cache_median_bytes": cache_median,
            "harness_per_sandbox_bytes": grown / n, "per_sandbox_bytes": per, "per_1000_gib": per * 1000 / 2**30,
            "held_per_sandbox_bytes": held, "held_per_1000_gib": held * 1000 / 2**30,
            "mem_available_drop_per_sandbox_bytes": dropped / n}


def render(res: dict) -> str:
    lines = []
    if "start" in res:
        s = res["start"]
        lines.append(f"ask for a sandbox -> first output (median, p90; bare bash -c true {s['baseline']['median'] * 1000:.2f} ms):")
        for k in ("cold", "warm", "warm_shell"):
            lines.append(f"  {k:10} {s[k]['median'] * 1000:7.2f} ms  p90 {s[k]['p90'] * 1000:7.2f} ms  {s[k + '_ratio']:6.1f}x bare")
    for key, what in (("memory", "shell waiting"), ("memory_no_shell", "PoolConfig(shell=False)")):
        if key in res:
            m = res[key]
            lines.append(f"{m['sandboxes']} idle warm sandboxes ({what}): {m['per_sandbox_bytes'] / 2**20:.2f} MiB each "
                         f"({m['charged_median_bytes'] / 2**20:.2f} charged to its cgroup, median, of which "
                         f"{m['page_cache_median_bytes'] / 2**20:.2f} reclaimable page cache; + "
                         f"{m['harness_per_sandbox_bytes'] / 2**20:.2f} in the harness), {m['per_1000_gib']:.2f} GiB per 1 000, "
                         f"{m['held_per_1000_gib']:.2f} GiB without the page cache; "
                         f"MemAvailable dropped {m['mem_available_drop_per_sandbox_bytes'] / 2**20:.2f} MiB each")
    if "batch" in res:
        lines.append("10-call scripted rollout (q3-revenue), run_many:")
        for r in res["batch"]["rows"]:
            lines.append(f"  -j {r['parallel']} pool {r['pool']:2}: {r['rollouts_per_s']:6.2f} rollouts/s, "
                         f"{r['cpu_ms_per_rollout']:6.1f} ms CPU/rollout, {r['warm']}/{r['n']} warm")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", choices=("start", "batch", "memory"))
    args = ap.parse_args()
    res: dict = {}
    if args.only in (None, "start"):
        res["start"] = bench_start(4 if args.quick else 30)
    if args.only in (None, "memory"):
        res["memory"] = bench_memory(8 if args.quick else 100)
        res["memory_no_shell"] = bench_memory(8 if args.quick else 100, shell=False)
    if args.only in (None, "batch"):
        res["batch"] = bench_batch(4 if args.quick else 40, (2,) if args.quick else (2, 4, 8))
    print(json.dumps(res) if args.json else render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
