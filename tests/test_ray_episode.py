"""The Episode API on a real local Ray cluster (ray.init with 2 CPUs), over the real sandbox: a
rollout stepped from the driver runs in a Ray actor's process and its run directory comes back
whole to the driver's out_dir; a worker killed with SIGKILL mid-episode ends exactly that rollout
as an infra_error the driver writes, and the next reset runs on a fresh actor; `proctor serve
--ray local` serves the same through the real openenv-core client."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.results import read_result
from proctor.tasks.loading import load_environment

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ray = __import__("ray") if IN_CI else pytest.importorskip("ray")  # CI installs the ray extra: never a skip there

from proctor.ray_episode import RayEpisode  # noqa: E402 - after the ray import check

EXAMPLE = Path(__file__).parent.parent / "examples" / "quarterly_revenue"
SOLVE = ("awk -F, '$4==\"paid\" && $2>=\"2024-07-01\" && $2<=\"2024-09-30\" {s+=$3} END {print s}' "
         "/data/orders.csv > /workdir/answer.txt; cat /workdir/answer.txt")


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


def _hosts() -> list[int]:
    """The pids of the Ray actor processes that hold an episode."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read(64).startswith(b"ray::EpisodeHost"):
                        found.append(int(name))
            except OSError:
                pass
    return found


def _descendants(pid: int) -> list[str]:
    """The command lines of every process below `pid`."""
    parent, command = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    parent[int(name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    command[int(name)] = f.read(200).replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError, IndexError):
                pass
    below = []
    for child in parent:
        p, seen = parent[child], 0
        while p and p != pid and seen < 64:
            p, seen = parent.get(p, 0), seen + 1
        if p == pid:
            below.append(command.get(child, ""))
    return below


def test_an_episode_stepped_from_the_driver_runs_on_a_ray_actor_and_comes_back_whole(cluster, env, tmp_path):
    out = tmp_path / "out"
    with RayEpisode(out, env=env, address="auto") as ep:
        obs = ep.reset("q3-revenue")
        assert "Q3 2024" in obs.instructions and not ep.done
        assert {t["name"] for t in ep.tool_specs} >= {"bash", "submit"}
        assert ep.check_call("bash", {"command": 3}) is not None and ep.check_call("nope", {}) is not None
        step = ep.step({"tool": "bash", "arguments": {"command": SOLVE}})
        assert "37087" in step.observation.text and not step.done
        [host] = _hosts()
        assert any(c.startswith("sandbox-init") for c in _descendants(host))  # the sandbox is the actor's
        assert ep.state().turns == 1
        last = ep.step({"tool": "submit", "arguments": {}})
        assert last.done and last.reward == 1.0
    run_dir = out / ep.run_id
    assert read_result(run_dir / "result.json").status == "completed"
    assert Path(last.info["result_path"]) == run_dir / "result.json"
    events = [json.loads(line)["type"] for line in (run_dir / "transcript.jsonl").read_text().splitlines()]
    assert events[0] == "rollout_start" and "tool_result" in events and "score" in events
    deadline = time.monotonic() + 30
    while any(c.startswith("sandbox-init") for c in _descendants(host)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(c.startswith("sandbox-init") for c in _descendants(host))  # the sandbox went with the rollout


def test_the_next_episode_reuses_the_idle_actor_but_never_sees_the_previous_sandbox(cluster, env, tmp_path):
    out = tmp_path / "out"
    first = RayEpisode(out, env=env, address="auto")
    first.reset("q3-revenue")
    first.step({"tool": "bash", "arguments": {"command": "echo planted > /tmp/planted; echo planted > /workdir/planted; "
                                                         "(sleep 300 &) ; echo ok"}})
    [host] = [h for h in _hosts() if _descendants(h)]
    first.close()
    second = RayEpisode(out, env=env, address="auto")
    second.reset("q3-revenue")
    seen = second.step({"tool": "bash", "arguments": {"command": "ls /tmp /workdir; ps -eo args"}}).observation.text
    assert "planted" not in seen and "sleep 300" not in seen, seen
    assert host in _hosts() and any(c.startswith("sandbox-init") for c in _descendants(host))  # the same actor
    assert not any(c.startswith("sleep 300") for c in _descendants(host))
    second.close()


def test_a_worker_killed_mid_episode_ends_that_rollout_as_an_infra_error_and_the_next_reset_runs(cluster, env, tmp_path):
    out = tmp_path / "out"
    ep = RayEpisode(out, env=env, address="auto")
    ep.reset("q3-revenue")
    first = ep.run_id
    [host] = _hosts()
    os.kill(host, signal.SIGKILL)
    step = ep.step({"tool": "bash", "arguments": {"command": SOLVE}})
    assert step.done and step.reward == 0.0 and step.info["status"] == "infra_error"
    result = read_result(out / first / "result.json")
    assert result.status == "infra_error" and result.run_id == first and result.task_id == "q3-revenue"
    assert "ray: the episode's step failed, its worker or node died" in result.errors[0]
    with pytest.raises(Exception, match="done"):
        ep.step({"tool": "submit", "arguments": {}})
    ep.reset("q3-revenue")
    assert ep.run_id != first
    ep.step({"tool": "bash", "arguments": {"command": SOLVE}})
    assert ep.step({"tool": "submit", "arguments": {}}).reward == 1.0
    assert sorted(p.name for p in out.iterdir()) == sorted([first, ep.run_id])  # each run id once


def test_closing_or_resetting_mid_episode_brings_the_abandoned_rollout_back(cluster, env, tmp_path):
    out = tmp_path / "out"
    ep = RayEpisode(out, env=env, address="auto")
    ep.reset("q3-revenue")
    first = ep.run_id
    ep.step({"tool": "bash", "arguments": {"command": "echo 5 > /workdir/answer.txt"}})
    ep.reset("q3-revenue")  # the first is closed first, as Episode does
    abandoned = read_result(out / first / "result.json")
    assert abandoned.status == "abandoned" and (out / first / "transcript.jsonl").is_file()
    result = ep.close()
    assert result.status == "abandoned" and result.run_id == ep.run_id != first


def test_a_bad_task_id_is_a_config_error_and_nothing_is_written(cluster, env, tmp_path):
    out = tmp_path / "out"
    ep = RayEpisode(out, env=env, address="auto")
    with pytest.raises(ConfigError, match="no-such-task"):
        ep.reset("no-such-task")
    assert not out.exists() or list(out.iterdir()) == []
    assert not ep.done and ep.close() is None


def test_proctor_serve_with_ray_serves_episodes_to_the_openenv_client(confinement, tmp_path):
    from openenv.core.generic_client import GenericEnvClient

    from test_server import _start, _stop

    out = tmp_path / "serve"
    proc, port = _start(out, "--ray", "local")
    try:
        with GenericEnvClient(base_url=f"http://127.0.0.1:{port}", message_timeout_s=300).sync() as client:
            first = client.reset(task="q3-revenue")
            assert "Q3 2024" in first.observation["instructions"]
            client.step({"type": "call_tool", "tool_name": "bash", "arguments": {"command": SOLVE}})
            last = client.step({"type": "call_tool", "tool_name": "submit", "arguments": {}})
            assert last.done and last.reward == 1.0
    finally:
        _stop(proc)
    [run_dir] = list(out.iterdir())
    assert read_result(run_dir / "result.json").status == "completed" and (run_dir / "transcript.jsonl").is_file()


def test_trls_environment_class_runs_its_rollouts_on_ray(cluster, tmp_path):
    from proctor.integrations.trl import environment_class

    trl_env = environment_class(EXAMPLE, tmp_path / "out", ray="auto")()
    assert "Q3 2024" in trl_env.reset(prompt=[{"role": "user", "content": "Solve it."}], task="q3-revenue")
    assert trl_env.bash(command=SOLVE).strip() == "37087" and _hosts()
    assert trl_env.bash(command=7).startswith("[error] bash: argument 'command'")
    assert "task is over" in trl_env.submit()
    assert trl_env.get_reward() == 1.0
    assert read_result(trl_env.episode.run_dir / "result.json").status == "completed"
