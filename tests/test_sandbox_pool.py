"""The warm pool on the real sandbox: each sandbox serves one rollout and is destroyed, so nothing
a student leaves (files in /workdir, /tmp, /dev/shm, a process) reaches the next rollout; a sandbox
that served one is refused if offered again; a drained pool builds cold and never blocks; and a
batch through `proctor run --pool` records warm and cold in result.json."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proctor import cli
from proctor.errors import SandboxError
from proctor.sandbox import SandboxSpec, get_backend
from proctor.sandbox.pool import SHELL_ARGV, PoolConfig, SandboxPool

EXAMPLE = Path(__file__).parent.parent / "examples" / "quarterly_revenue"


def _pids_of_uid(uid: int) -> list[int]:
    """The host's processes of `uid`, read straight from /proc (the test checks the pool from outside)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                pids.append(int(entry))
        except FileNotFoundError:
            continue
    return pids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ready(pool: SandboxPool, n: int, timeout_s: float = 30.0) -> None:
    end = time.monotonic() + timeout_s
    while pool.stats().ready < n:
        assert time.monotonic() < end, f"the pool did not fill: {pool.stats()}"
        time.sleep(0.02)


@pytest.fixture
def pool(confinement):
    with SandboxPool(get_backend("bwrap"), PoolConfig(size=2)) as made:
        made.warm_up(SandboxSpec())
        _ready(made, 2)
        yield made


def test_what_rollout_a_leaves_is_never_seen_by_rollout_b(pool):
    a = pool.create(SandboxSpec())
    assert a.sandbox_start == "warm"
    planted = a.run("echo secret-a > /workdir/left; echo secret-a > /tmp/left; echo secret-a > /dev/shm/left; "
                    "(setsid sleep 600 >/dev/null 2>&1 &) ; echo planted")
    assert planted.ok and planted.stdout.strip() == b"planted"
    assert b"sleep 600" in b"\n".join(p.command.encode() for p in a.processes())
    a_uid = a.uid
    a.close()
    b = pool.create(SandboxSpec())
    try:
        assert b.sandbox_start == "warm" and b.id != a.id and b.uid != a_uid
        seen = b.run("cat /workdir/left /tmp/left /dev/shm/left 2>&1; ls -A /workdir /tmp /dev/shm; ps -eo args")
        assert b"secret-a" not in seen.stdout and b"No such file" in seen.stdout
        assert b"sleep 600" not in seen.stdout, "rollout A's process must not be visible to rollout B"
        assert all("sleep 600" not in p.command for p in b.processes())
    finally:
        b.close()
    assert pool.drain(30) and pool.stats().errors == []
    assert not [pid for pid in _pids_of_uid(a_uid) if "sleep 600" in _cmdline(pid)], \
        "the destroyed sandbox's process survived"


def test_a_sandbox_that_served_a_rollout_is_refused_if_handed_again(pool):
    a = pool.create(SandboxSpec())
    a.run("echo mine > /workdir/note")
    with pytest.raises(SandboxError, match="already served a rollout"):
        pool.offer(a)
    a.close()
    with pytest.raises(SandboxError, match="served one rollout and is destroyed"):
        a.run("cat /workdir/note")
    assert pool.stats().refused == 1


def test_a_drained_pool_builds_cold_and_never_blocks(confinement):
    with SandboxPool(get_backend("bwrap"), PoolConfig(size=1)) as pool:
        pool.warm_up(SandboxSpec())
        _ready(pool, 1)
        boxes = []
        try:
            start = time.monotonic()
            for _ in range(3):  # one warm, then a burst past the pool: built at once, cold
                boxes.append(pool.create(SandboxSpec()))
            assert time.monotonic() - start < 20
            assert [b.sandbox_start for b in boxes] == ["warm", "cold", "cold"]
            assert all(b.run("echo ok").stdout == b"ok\n" for b in boxes)
            assert all(b.confinement.ok for b in boxes), "confinement is granted per sandbox, warm or cold"
        finally:
            for b in boxes:
                b.close()
        stats = pool.stats()
        assert stats.warm == 1 and stats.cold == 2
    assert pool.stats().pending_teardown == 0 and pool.stats().torn_down >= 3


def test_a_batch_through_the_pool_records_warm_and_cold_and_scores(confinement, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["run", str(EXAMPLE), "--task", "q3-revenue", "--agent", "oracle", "--out", str(out),
                                          "-n", "4", "--pool", "2", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)
    assert [(r["status"], r["score"]) for r in results] == [("completed", 1.0)] * 4
    starts = [r["sandbox_start"] for r in results]
    assert starts[0] == "cold" and "warm" in starts, starts  # the first asks before the pool knows its spec
    on_disk = [json.loads((out / r["run_id"] / "result.json").read_text())["sandbox_start"] for r in results]
    assert on_disk == starts


def test_a_pool_size_out_of_bounds_is_a_clear_cli_error(tmp_path):
    result = CliRunner().invoke(cli.app, ["run", str(EXAMPLE), "--task", "q3-revenue", "--agent", "oracle",
                                          "--out", str(tmp_path / "o"), "--pool", "5000"])
    assert result.exit_code == 2 and "--pool" in result.output and "Traceback" not in result.output


def test_the_waiting_shell_goes_to_the_first_spawn_and_is_never_seen_unasked(pool):
    a = pool.create(SandboxSpec())
    try:
        shell = a.spawn(list(SHELL_ARGV), cwd="/workdir")
        assert shell.alive()
        out, _ = shell.popen.communicate(b"id -u; pwd\n", timeout=10)
        assert out.split() == [str(a.uid).encode(), b"/workdir"]
    finally:
        a.close()
    b = pool.create(SandboxSpec())
    try:
        # A rollout that never asks for the shell never sees it: custody's process table is empty.
        seen = b.processes()
        assert not [p for p in seen if p.uid == b.uid or "bash" in p.command], seen
        assert b.run("echo after").stdout == b"after\n"
    finally:
        b.close()
    assert pool.drain(30) and pool.stats().errors == [], "every sandbox torn down whole"


def test_a_rollout_without_the_bash_tool_through_the_pool_is_not_flagged(confinement, tmp_path):
    from proctor.runner import run_many
    from proctor.tasks.loading import load_environment

    env = load_environment(str(EXAMPLE))
    task = env.tasks["q3-revenue"]
    agent = tmp_path / "submit.json"
    agent.write_text(json.dumps({"name": "submit-only", "turns": [{"tool": "submit", "arguments": {}}]}))
    with SandboxPool(get_backend("bwrap"), PoolConfig(size=3)) as pool:
        pool.warm_up(SandboxSpec(limits=task.limits.sandbox, data_dir=str(task.data)))
        _ready(pool, 3)
        results = run_many(env, "q3-revenue", f"script:{agent}", tmp_path / "out", n=3, backend=pool)
        assert pool.drain(30) and pool.stats().errors == []
    assert [r.sandbox_start for r in results] == ["warm"] * 3
    assert [r.status for r in results] == ["completed"] * 3 and all(not r.misbehaviour for r in results), results
