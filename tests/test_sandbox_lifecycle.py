"""Creation, execution, teardown and reclaim leave the host exactly as they found it."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proctor.errors import ConfinementError
from proctor.sandbox import DEFAULT_REQUIRED, Protection, Sandbox, procfs, reclaim_stale, tmpfs
from proctor.sandbox.cgroups import layout
from proctor.sandbox.host import STATE_DIR
from proctor.sandbox.uids import uid_in_range

REPO = Path(__file__).resolve().parent.parent


def _state_files() -> list[str]:
    """Every file and directory under the state dir, without descending into mounts: a live
    sandbox's overlays show all of /usr there (the mounts themselves are listed separately)."""
    found = []
    for root, dirs, names in os.walk(STATE_DIR):
        # This process's /etc template is made by its first sandbox and kept for its lifetime on
        # purpose (reclaim removes it once the process is gone).
        dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(root, d)) and not d.startswith(f"{os.getpid()}-")]
        found += [os.path.join(root, n) for n in (*dirs, *names)]
    return found


def host_snapshot() -> dict[str, object]:
    """What a sandbox could leak: cgroups, mounts, processes of sandbox uids, state files."""
    cgroups = sorted(str(p) for root in layout().roots() if root.exists() for p in root.iterdir() if p.is_dir())
    mounts = [str(p) for p in tmpfs.mounts_under(STATE_DIR)]
    procs = sorted(p for p in procfs.pids() if (ids := procfs.uids_of(p)) and any(uid_in_range(u) for u in ids))
    files = sorted(_state_files())
    loops = sorted(Path("/sys/block").glob("loop*/loop/backing_file"))
    return {"cgroups": cgroups, "mounts": mounts, "processes": procs, "files": files, "loops": [str(p) for p in loops]}


def test_teardown_leaves_nothing_behind(confinement):
    before = host_snapshot()
    box = Sandbox.create()
    box.run("setsid sleep 1000 & echo x > /workdir/f; sleep 1000 & dd if=/dev/zero of=/dev/shm/x bs=1k count=10")
    box.close()
    assert host_snapshot() == before


HARNESS = """
import sys, time
from proctor.sandbox import Sandbox
box = Sandbox.create()
box.run("setsid sh -c 'sleep 1000 & sleep 1000' >/dev/null 2>&1 & echo x > /workdir/answer.txt")
box.spawn(["/bin/sh", "-c", "sleep 1000"])
print(box.id, box.uid, flush=True)
time.sleep(1000)
"""


def test_a_killed_harness_leaks_nothing_permanent_after_reclaim(confinement):
    before = host_snapshot()
    harness = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True, cwd=REPO)
    sandbox_id, uid = harness.stdout.readline().split()
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    time.sleep(0.2)
    crashed = host_snapshot()
    assert crashed != before, "the crash should have left state behind"
    reclaimed = reclaim_stale()
    assert sandbox_id in reclaimed
    assert host_snapshot() == before
    assert procfs.pids_of_uid(int(uid)) == []


def test_reclaim_leaves_live_sandboxes_alone(sandbox):
    sandbox.run("sleep 1000 &")
    assert sandbox.id not in reclaim_stale()
    assert sandbox.run("echo alive").text == "alive\n"


def test_without_root_the_error_says_what_is_needed(confinement):
    code = "from proctor.sandbox import Sandbox\nSandbox.create()"
    res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                         capture_output=True, text=True, cwd="/", env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode != 0
    assert "SandboxUnavailable: Proctor sandboxes need root" in res.stderr


def test_check_confinement_without_root_is_a_one_line_error(confinement):
    proctor = Path(sys.executable).parent / "proctor"
    res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(proctor), "check", "confinement"],
                         capture_output=True, text=True, cwd="/")
    assert res.returncode == 2
    assert "need root" in res.stderr and "Traceback" not in res.stdout + res.stderr


def test_check_confinement_reports_every_default_protection_enforced(confinement):
    proctor = Path(sys.executable).parent / "proctor"
    res = subprocess.run([str(proctor), "check", "confinement", "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    statuses = {p["name"]: p["status"] for p in report["protections"]}
    assert report["ok"] and report["missing"] == []
    assert {statuses[name] for name in DEFAULT_REQUIRED} == {"enforced"}


def test_a_protection_the_machine_lacks_refuses_the_sandbox_unless_opted_out(monkeypatch, confinement):
    weakened = confinement.model_copy(update={"protections": tuple(
        p if p.name != "memory_limit" else Protection(name="memory_limit", status="missing", mechanism="none", detail="no memory controller")
        for p in confinement.protections
    )})
    monkeypatch.setattr(sandbox_core_module(), "machine_confinement", lambda: weakened)
    with pytest.raises(ConfinementError, match="memory_limit"):
        Sandbox.create()
    with Sandbox.create(allow_degraded=True) as box:
        assert box.degraded_ok
        assert box.confinement.get("memory_limit").status == "missing"


def sandbox_core_module():
    import proctor.sandbox.core as module

    return module


def test_output_is_capped_in_memory_however_much_is_printed(sandbox):
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = sandbox.run("head -c 300000000 /dev/zero", output_cap=64 * 1024, timeout=60)
    assert len(res.stdout) == 64 * 1024
    assert res.stdout_dropped == 300_000_000 - 64 * 1024
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 50_000  # KiB


def test_stdin_exit_status_and_signals_are_reported(sandbox):
    assert sandbox.run(["/bin/cat"], input=b"x" * 200_000).stdout == b"x" * 200_000
    assert sandbox.run("exit 7").exit_code == 7
    killed = sandbox.run("kill -TERM $$")
    assert killed.exit_code is None and killed.signal == signal.SIGTERM
    assert sandbox.run("echo err >&2").stderr == b"err\n"


def test_commands_run_in_the_workdir_as_home(sandbox):
    assert sandbox.run("pwd; echo $HOME").text == "/workdir\n/workdir\n"


def test_a_process_that_forks_and_exits_while_the_list_is_read_is_still_seen(make_sandbox, monkeypatch):
    """A double fork's middle process forks and exits while the process list is read: seen dead,
    its child born after the cgroup was read would not be seen at all, and a background rewriter
    would leave the step unflagged (a flaky red-team row in CI). The reads are slowed here so that
    every process of a chain that hops to a new pid each moment dies under the reading; the list
    must still hold a live member of the chain every time."""
    box = make_sandbox()
    (box.workdir / "hop.py").write_text("import os, time\nwhile True:\n    time.sleep(0.001)\n    if os.fork():\n        os._exit(0)\n")
    box.spawn(["/bin/sh", "-c", "cd /workdir && python3 hop.py & sleep 300"])

    def hopping(p) -> bool:
        return p.command.startswith("python3 hop.py") and not p.zombie and p.uid == box.uid

    end = time.monotonic() + 5
    while not any(hopping(p) for p in box.processes()):
        assert time.monotonic() < end, box.processes()
        time.sleep(0.01)
    real = procfs.uids_of

    def slow_uids_of(pid: int):
        time.sleep(0.005)  # a loaded machine: the process read is much slower than the chain's hop
        return real(pid)

    monkeypatch.setattr(procfs, "uids_of", slow_uids_of)
    listings = [box.processes() for _ in range(20)]
    monkeypatch.undo()
    missed = [i for i, found in enumerate(listings) if not any(hopping(p) for p in found)]
    assert missed == [], f"the hopping chain was unseen in {len(missed)} of 20 listings"
    assert box.kill_all().empty


def _host_process_of(uid: int) -> subprocess.Popen:
    proc = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/bin/sleep", "1000"])
    end = time.monotonic() + 5
    while procfs.pids_of_uid(uid) != [proc.pid] and time.monotonic() < end:
        time.sleep(0.005)
    assert procfs.pids_of_uid(uid) == [proc.pid]
    return proc


def _same_uid_next(monkeypatch, uid: int) -> None:
    """Make the next lease_uid start its search at `uid`."""
    from proctor.sandbox import uids

    monkeypatch.setattr(uids.random, "randrange", lambda n: uid - uids.UID_BASE)


def test_a_uid_given_back_unclean_is_cleaned_before_its_next_lease_and_a_fresh_one_is_not_scanned(confinement, monkeypatch):
    from proctor.sandbox import reaper, uids

    first = uids.lease_uid()
    left = _host_process_of(first.uid)  # what a crashed or failed teardown leaves
    try:
        first.release(clean=False)
        assert (STATE_DIR / "uids" / str(first.uid)).exists()  # the mark that the uid is not known clean
        _same_uid_next(monkeypatch, first.uid)
        again = uids.lease_uid()
        assert again.uid == first.uid
        assert left.wait(timeout=5) == -signal.SIGKILL
        again.release()
        assert not (STATE_DIR / "uids" / str(first.uid)).exists()
        # Given back clean, the next lease of it creates the file afresh and reads no process table.
        scans = []
        monkeypatch.setattr(reaper, "kill_uid", lambda uid, deadline_s=5.0: scans.append(uid) or True)
        fresh = uids.lease_uid()
        assert fresh.uid == first.uid and scans == []
        fresh.release()
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()


def test_reclaim_of_a_crashed_sandbox_spares_a_live_sandbox_that_leased_its_uid_since(confinement, monkeypatch):
    from proctor.sandbox import uids

    harness = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True, cwd=REPO)
    sandbox_id, uid = harness.stdout.readline().split()
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    _same_uid_next(monkeypatch, int(uid))
    live = uids.lease_uid()  # the crashed sandbox's file is there: this lease kills what it left
    assert live.uid == int(uid)
    assert procfs.pids_of_uid(live.uid) == []
    mine = _host_process_of(live.uid)  # the live sandbox's own student process
    try:
        assert sandbox_id in reclaim_stale()
        assert mine.poll() is None, "reclaim killed a live sandbox's process"
    finally:
        mine.kill()
        mine.wait()
        live.release()


def test_a_command_after_kill_all_is_killed_at_close(confinement):
    box = Sandbox.create()
    box.run("sleep 1000 &")
    assert box.kill_all().empty
    box.run("setsid sleep 1000 >/dev/null 2>&1 &")
    uid = box.uid
    assert len([p for p in procfs.pids_of_uid(uid) if not procfs.is_zombie(p)]) == 1
    box.close()
    assert [p for p in procfs.pids_of_uid(uid) if not procfs.is_zombie(p)] == []
