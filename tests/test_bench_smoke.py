"""The sandbox benchmark stays runnable: a quick run finishes and reports every figure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "sandbox.py"

# Like the sandbox tests: skip on a machine that cannot host a sandbox, but never under CI=true,
# where a skip would hide a broken benchmark.
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
needs_sandbox_host = pytest.mark.skipif(
    not IN_CI and (not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("bwrap") is None),
    reason="the benchmark builds real sandboxes: Linux, root and bubblewrap",
)


def _quick(script: str, timeout: int = 120) -> dict:
    """A benchmark's --quick --json run, which must succeed."""
    proc = subprocess.run([sys.executable, str(BENCH.with_name(script)), "--quick", "--json"],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def _positive(section: dict, *path: str) -> float:
    value = section
    for key in path:
        value = value[key]
    assert isinstance(value, (int, float)) and value > 0, f"{'.'.join(path)} = {value!r}"
    return value


@needs_sandbox_host
def test_the_sandbox_benchmark_runs_and_reports_every_figure() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json"], capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout)

    life = res["lifecycle"]
    for part in ("total", "create", "first_command", "close", "baseline"):
        _positive(life, part, "median")
        _positive(life, part, "p90")
    _positive(life, "ratio")

    run = res["run_in_session"]
    _positive(run, "run", "median")
    _positive(run, "baseline", "median")
    _positive(run, "ratio")

    storm = res["kill_all_fork_storm"]
    _positive(storm, "kill_all", "median")
    _positive(storm, "baseline", "median")
    _positive(storm, "ratio")
    assert min(storm["processes_seen"]) >= 500

    mem = res["idle_memory"]
    for side in ("sandbox", "baseline"):
        _positive(mem, side, "cgroup_usage")
        _positive(mem, side, "pss")
        _positive(mem, side, "processes")
    _positive(mem, "ratio_cgroup_usage")


@needs_sandbox_host
def test_the_tools_and_custody_benchmark_runs_and_reports_every_figure() -> None:
    res = _quick("tools_custody.py")
    for key in ("tool_ms", "pipe_ms", "ratio"):
        _positive(res["bash"], key)
    for key in ("custody_s", "cp_a_s", "ratio"):
        _positive(res["custody"], key)


@needs_sandbox_host
def test_the_rollout_benchmark_runs_and_reports_every_figure() -> None:
    res = _quick("rollout.py")
    for key in ("bare_sandbox_ms", "rollout_ms", "ratio"):
        _positive(res, key)


@needs_sandbox_host
def test_the_pool_benchmark_runs_and_reports_every_figure() -> None:
    res = _quick("pool.py", timeout=180)
    for which in ("cold", "warm"):
        _positive(res, "start", which, "median")
        _positive(res, "start", f"{which}_ratio")
    rows = res["batch"]["rows"]
    assert {r["pool"] > 0 for r in rows} == {True, False}
    for r in rows:
        assert r["rollouts_per_s"] > 0 and r["cpu_ms_per_rollout"] > 0
    for key in ("memory", "memory_no_shell"):  # read from each sandbox's own cgroup
        m = res[key]
        assert m["sandboxes"] > 0
        _positive(res, key, "charged_median_bytes")
        assert 0 <= m["page_cache_median_bytes"] <= m["charged_median_bytes"]
        assert m["held_per_sandbox_bytes"] <= m["per_sandbox_bytes"]


@needs_sandbox_host
def test_the_ray_benchmark_runs_and_reports_its_ratio() -> None:
    res = _quick("ray_batch.py", timeout=240)
    for key in ("local_per_s", "ray_per_s", "ratio", "ray_start_s"):
        _positive(res, key)


@needs_sandbox_host
def test_the_ray_episode_benchmark_runs_and_reports_its_ratios() -> None:
    res = _quick("ray_episode.py", timeout=240)
    for key in ("local_step_ms", "ray_step_ms", "step_ratio", "local_rollout_s", "ray_rollout_s", "rollout_ratio"):
        _positive(res, key)


@needs_sandbox_host
def test_the_server_benchmark_runs_and_reports_every_figure() -> None:
    res = _quick("server.py", timeout=180)
    for key in ("direct_step_ms", "served_step_ms"):
        _positive(res, key)
    assert isinstance(res["overhead_ms"], float)
def test_the_syscall_filter_benchmark_runs_and_reports_its_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH.with_name("syscall_filter.py")), "--quick", "--json"], capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout)
    assert res["n"] > 0 and _positive(res, "with_filter_ms") and _positive(res, "without_ms") and _positive(res, "ratio")


@needs_sandbox_host
def test_the_fake_backend_benchmark_runs_and_reports_its_speedup() -> None:
    res = _quick("fake_backend.py")
    for key in ("bwrap_ms", "fake_ms", "speedup"):
        _positive(res, key)


@needs_sandbox_host
def test_the_gvisor_benchmark_runs_and_reports_every_figure() -> None:
    res = _quick("gvisor.py", timeout=300)
    for key in ("runsc_do_true_ms", "start_gvisor_ms", "start_bwrap_ms", "rollout_gvisor_ms", "rollout_bwrap_ms",
                "start_gvisor_vs_runsc_do", "rollout_gvisor_vs_bwrap"):
        _positive(res, key)


def test_the_report_benchmark_runs_and_reports_its_ratio_and_memory() -> None:
    res = _quick("report.py")
    assert res["results"] == 2000 and res["cells"] > 1
    for key in ("report_s", "baseline_s", "ratio", "results_per_s", "peak_rss_bytes", "peak_rss_tenth_bytes", "rss_ratio"):
        _positive(res, key)


@needs_sandbox_host
def test_the_images_benchmark_runs_and_reports_every_figure() -> None:
    # The bench's own store; the base tarball (mmdebstrap, once) is kept there between runs.
    res = _quick("images.py", timeout=900)
    for section, keys in (("build", ("cold_s", "cached_s", "cold_over_cached")),
                          ("sandbox_start", ("image_s", "plain_s", "image_over_plain")),
                          ("warm_command", ("image_s", "plain_s", "image_over_plain"))):
        for key in keys:
            _positive(res, section, key)
    assert res["build"]["cold_over_cached"] > 1  # the second build of the same content is a cache hit


@needs_sandbox_host
def test_the_telemetry_benchmark_runs_and_reports_its_overhead() -> None:
    res = _quick("telemetry.py")
    for arm in ("baseline_ms", "telemetry_ms"):
        for key in ("wall", "self_cpu", "sandbox_cpu"):
            _positive(res, arm, key)
    assert isinstance(res["wall_overhead"], float) and isinstance(res["cpu_overhead"], float)
    assert res["verdict"] in ("PASS", "MISS") and res["tool_calls"] == 10
    _positive(res, "detectors_ms_per_step")


def test_the_planted_scan_benchmark_runs_and_the_cache_pays() -> None:
    res = _quick("planted_scan.py")
    assert res["files"] == 100 and res["steps"] == 3
    for key in ("cold_ms", "warm_first_ms", "warm_ms"):
        _positive(res, key)
    assert res["ratio_warm_to_cold"] < 1, res  # the cached step reads and parses nothing
