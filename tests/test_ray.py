"""Rollouts over a real local Ray cluster (ray.init with 2 CPUs, no dashboard), on the real sandbox:
results and transcripts come back to the driver's --out, a worker killed with SIGKILL mid-rollout
loses no rollout and counts none twice (retried under the same run id), and past the retry bound
exactly the killed rollout becomes an infra_error."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.runner import run_many
from proctor.sandbox import machine_confinement
from proctor.tasks.loading import load_environment

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ray = __import__("ray") if IN_CI else pytest.importorskip("ray")  # CI installs the ray extra: never a skip there

EXAMPLE = Path(__file__).parent.parent / "examples" / "quarterly_revenue"
SLOW = {"name": "slow", "turns": [
    {"tool": "bash", "arguments": {"command": (
        "sleep 1.5; awk -F, '$4==\"paid\" && $2>=\"2024-07-01\" && $2<=\"2024-09-30\" {s+=$3} END {print s}' "
        "/data/orders.csv > /workdir/answer.txt")}},
    {"tool": "submit", "arguments": {}}]}


@pytest.fixture(scope="module")
def cluster(confinement):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             object_store_memory=80 * 1024 * 1024)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def env():
    return load_environment(str(EXAMPLE))


def _rollout_workers() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read(64).startswith(b"ray::run_job"):
                        found.append(int(name))
            except OSError:
                pass
    return found


def _kill_one_worker_mid_rollout(killed: list[int]) -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        busy = _rollout_workers()
        if busy:
            time.sleep(0.5)  # inside its rollout: sandbox up, the script's sleep running
            try:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])
            except ProcessLookupError:
                continue
            return
        time.sleep(0.05)


def test_rollouts_on_ray_come_back_whole_to_the_drivers_out(cluster, env, tmp_path):
    out = tmp_path / "out"
    results = run_many(env, "q3-revenue", "oracle", out, n=3, parallel=2, ray="auto")
    assert [(r.status, r.score) for r in results] == [("completed", 1.0)] * 3
    for r in results:
        saved = json.loads((out / r.run_id / "result.json").read_text())
        assert saved["run_id"] == r.run_id
        # The worker's sandbox was granted exactly what this machine enforces, as a local rollout's is.
        assert saved["confinement"]["protections"] == {p.name: p.status for p in machine_confinement().protections}
        events = [json.loads(line)["type"] for line in (out / r.run_id / "transcript.jsonl").read_text().splitlines()]
        assert events[0] == "rollout_start" and events[-1] == "rollout_end"
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(r.run_id for r in results)


def test_a_worker_killed_mid_batch_loses_no_rollout_and_counts_none_twice(cluster, env, tmp_path):
    agent = tmp_path / "slow.json"
    agent.write_text(json.dumps(SLOW))
    out, killed = tmp_path / "out", []
    killer = threading.Thread(target=_kill_one_worker_mid_rollout, args=(killed,))
    killer.start()
    results = run_many(env, "q3-revenue", f"script:{agent}", out, n=4, parallel=2, ray="auto", ray_retries=2)
    killer.join()
    assert killed, "the test must kill a worker while it runs a rollout"
    assert [(r.status, r.score) for r in results] == [("completed", 1.0)] * 4, [r.errors for r in results]
    run_ids = [r.run_id for r in results]
    assert len(set(run_ids)) == 4
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(run_ids)


def test_past_the_retry_bound_exactly_the_killed_rollout_is_an_infra_error(cluster, env, tmp_path):
    agent = tmp_path / "slow.json"
    agent.write_text(json.dumps(SLOW))
    out, killed = tmp_path / "out", []
    killer = threading.Thread(target=_kill_one_worker_mid_rollout, args=(killed,))
    killer.start()
    results = run_many(env, "q3-revenue", f"script:{agent}", out, n=3, parallel=2, ray="auto", ray_retries=0)
    killer.join()
    assert len(killed) == 1
    statuses = sorted(r.status for r in results)
    assert statuses == ["completed", "completed", "infra_error"], [(r.status, r.errors) for r in results]
    failed = next(r for r in results if r.status == "infra_error")
    assert "after 1 attempt(s)" in failed.errors[0] and "ray" in failed.errors[0]
    assert json.loads((out / failed.run_id / "result.json").read_text())["status"] == "infra_error"
    assert len({r.run_id for r in results}) == 3


def test_ray_with_a_pool_is_a_clear_error(env, tmp_path):
    with pytest.raises(ConfigError, match="drop --pool"):
        run_many(env, "q3-revenue", "oracle", tmp_path / "o", n=1, ray="auto", pool=2)


def test_proctor_run_with_ray_writes_the_batch_to_out(cluster, tmp_path):
    from typer.testing import CliRunner

    from proctor import cli

    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["run", str(EXAMPLE), "--task", "q3-revenue", "--agent", "oracle", "--out", str(out),
                                          "-n", "2", "-j", "2", "--ray", "auto", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)
    assert [(r["status"], r["score"]) for r in results] == [("completed", 1.0)] * 2
    assert all((out / r["run_id"] / "transcript.jsonl").is_file() for r in results)
