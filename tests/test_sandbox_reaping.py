"""kill_all leaves zero student processes, proven by the cgroup, the PID namespace and the uid."""

from __future__ import annotations

import time

import pytest

from proctor.sandbox import procfs
from proctor.sandbox.reaper import reap_until_empty
from conftest import BOTH_RUNTIMES, student_processes  # noqa: E402

pytestmark = BOTH_RUNTIMES

PY = "/usr/bin/python3"

ATTACKS = {
    "fork_and_die_chain": [PY, "-c", "import os\nwhile True:\n    if os.fork(): os._exit(0)\n"],
    "double_forked_setsid_daemons": ["/bin/sh", "-c", "for i in 1 2 3 4 5; do setsid sh -c 'sleep 1000 & sleep 1000' & done; sleep 1000"],
    "stopped_processes": ["/bin/sh", "-c", "for i in 1 2 3; do sleep 1000 & kill -STOP $!; done; kill -STOP $$"],
    "mutual_sigcont_ring": [PY, "-c", (
        "import os, signal, time\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)\n"
        "r, w = os.pipe(); pids = []\n"
        "for i in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.read(r, 1)\n"
        "        peers = [int(x) for x in open('/tmp/ring').read().split()]\n"
        "        while True:\n"
        "            for p in peers:\n"
        "                try: os.kill(p, signal.SIGCONT)\n"
        "                except OSError: pass\n"
        "    pids.append(pid)\n"
        "open('/tmp/ring', 'w').write(' '.join(map(str, pids)))\n"
        "os.write(w, b'xxxx'); time.sleep(1000)\n"
    )],
    "fork_storm_at_the_pids_limit": ["/bin/bash", "-c", "f() { while :; do f & done; }; f"],
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_every_reaping_case_ends_with_zero_processes(make_sandbox, attack, runtime):
    box = make_sandbox(pids=128)
    box.spawn(ATTACKS[attack])
    time.sleep(0.5)
    # bwrap lists bwrap and the anchor besides the attack (a fork-and-die chain is caught in
    # its cgroup even between a parent's exit and its child's start); gVisor lists the student's.
    assert len(box.processes()) > (2 if runtime == "bwrap" else 0), "the attack did not start"
    report = box.kill_all(deadline_s=10)
    assert report.empty, report
    assert report.duration_s < 10
    assert box.processes() == []
    assert [p for p in procfs.pids_of_uid(box.uid) if not procfs.is_zombie(p)] == []
    if runtime == "gvisor":  # and no host process carries the container any more
        assert box.host_pids() == []
    # The sandbox is usable again and the workdir survived.
    assert box.run("echo again").text == "again\n"


def test_a_timeout_kills_the_whole_tree_the_command_started(sandbox):
    res = sandbox.run("sleep 1000 & setsid sleep 1000 & (sleep 1000 &); echo started; sleep 1000", timeout=1)
    assert res.timed_out and "started" in res.text
    # The student's processes as each runtime numbers them (gVisor's are not host processes,
    # so it is asked itself), and no host process of the student's uid either way.
    assert student_processes(sandbox) == []
    assert [p for p in procfs.pids_of_uid(sandbox.uid) if not procfs.is_zombie(p)] == []


def test_a_command_that_finishes_keeps_its_background_jobs_until_kill_all(sandbox):
    sandbox.run("setsid sleep 1000 >/dev/null 2>&1 &")
    assert len(student_processes(sandbox)) == 1
    assert sandbox.kill_all().empty
    assert student_processes(sandbox) == []
    assert procfs.pids_of_uid(sandbox.uid) == []


def test_files_survive_kill_all_but_processes_do_not(sandbox):
    sandbox.run("echo 41 > /workdir/answer.txt; echo tmp > /tmp/t; sleep 1000 &")
    assert sandbox.kill_all().empty
    assert sandbox.run("cat /workdir/answer.txt /tmp/t").text == "41\ntmp\n"


def test_kill_all_says_so_when_it_cannot_prove_the_sandbox_empty():
    never_gone = [2**22 + 12345]  # a pid a witness keeps reporting
    report = reap_until_empty(
        freeze=lambda: None, thaw=lambda: None, cgroup_pids=lambda: never_gone, uid=2**31 - 7,
        pidns=None, reap_children=lambda: None, deadline_s=0.3,
    )
    assert not report.empty
    assert report.remaining == tuple(never_gone)
    assert "still alive" in report.detail


def test_a_kill_that_outlasts_the_deadline_still_asks_the_witnesses_before_calling_the_sandbox_unreapable():
    # On a loaded machine freezing and killing can take the whole deadline; the sandbox is empty
    # all the same, and reporting it unreapable would flag an honest student.
    report = reap_until_empty(
        freeze=lambda: time.sleep(0.4), thaw=lambda: None, cgroup_pids=lambda: [], uid=2**31 - 7,
        pidns=None, reap_children=lambda: None, deadline_s=0.3,
    )
    assert report.empty, report.detail


def test_a_process_outside_the_cgroup_is_found_by_the_uid_scan_and_killed(confinement):
    # The first round kills the cgroup's members only; the process table, read as the witness,
    # finds a process of the student's uid that is not in the cgroup, and the next round kills it.
    import subprocess

    uid = 2**31 - 11
    outside = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/bin/sleep", "1000"])
    try:
        end = time.monotonic() + 5
        while procfs.pids_of_uid(uid) != [outside.pid] and time.monotonic() < end:
            time.sleep(0.005)
        assert procfs.pids_of_uid(uid) == [outside.pid]
        report = reap_until_empty(
            freeze=lambda: None, thaw=lambda: None, cgroup_pids=lambda: [], uid=uid, pidns=None,
            reap_children=lambda: outside.poll(), deadline_s=5,
        )
        assert report.empty, report
        assert report.rounds == 2 and report.killed == 1
        assert outside.wait(timeout=5) == -9
    finally:
        if outside.poll() is None:
            outside.kill()
            outside.wait()


def test_an_empty_sandbox_is_proven_empty_with_one_read_of_the_process_table(sandbox, runtime, monkeypatch):
    sandbox.run("sleep 1000 & setsid sleep 1000 & true")
    assert len(student_processes(sandbox)) == 2
    reads = []
    scan = procfs.pids_of_uid_or_pidns
    monkeypatch.setattr(procfs, "pids_of_uid_or_pidns", lambda *a: reads.append(a) or scan(*a))
    report = sandbox.kill_all()
    assert len(reads) == 1, reads
    assert report.empty, report
    assert student_processes(sandbox) == []


_ZOMBIES_AFTER_CLOSE = r"""
import os, sys, time
from proctor.sandbox import get_backend, procfs

def zombies():
    me = os.getpid()
    kids = [int(k) for t in os.listdir(f"/proc/{me}/task") for k in open(f"/proc/{me}/task/{t}/children").read().split()]
    return [open(f"/proc/{k}/stat").read()[:40] for k in kids if procfs.is_zombie(k)]

backend = get_backend(sys.argv[1])
for _ in range(3):
    with backend.create() as box:
        box.run("sleep 100 & true")
end = time.monotonic() + 5
while zombies() and time.monotonic() < end:
    time.sleep(0.05)
print(zombies())
"""


def test_a_closed_sandbox_leaves_no_zombie_in_the_harness(request, runtime):
    # The harness is a subreaper: what bubblewrap or runsc leave behind when killed is reparented
    # to it, and a corpse it never reaps stays for the life of the harness (a trainer's lifetime:
    # one per rollout once was). A harness of its own, so what other tests leave is not counted.
    import subprocess
    import sys
    from pathlib import Path

    request.getfixturevalue("gvisor_confinement" if runtime == "gvisor" else "confinement")  # root, and the runtime proven
    done = subprocess.run([sys.executable, "-c", _ZOMBIES_AFTER_CLOSE, runtime], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_a_root_corpse_reparented_to_the_harness_is_reaped_so_the_namespace_can_end(confinement):
    """What a command killed half-way through its start leaves (nsenter's child in the sandbox's
    PID namespace, still root, orphaned to the harness): a corpse only the harness can reap, and
    until it does the namespace's init cannot finish exiting. Built here from a real PID
    namespace, nsenter and SIGKILL, exactly as the sandbox's session is entered."""
    import os
    import signal
    import subprocess

    from proctor.sandbox.host import binaries
    from proctor.sandbox.reaper import become_subreaper, reap_own_in_pidns

    become_subreaper()
    outer = subprocess.Popen(["unshare", "--pid", "--fork", "/bin/sleep", "1000"])
    try:
        end = time.monotonic() + 10
        while not (init := [p for p in procfs.own_children() if procfs.ppid_of(p) == outer.pid] or
                   [p for p in procfs.pids() if procfs.ppid_of(p) == outer.pid]) and time.monotonic() < end:
            time.sleep(0.01)
        init_pid = init[0]
        ns = procfs.pidns_of(init_pid)
        entered = subprocess.Popen([binaries()["nsenter"], "-t", str(init_pid), "-p", "--", "/bin/sleep", "1000"])
        end = time.monotonic() + 10
        while not (child := [p for p in procfs.pids() if procfs.ppid_of(p) == entered.pid]) and time.monotonic() < end:
            time.sleep(0.01)
        child_pid = child[0]
        assert procfs.pidns_of(child_pid) == ns and procfs.uids_of(child_pid)[0] == 0
        entered.kill()  # the start cut short: nsenter gone, its child orphaned to us
        entered.wait()
        end = time.monotonic() + 5
        while procfs.ppid_of(child_pid) != os.getpid() and time.monotonic() < end:
            time.sleep(0.01)
        assert procfs.ppid_of(child_pid) == os.getpid()
        os.kill(child_pid, signal.SIGKILL)
        os.kill(init_pid, signal.SIGKILL)
        end = time.monotonic() + 5
        while not procfs.is_zombie(child_pid) and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.2)
        assert os.path.exists(f"/proc/{init_pid}"), "the init ended without the corpse reaped: the case is not reproduced"
        assert outer.poll() is None
        reap_own_in_pidns(ns)
        assert not os.path.exists(f"/proc/{child_pid}")
        assert outer.wait(timeout=5) is not None  # the init finished exiting, so unshare did
    finally:
        if outer.poll() is None:
            outer.kill()
            outer.wait()
