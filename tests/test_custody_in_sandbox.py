"""Custody against a real student: the attack runs as the student inside its sandbox, then the
harness takes custody exactly as it does at the end of a step."""

from __future__ import annotations

import os
import time

import pytest

from proctor.custody import CustodyLimits, custody_point
from conftest import BOTH_RUNTIMES, student_processes  # noqa: E402

pytestmark = BOTH_RUNTIMES

SECRET = "hidden-answer-31337"


@pytest.fixture
def dest(tmp_path):
    return tmp_path / "custody"


def answer_copy(point, dest):
    path = dest / "answer.txt"
    return path.read_text() if path.exists() else None


@pytest.mark.parametrize("target", ["/etc/passwd", "/dev/zero", "/proc/self/environ", "/etc/shadow", "/data/key"])
def test_a_symlinked_answer_scores_nothing_and_is_flagged(sandbox, dest, target):
    sandbox.run(f"ln -s {target} /workdir/answer.txt")
    point = custody_point(sandbox, ["answer.txt"], dest)
    assert point.report.items[0].status == "refused"
    assert [e.kind for e in point.misbehaviour] == ["submission_symlink"]
    assert answer_copy(point, dest) is None


def test_a_symlinked_parent_directory_is_refused(sandbox, dest):
    sandbox.run("mkdir -p /tmp/real && echo 42 > /tmp/real/answer.txt && ln -s /tmp/real /workdir/out")
    point = custody_point(sandbox, ["out/answer.txt"], dest)
    assert point.report.items[0].misbehaviour == "submission_symlink"


def test_a_fifo_answer_scores_zero_without_hanging(sandbox, dest, runtime):
    assert sandbox.run("mkfifo /workdir/answer.txt && echo made").text == "made\n"
    start = time.monotonic()
    point = custody_point(sandbox, ["answer.txt"], dest)
    assert time.monotonic() - start < 5
    if runtime == "gvisor":
        # gVisor keeps a named pipe in its own kernel: the host's /workdir never holds one, and
        # custody finds no answer (scores nothing, as the special file would).
        assert point.report.items[0].status == "missing"
        return
    assert point.report.items[0].misbehaviour == "submission_special_file"


def test_a_sparse_100_gb_answer_fails_fast(make_sandbox, dest):
    box = make_sandbox(workdir_bytes=200 * 1024**3)  # tmpfs size is a cap, not a reservation
    box.run("truncate -s 100G /workdir/answer.txt")
    start = time.monotonic()
    point = custody_point(box, ["answer.txt"], dest)
    assert time.monotonic() - start < 2
    assert point.report.items[0].misbehaviour == "submission_too_large"


def test_a_hard_link_to_a_file_the_student_does_not_own_is_refused_or_impossible(sandbox, dest):
    # A root-owned file in the workdir, as a task's starter file would be.
    key = sandbox.workdir / "starter.txt"
    key.write_text(SECRET)
    os.chmod(key, 0o644)
    sandbox.run("ln /workdir/starter.txt /workdir/answer.txt 2>/dev/null || cp /workdir/starter.txt /workdir/copy.txt")
    point = custody_point(sandbox, ["answer.txt"], dest)
    item = point.report.items[0]
    # The kernel (protected_hardlinks) usually refuses the link; if it did not, custody must.
    assert item.status == "missing" or item.misbehaviour == "submission_hardlink"


def test_a_setsid_daemon_cannot_rewrite_the_answer_after_the_student_is_done(sandbox, dest, host_processes_of):
    sandbox.run("echo 1 > /workdir/answer.txt; setsid sh -c 'while :; do echo 999 > /workdir/answer.txt; "
                "ln -sf /etc/passwd /workdir/answer.txt; done' >/dev/null 2>&1 &")
    time.sleep(0.2)
    point = custody_point(sandbox, ["answer.txt"], dest)
    assert point.kill.empty and point.kill.killed >= 1
    assert host_processes_of(sandbox.uid) == []
    # Whatever the daemon left is now frozen in time: either a regular answer or a refused link.
    item = point.report.items[0]
    assert item.status == "copied" or item.misbehaviour == "submission_symlink"
    before = (dest / "answer.txt").read_bytes() if item.status == "copied" else None
    time.sleep(0.2)
    if before is not None:
        assert (dest / "answer.txt").read_bytes() == before
        assert (sandbox.workdir / "answer.txt").read_bytes() == before  # nobody is left to change it


# Each member forks and exits at once, so a chain has no fixed pid to kill; it forges the answer
# only once the student's shell is dead, i.e. after the harness's kill has begun. A kill that
# signals a list of pids without freezing the cgroup first misses the member forked meanwhile,
# which then rewrites the answer milliseconds later (a fresh attacker's find). In C, as the
# attacker wrote it: a Python chain forks too slowly to slip between a look and a kill.
_FORK_AND_EXIT_CHAIN = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static int dead(const char *stat) {
    char buf[512];
    int fd = open(stat, O_RDONLY);
    if (fd < 0) return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1;
    buf[n] = 0;
    char *end = strrchr(buf, ')');
    return !end || end[2] == 'Z' || end[2] == 'X';
}
int main(void) {
    char stat[64], mark[64];
    snprintf(stat, sizeof stat, "/proc/%d/stat", (int)getppid());
    snprintf(mark, sizeof mark, "/workdir/started/%d", (int)getpid());
    close(open(mark, O_WRONLY | O_CREAT, 0644));  /* this chain runs: its members churn too fast to count */
    for (;;) {
        if (fork() > 0) _exit(0);
        if (dead(stat)) {
            int fd = open("/workdir/answer.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) { write(fd, "forged\n", 7); close(fd); }
        }
    }
}
"""


def test_a_fork_and_exit_chain_cannot_rewrite_the_answer_once_the_kill_has_begun(sandbox, dest, host_processes_of):
    built = sandbox.run("echo honest > /workdir/answer.txt; mkdir /workdir/started; cat > /tmp/chain.c && "
                        "gcc -O2 -o /tmp/chain /tmp/chain.c && echo built", input=_FORK_AND_EXIT_CHAIN.encode(), timeout=60)
    assert built.text.strip().endswith("built"), built.text
    sandbox.spawn(["/bin/bash", "-c", "for i in $(seq 32); do /tmp/chain & done; sleep 1000"])
    started = sandbox.workdir / "started"
    end = time.monotonic() + 10
    while len(os.listdir(started)) < 32 and time.monotonic() < end:
        time.sleep(0.05)
    assert len(os.listdir(started)) == 32, "the chains did not start"
    time.sleep(0.2)
    point = custody_point(sandbox, ["answer.txt"], dest)
    assert point.kill.empty, point.kill
    assert host_processes_of(sandbox.uid) == []
    assert (dest / "answer.txt").read_text() == "honest\n"
    time.sleep(0.3)  # a member that outlived the kill writes within milliseconds
    assert (sandbox.workdir / "answer.txt").read_text() == "honest\n"


def test_a_racer_swapping_the_answer_for_a_link_never_leaks_the_secret(sandbox, tmp_path):
    """Even with a student process still racing (custody normally runs after kill_all), the copy
    never follows a link: take_custody is run directly against a live racer, many times."""
    from proctor.custody import take_custody

    (sandbox.workdir / "secret").write_text(SECRET)  # root-owned, unreadable to the student? no: 0600 root
    os.chmod(sandbox.workdir / "secret", 0o600)
    racer = sandbox.spawn(["/bin/sh", "-c", "while :; do echo 7 > /workdir/a.tmp; mv -f /workdir/a.tmp /workdir/answer.txt; "
                           "ln -sf /workdir/secret /workdir/answer.txt; done"])
    try:
        for i in range(200):
            report = take_custody(sandbox.workdir, ["answer.txt"], tmp_path / f"d{i}", student_uid=sandbox.uid)
            copied = tmp_path / f"d{i}" / "answer.txt"
            if copied.exists():
                assert SECRET not in copied.read_text()
            assert report.items[0].status in ("copied", "refused", "missing")
    finally:
        racer.kill_tree()


def test_unreapable_processes_mean_nothing_is_graded(sandbox, dest, monkeypatch):
    from proctor.sandbox.models import KillReport

    sandbox.run("echo 42 > /workdir/answer.txt")
    monkeypatch.setattr(sandbox, "kill_all", lambda deadline_s=5.0: KillReport(empty=False, killed=3, rounds=9, duration_s=5.0, remaining=(4242,), detail="1 process(es) still alive after 5.0s"))
    point = custody_point(sandbox, ["answer.txt"], dest)
    assert point.report is None and not point.gradable
    assert [e.kind for e in point.misbehaviour] == ["unreapable_processes"]
    assert not dest.exists()


def test_the_workdir_survives_a_custody_point_but_no_process_does(sandbox, dest, host_processes_of):
    sandbox.run("echo 42 > /workdir/answer.txt; sleep 1000 &")
    point = custody_point(sandbox, ["answer.txt"], dest)
    assert point.gradable and (dest / "answer.txt").read_text() == "42\n"
    assert host_processes_of(sandbox.uid) == []
    assert sandbox.run("cat /workdir/answer.txt; pgrep -c -U $(id -u) sleep || true").text.split() == ["42", "0"]


def test_many_tiny_files_are_refused_at_the_entry_cap(make_sandbox, dest):
    box = make_sandbox(workdir_inodes=200_000, workdir_bytes=1024**3)
    box.run("mkdir /workdir/out && cd /workdir/out && seq 100000 | xargs touch", timeout=120)
    start = time.monotonic()
    point = custody_point(box, ["out"], dest, limits=CustodyLimits(max_entries=10_000))
    assert time.monotonic() - start < 5
    assert point.report.items[0].misbehaviour == "submission_too_many_entries"
