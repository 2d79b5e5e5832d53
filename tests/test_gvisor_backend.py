"""What only the gVisor runtime has to prove: a clear failure without a working runsc, what its
confinement report says, kill_all's proof and a teardown that leaves nothing, and a whole rollout
(the oracle scores 1). The isolation, limits, custody and reaping suites run on it too, through
the `runtime` parametrisation in conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _require_root

pytestmark = pytest.mark.runtimes("gvisor")  # make_sandbox gives gVisor sandboxes here

ROOT = Path(__file__).resolve().parents[1]
PROCTOR = [sys.executable, "-m", "proctor.cli"]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*PROCTOR, *args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def test_check_confinement_fails_in_one_line_without_runsc(tmp_path):
    _require_root()
    import json

    for bogus, says in ((str(tmp_path / "no-runsc"), "not found"), ("/bin/false", "not a working runsc")):
        res = _cli("check", "confinement", "--runtime", "gvisor", env={"PROCTOR_RUNSC": bogus})
        assert res.returncode == 1, res.stdout + res.stderr
        assert "Traceback" not in res.stdout + res.stderr and "missing: sandbox" in res.stdout
        res = _cli("check", "confinement", "--runtime", "gvisor", "--json", env={"PROCTOR_RUNSC": bogus})
        report = json.loads(res.stdout)
        assert res.returncode == 1 and report["missing"] == ["sandbox"]
        assert says in report["protections"][0]["detail"] and "\n" not in report["protections"][0]["detail"]


def test_creating_a_gvisor_sandbox_without_runsc_is_one_clear_error(tmp_path):
    _require_root()
    code = (
        "from proctor.sandbox import get_backend\n"
        "from proctor.errors import ProctorError\n"
        "try:\n"
        "    get_backend('gvisor').create()\n"
        "except ProctorError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PROCTOR_RUNSC": str(tmp_path / "no-runsc")})
    assert res.stdout.startswith("ERROR ") and "runsc" in res.stdout and "PROCTOR_RUNSC" in res.stdout, res.stdout + res.stderr
    assert len(res.stdout.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_check_confinement_says_what_gvisor_adds_and_lacks():
    _require_root()
    res = _cli("check", "confinement", "--runtime", "gvisor", "--json")
    import json

    report = json.loads(res.stdout)
    status = {p["name"]: p["status"] for p in report["protections"]}
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert status["user_space_kernel"] == "enforced"
    assert status["hardware_isolation"] == "degraded"  # ptrace platform: no KVM here
    assert status["syscall_filter"] == "degraded"  # refused by the sentry, not recorded
    assert status["device_passthrough"] == "missing"
    for name in ("uid_isolation", "no_new_privs", "network_namespace", "memory_limit", "pids_limit", "cpu_quota", "disk_quota"):
        assert status[name] == "enforced", name


def test_kill_all_proves_the_container_gone_and_close_leaves_nothing(make_sandbox, runtime):
    assert runtime == "gvisor"
    from proctor.sandbox.host import state_dir

    box = make_sandbox()
    box.spawn(["/bin/sh", "-c", "for i in 1 2 3; do (setsid sleep 1000 &) ; done; sleep 1000"])
    box.run("echo kept > /workdir/a")
    assert box.processes() and box.host_pids()
    report = box.kill_all()
    assert report.empty and report.killed >= 4, report
    assert box.processes() == [] and box.host_pids() == []  # no student task, no sentry or gofer
    assert box.run("cat /workdir/a").text == "kept\n"  # a fresh container, the same workdir
    sandbox_dir = state_dir("sandboxes") / box.id
    uid = box.uid
    box.close()
    assert not sandbox_dir.exists()  # runsc's state, the bundle and the places went with it
    assert str(sandbox_dir) not in Path("/proc/self/mountinfo").read_text()  # no mount left
    assert not any(Path(p, "proctor", box.id).exists() for p in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"))
    assert not (state_dir("uids") / str(uid)).exists()  # the uid lease is released


def test_the_oracle_scores_one_under_gvisor(tmp_path, gvisor_confinement):
    from proctor.agents import make_agent
    from proctor.harness import run_rollout
    from proctor.sandbox import get_backend
    from proctor.tasks import load_environment

    env = load_environment(str(ROOT / "examples" / "quarterly_revenue"))
    task = env.tasks["q3-revenue"]
    result = run_rollout(task, make_agent("oracle", task), tmp_path, env_dir=env.directory, backend=get_backend("gvisor"))
    assert result.score == 1.0, result.errors
    assert not result.misbehaviour


def test_a_memory_hog_under_the_long_lived_shell_leaves_the_sandbox_usable(make_sandbox):
    """At the memory limit the host kills the sentry, i.e. the whole container under the bash
    tool's shell: the kill is counted, and the next command gets a fresh container."""
    import time

    from proctor.sandbox.models import MiB

    box = make_sandbox(memory_bytes=128 * MiB)
    box.run("echo kept > /workdir/a")
    shell = box.spawn(["/bin/sh"])
    shell.popen.stdin.write(b"/usr/bin/python3 -c 'x = bytearray(512 * 1024**2)'\n")
    shell.popen.stdin.flush()
    end = time.monotonic() + 60
    while shell.alive() and time.monotonic() < end:
        time.sleep(0.1)
    assert not shell.alive()
    assert box.usage().oom_kills >= 1
    assert box.run("cat /workdir/a").text == "kept\n"


CRASHING_HARNESS = """
import time
from proctor.sandbox import get_backend
box = get_backend("gvisor").create()
box.run("setsid sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 & echo x > /workdir/answer.txt")
box.spawn(["/bin/sh", "-c", "sleep 1000"])
print(box.id, " ".join(map(str, box.host_pids())), flush=True)
time.sleep(1000)
"""


def test_a_killed_harness_leaves_no_gvisor_container_after_reclaim(gvisor_confinement):
    import signal

    from proctor.sandbox import get_backend
    from proctor.sandbox.host import state_dir

    harness = subprocess.Popen([sys.executable, "-c", CRASHING_HARNESS], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    sandbox_id, *host_pids = harness.stdout.readline().split()
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    assert host_pids and (state_dir("sandboxes") / sandbox_id).exists()
    assert sandbox_id in get_backend("gvisor").reclaim_stale()
    alive = [p for p in host_pids if Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split(")")[-1][:3]]
    assert alive == []  # the sentry, gofer and stubs are gone
    assert not (state_dir("sandboxes") / sandbox_id).exists()
    assert str(state_dir("sandboxes") / sandbox_id) not in Path("/proc/self/mountinfo").read_text()
    assert not any(Path(p, "proctor", sandbox_id).exists() for p in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"))


def test_the_whole_red_team_is_held_under_gvisor_and_only_the_listed_gaps_go_unflagged(tmp_path, gvisor_confinement):
    from proctor.redteam import run_redteam
    from proctor.redteam.runtime_gaps import _ATTACKS, _KINDS
    from proctor.tasks import load_environment

    rows = run_redteam(load_environment(str(ROOT / "examples" / "quarterly_revenue")), out_dir=tmp_path, parallel=2, runtime="gvisor")
    bad = [f"{r.attack}: {r.problem}" for r in rows if not r.ok]
    assert not bad, "\n".join(bad)
    assert {"oracle", "null", "degenerate"} <= {r.attack for r in rows} and len(rows) >= 60
    unseen = [r for r in rows if r.unseen]
    # Each held-but-unflagged row is one the gaps table names, for a reason it gives: a gap
    # that closes (gVisor starts counting) shows up here as a row no longer unseen.
    for r in unseen:
        assert r.score == 0.0 and not set(r.expected_flags) & set(r.flagged)
        assert r.attack in _ATTACKS["gvisor"] or set(r.expected_flags) <= set(_KINDS["gvisor"]), r
    assert {r.attack for r in unseen} >= set(_ATTACKS["gvisor"]) - {"fork-bomb"}  # the fork bomb may be flagged for what it leaves


def test_a_runtime_gap_excuses_only_what_the_runtime_cannot_witness():
    from proctor.redteam.runtime_gaps import unseen

    assert unseen("bwrap", "kernel-keyring", ("forbidden_syscall",)) == ""  # bwrap records everything the library expects
    assert "seccomp recorder" in unseen("gvisor", "kernel-keyring", ("forbidden_syscall",))
    assert unseen("gvisor", "mmap-memory-hog", ("resource_limit_hit",)) == ""  # OOM kills are counted under gVisor too
    assert unseen("gvisor", "some-attack", ("forbidden_syscall", "hidden_path_probe")) == ""  # one kind it can see: required
