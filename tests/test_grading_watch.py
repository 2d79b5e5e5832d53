"""Student code that runs only at grading time is watched like the student's session: what it
leaves behind or the limits it hits in the judge's sandbox become misbehaviour on the verdict.

Every attack is real student code in a real grading sandbox (StudentRunner proves nothing itself:
the `confinement` fixture checks the machine confines before any of it runs)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from proctor.judges import grading_watch
from proctor.judges.base import FunctionJudge, JudgeContext, Verdict, evaluate
from proctor.judges.student_code import StudentRunner
from proctor.sandbox import Sandbox, SandboxLimits, SandboxSpec

STUDENT = '''
import os, subprocess, sys, time, threading

def double_fork():
    """The classic daemon: fork, setsid, fork again, parent exits: reparented, out of the tree."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
        os._exit(0)
    os.wait()
    return 1

def background_shell():
    subprocess.run(["/bin/sh", "-c", "sleep 300 &"], check=True)
    return 1

def fork_bomb():
    kids = []
    for _ in range(200):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    return len(kids)

def hog():
    chunks = []
    while True:
        chunks.append(bytearray(32 * 1024 * 1024))

_POOL = []

def pooled(n):
    """Honest: a worker pool kept in module state across calls (its workers are live children)."""
    import multiprocessing
    if not _POOL:
        _POOL.append(multiprocessing.get_context("fork").Pool(2))
    return sum(_POOL[0].map(abs, range(-n, n)))

def honest(n):
    out = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True).stdout
    threading.Thread(target=time.sleep, args=(0.01,), daemon=True).start()
    return int(out) + n
'''


@pytest.fixture
def submission(tmp_path: Path) -> Path:
    (tmp_path / "student.py").write_text(STUDENT)
    tmp_path.chmod(0o755)
    return tmp_path


def _grade(submission: Path, *calls: tuple[str, tuple]) -> Verdict:
    def grade(ctx: JudgeContext) -> Verdict:
        with StudentRunner(ctx.submission, limits=SandboxLimits(pids=32), call_timeout_s=30) as student:
            for target, args in calls:
                assert student.call(f"student:{target}", *args).ok
        return Verdict(score=1.0)  # a judge that knows nothing of the telemetry

    return evaluate(FunctionJudge(fn=grade, timeout_s=90), JudgeContext(submission=submission))


def _kinds(verdict: Verdict) -> list[str]:
    return [e.kind for e in verdict.misbehaviour]


def test_a_double_forked_daemon_left_by_student_code_is_flagged_on_the_verdict(confinement, submission):
    verdict = _grade(submission, ("double_fork", ()))
    assert _kinds(verdict) == ["processes_left_in_grading"], verdict.misbehaviour
    assert "sleep" in verdict.misbehaviour[0].detail or "python" in verdict.misbehaviour[0].detail


def test_a_process_backgrounded_by_a_shell_is_flagged_as_left_behind(confinement, submission):
    verdict = _grade(submission, ("background_shell", ()), ("honest", (1,)))
    assert "processes_left_in_grading" in _kinds(verdict)
    assert "sleep 300" in verdict.misbehaviour[0].detail


def test_a_fork_bomb_in_grading_is_recorded_as_a_resource_limit_hit(confinement, submission):
    verdict = _grade(submission, ("fork_bomb", ()))
    assert [e for e in verdict.misbehaviour if e.kind == "resource_limit_hit" and "pids" in e.detail], verdict.misbehaviour


def test_an_oom_kill_in_grading_is_recorded_as_a_resource_limit_hit(confinement, submission):
    def grade(ctx: JudgeContext) -> Verdict:
        with StudentRunner(ctx.submission, limits=SandboxLimits(memory_bytes=256 * 1024 * 1024), call_timeout_s=30) as student:
            assert student.call("student:hog").crashed
        return Verdict(score=0.0)

    verdict = evaluate(FunctionJudge(fn=grade, timeout_s=90), JudgeContext(submission=submission))
    assert [e for e in verdict.misbehaviour if e.kind == "resource_limit_hit" and "memory" in e.detail], verdict.misbehaviour


def test_honest_code_with_subprocesses_threads_and_a_kept_pool_is_not_flagged(confinement, submission):
    verdict = _grade(submission, ("honest", (1,)), ("pooled", (50,)), ("pooled", (60,)), ("honest", (2,)))
    assert verdict.score == 1.0
    assert verdict.misbehaviour == []


def test_events_reach_the_verdict_even_when_the_judge_crashes_afterwards(confinement, submission):
    def grade(ctx: JudgeContext) -> Verdict:
        with StudentRunner(ctx.submission, call_timeout_s=30) as student:
            student.call("student:double_fork")
        raise RuntimeError("the judge's own bug")

    verdict = evaluate(FunctionJudge(fn=grade, timeout_s=90), JudgeContext(submission=submission))
    assert verdict.score == 0.0 and "crashed" in verdict.explanation
    assert _kinds(verdict) == ["processes_left_in_grading"]


def _one_shot(script: str) -> list:
    box = Sandbox.create(SandboxSpec(limits=SandboxLimits(pids=32)))
    try:
        (box.workdir / "train.py").write_text(textwrap.dedent(script))
        with grading_watch.collecting() as events:
            done = box.run(["/usr/bin/python3", "/workdir/train.py"], timeout=30)
            grading_watch.observe_run(box, "retraining sandbox", timed_out=done.timed_out)
        assert done.exit_code == 0, done.stderr
        return events
    finally:
        box.close()


def test_a_training_script_that_leaves_a_daemon_is_flagged(confinement):
    events = _one_shot("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(300)
            os._exit(0)
        print("trained")
    """)
    assert [e.kind for e in events] == ["processes_left_in_grading"]
    assert events[0].detail.startswith("retraining sandbox:")


def test_a_training_script_whose_children_finish_is_not_flagged(confinement):
    events = _one_shot("""
        import multiprocessing, subprocess
        with multiprocessing.get_context("fork").Pool(2) as pool:
            assert sum(pool.map(abs, range(-9, 9))) == 81
        subprocess.run(["/bin/true"], check=True)
    """)
    assert events == []


def test_a_zombie_leader_whose_threads_run_on_is_still_a_process_left_behind(confinement):
    # The leader ends only its own thread (pthread_exit): it shows as a zombie while a thread works.
    events = _one_shot("""
        import ctypes, os, threading, time
        if os.fork() == 0:
            threading.Thread(target=time.sleep, args=(300,)).start()
            ctypes.CDLL(None).pthread_exit(None)
        time.sleep(0.2)
    """)
    assert [e.kind for e in events] == ["processes_left_in_grading"], events
