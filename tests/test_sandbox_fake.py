"""The fake backend: honest about confining nothing, unreachable by accident, and faithful enough
to the sandbox's paths and process bookkeeping for the layers above to be tested on it. No root."""

from __future__ import annotations

import os
import time

import pytest
from pydantic import ValidationError

from proctor.harness import RolloutConfig
from proctor.sandbox.fake_paths import inward, outward

PLACES = {"/workdir": "/h/box/workdir", "/tmp": "/h/box/tmp", "/data": "/srv/data"}


def test_sandbox_paths_are_rewritten_only_as_whole_leading_components():
    into = inward(PLACES)
    assert into.all(b"cat /workdir/a.txt /tmp >/workdir/b 'x=/data/f'") == b"cat /h/box/workdir/a.txt /h/box/tmp >/h/box/workdir/b 'x=/srv/data/f'"
    for untouched in (b"/x/workdir/a", b"/workdirs", b"/tmpfile", b"a/tmp", b"/database"):
        assert into.all(untouched) == untouched
    assert outward(PLACES).all(b"/h/box/workdir/a.txt: No such file") == b"/workdir/a.txt: No such file"


def test_a_path_split_across_two_reads_is_still_rewritten_and_a_finished_line_is_never_held():
    into = inward(PLACES)
    assert into.feed(b"echo 1 > /wor") == b"echo 1 > "
    assert into.feed(b"kdir/x\n") == b"/h/box/workdir/x\n"
    assert into.feed(b"0123456789abcdef00000000000000000 0 ok\n") == b"0123456789abcdef00000000000000000 0 ok\n"
    assert into.feed(b"ls /") == b"ls " and into.flush() == b"/"


def test_the_fake_cannot_be_named_by_a_rollout_config_or_a_server_request():
    with pytest.raises(ValidationError):
        RolloutConfig(runtime="fake")  # type: ignore[arg-type]
    assert RolloutConfig().runtime == "bwrap"


def test_kill_all_on_the_fake_finds_a_setsid_daemon_and_the_files_stay(fake_backend):
    with fake_backend.create() as box:
        box.run("echo 41 > /workdir/answer.txt; setsid sh -c 'sleep 300' >/dev/null 2>&1 &")
        end = time.monotonic() + 5
        while not any(p.command == "sleep 300" for p in box.processes()):
            assert time.monotonic() < end
            time.sleep(0.01)
        report = box.kill_all()
        assert report.empty and report.killed >= 1
        assert [p for p in box.processes() if not p.zombie] == []
        assert box.run("cat /workdir/answer.txt").text == "41\n"


def test_the_fake_finds_its_processes_under_a_harness_with_a_thousand_other_children(fake_backend):
    # /proc/PID/task/TID/children gives one page per read: a long-lived harness with many
    # children once hid the newest (this sandbox's) from a single read, and a timed-out command
    # was then waited for forever.
    others = []
    for _ in range(1500):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        others.append(pid)
    try:
        with fake_backend.create() as box:
            res = box.run("sleep 300 & echo started; sleep 300", timeout=0.5)
            assert res.timed_out and res.text == "started\n"
            box.run("setsid sh -c 'sleep 300' >/dev/null 2>&1 &")
            end = time.monotonic() + 5
            while not any(p.command == "sleep 300" for p in box.processes()):
                assert time.monotonic() < end
                time.sleep(0.01)
            assert box.kill_all().empty
    finally:
        for pid in others:
            os.waitpid(pid, 0)


def test_a_timeout_on_the_fake_kills_the_command_and_what_it_started(fake_backend):
    with fake_backend.create() as box:
        res = box.run("sleep 300 & echo started; sleep 300", timeout=0.5)
        assert res.timed_out and res.text == "started\n"
        assert [p for p in box.processes() if not p.zombie] == []


def test_honest_scratch_files_and_the_shells_cwd_work_as_in_the_sandbox(fake_backend):
    with fake_backend.create() as box:
        res = box.run("cd /tmp && mkdir -p work && cd work && pwd && touch notes.md && ls /tmp/work && echo $HOME")
        assert res.text == "/tmp/work\nnotes.md\n/workdir\n", res


def test_a_listed_process_always_has_a_readable_command_even_mid_exec_or_as_a_zombie(fake_backend):
    # A process caught inside execve reads an empty /proc/PID/cmdline for an instant; the
    # grading watch then named a left-behind `sleep 300` as "?" (a flaky detail). A live process
    # is read again until its new arguments are there; a zombie shows its name, as ps does.
    with fake_backend.create() as box:
        box.run("python3 -c 'import os, time\nif os.fork() == 0: os._exit(0)\ntime.sleep(300)' >/dev/null 2>&1 &"
                "\nfor i in $(seq 200); do sh -c 'exec sleep 300' & done")
        end = time.monotonic() + 10
        while True:
            seen = box.processes()
            assert all(p.command for p in seen), [p for p in seen if not p.command]
            if any(p.zombie for p in seen) and sum(p.command == "sleep 300" for p in seen) == 200:
                break
            assert time.monotonic() < end, seen
        assert [p.command for p in seen if p.zombie] == ["[python3]"]
        assert box.kill_all().empty
