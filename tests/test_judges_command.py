"""CommandJudge: the verdict comes only from the score file, and the script is bounded in time,
output and environment, with nothing it started left alive."""

from __future__ import annotations

import os
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest
from pydantic import ValidationError

from proctor.judges.base import JudgeContext, evaluate
from proctor.judges.command import CommandJudge, parse_score_file


@pytest.fixture
def env_dir(tmp_path) -> Path:
    path = tmp_path / "env"
    path.mkdir()
    return path


@pytest.fixture
def submission(tmp_path) -> Path:
    path = tmp_path / "submission"
    path.mkdir()
    (path / "answer.txt").write_text("42\n")
    return path


def script(env_dir: Path, body: str, name: str = "grade.py") -> str:
    (env_dir / name).write_text("import json, os, sys\n" + textwrap.dedent(body))
    return name


def run(env_dir, submission, body, answer=None, params=None, **judge_fields):
    judge = CommandJudge(script=script(env_dir, body), **judge_fields)
    ctx = JudgeContext(submission=submission, env_dir=env_dir, answer=answer, params=params or {}, hidden=env_dir / "hidden")
    return evaluate(judge, ctx)


WRITE_ONE = 'json.dump({"score": 1.0, "explanation": "all good", "metadata": {"cases": 4}}, open(os.environ["PROCTOR_SCORE_FILE"], "w"))\n'


def gone(pid: int, within_s: float = 3.0) -> bool:
    """Whether pid is dead (absent, or a zombie waiting for its new parent to reap it)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_a_script_that_writes_a_score_file_gives_that_verdict(env_dir, submission):
    verdict = run(env_dir, submission, WRITE_ONE)
    assert verdict.score == 1.0 and verdict.explanation == "all good"
    assert verdict.metadata["cases"] == 4 and verdict.metadata["command"]["exit_code"] == 0


def test_the_script_sees_the_submission_the_answer_and_the_params(env_dir, submission):
    verdict = run(env_dir, submission, """
        sub = open(os.path.join(os.environ["PROCTOR_SUBMISSION"], "answer.txt")).read().strip()
        answer = open(os.environ["PROCTOR_ANSWER_FILE"]).read()
        params = json.load(open(os.environ["PROCTOR_PARAMS"]))
        ok = sub == "42" and answer == "forty-two" and params == {"seed": 7}
        json.dump({"score": 1.0 if ok else 0.0, "explanation": repr((sub, answer, params))}, open(os.environ["PROCTOR_SCORE_FILE"], "w"))
    """, answer="forty-two", params={"seed": 7})
    assert verdict.score == 1.0, verdict.explanation


def test_a_crashing_script_scores_zero_with_its_stderr(env_dir, submission):
    verdict = run(env_dir, submission, "raise RuntimeError('cannot parse the submission')\n")
    assert verdict.score == 0.0
    assert "exited with 1" in verdict.explanation and "cannot parse the submission" in verdict.explanation


def test_a_script_that_crashes_after_writing_a_score_file_still_scores_zero(env_dir, submission):
    verdict = run(env_dir, submission, WRITE_ONE + "sys.exit(3)\n")
    assert verdict.score == 0.0 and "exited with 3" in verdict.explanation


def test_a_script_killed_by_a_signal_scores_zero_naming_the_signal(env_dir, submission):
    verdict = run(env_dir, submission, WRITE_ONE + "import signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    assert verdict.score == 0.0 and "killed by signal 9" in verdict.explanation


def test_a_hanging_grading_script_scores_zero_within_its_bound(env_dir, submission):
    start = time.monotonic()
    verdict = run(env_dir, submission, "import time\nprint('working', file=sys.stderr, flush=True)\ntime.sleep(600)\n", timeout_s=2)
    elapsed = time.monotonic() - start
    assert verdict.score == 0.0 and "did not finish within 2s" in verdict.explanation and "working" in verdict.explanation
    assert elapsed < 2 + 2


def test_the_script_timeout_is_cut_to_the_time_the_step_has_left(env_dir, submission):
    judge = CommandJudge(script=script(env_dir, "import time\ntime.sleep(600)\n"), timeout_s=60)
    ctx = JudgeContext(submission=submission, env_dir=env_dir, deadline=time.monotonic() + 3)
    start = time.monotonic()
    verdict = evaluate(judge, ctx)
    assert verdict.score == 0.0 and time.monotonic() - start < 4


def test_a_child_process_left_by_a_hanging_script_is_killed(env_dir, submission, tmp_path):
    pidfile = tmp_path / "child.pid"
    verdict = run(env_dir, submission, f"""
        import subprocess, time
        child = subprocess.Popen(["/bin/sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """, timeout_s=2)
    assert verdict.score == 0.0
    assert gone(int(pidfile.read_text()))


def test_a_child_left_holding_the_pipes_neither_delays_the_verdict_nor_survives(env_dir, submission, tmp_path):
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    verdict = run(env_dir, submission, textwrap.dedent(f"""
        import subprocess
        child = subprocess.Popen(["/bin/sleep", "600"])  # inherits stdout and stderr
        open({str(pidfile)!r}, "w").write(str(child.pid))
    """) + WRITE_ONE, timeout_s=30)
    assert verdict.score == 1.0
    assert time.monotonic() - start < 5
    assert gone(int(pidfile.read_text()))


def test_printing_a_score_or_exiting_zero_without_a_score_file_scores_zero(env_dir, submission):
    verdict = run(env_dir, submission, 'print(json.dumps({"score": 1.0}))\nprint("oops", file=sys.stderr)\n')
    assert verdict.score == 0.0
    assert "wrote no score file" in verdict.explanation and "oops" in verdict.explanation


def test_oversized_output_keeps_memory_bounded_and_still_scores_from_the_score_file(env_dir, submission):
    body = textwrap.dedent("""
        chunk = b"x" * (1024 * 1024)
        for _ in range(50):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        for _ in range(5):
            sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
    """) + WRITE_ONE
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        verdict = run(env_dir, submission, body, output_limit_bytes=64 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert verdict.score == 1.0, verdict.explanation
    assert verdict.metadata["command"]["stdout_bytes"] == 50 * 1024 * 1024
    assert verdict.metadata["command"]["stderr_bytes"] == 5 * 1024 * 1024
    assert peak < 8 * 1024 * 1024, f"peak traced memory {peak} bytes"


def test_the_stderr_tail_in_the_explanation_is_bounded(env_dir, submission):
    verdict = run(env_dir, submission, "sys.stderr.write('e' * 1_000_000)\nsys.exit(1)\n")
    assert verdict.score == 0.0 and len(verdict.explanation) < 1000


def test_an_oversized_score_file_scores_zero(env_dir, submission):
    verdict = run(env_dir, submission, 'open(os.environ["PROCTOR_SCORE_FILE"], "w").write(json.dumps({"score": 1, "explanation": "x" * 100_000}))\n')
    assert verdict.score == 0.0 and "above the cap of 65536 bytes" in verdict.explanation


def test_a_score_file_that_is_a_symlink_is_not_followed(env_dir, submission, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text('{"score": 1}')
    verdict = run(env_dir, submission, f'os.symlink({str(target)!r}, os.environ["PROCTOR_SCORE_FILE"])\n')
    assert verdict.score == 0.0 and "symlink" in verdict.explanation


@pytest.mark.parametrize(("content", "reason"), [
    ("not json at all", "not valid JSON"),
    ("", "not valid JSON"),
    ('{"score": NaN}', "NaN is not allowed"),
    ('{"score": Infinity}', "Infinity is not allowed"),
    ('{"score": 1e400}', "not finite"),
    ('{"score": 1.5}', "outside [0, 1]"),
    ('{"score": -0.1}', "outside [0, 1]"),
    ('{"score": true}', "must be a number"),
    ('{"score": "1"}', "must be a number"),
    ('{"explanation": "no score"}', "must be a number"),
    ('[1.0]', "not an object"),
    ('{"score": 1, "bonus": 1}', "unknown keys"),
    ('{"score": 1, "explanation": 5}', "\"explanation\" must be a string"),
    ('{"score": 1, "metadata": [1]}', "\"metadata\" must be an object"),
    ('{"score": 1, "metadata": {"x": -Infinity}}', "Infinity is not allowed"),
    ('{"score": 1, "metadata": {"x": 1e999}}', "not finite"),
    ('{"score": 1, "metadata": ' + "[" * 100 + "]" * 100 + "}", "nested deeper than 32"),
    ('{"score": 1, "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
])
def test_a_malformed_score_file_scores_zero_with_the_reason(content, reason):
    parsed = parse_score_file(content.encode())
    assert isinstance(parsed, str) and reason in parsed


@pytest.mark.parametrize("content", ['{"score": NaN}', "garbage", '{"score": 2}', b"\xff\xfe"])
def test_a_garbage_score_file_written_by_the_script_scores_zero(env_dir, submission, content):
    (env_dir / "content.bin").write_bytes(content if isinstance(content, bytes) else content.encode())
    verdict = run(env_dir, submission, f'open(os.environ["PROCTOR_SCORE_FILE"], "wb").write(open({str(env_dir / "content.bin")!r}, "rb").read())\n')
    assert verdict.score == 0.0 and not verdict.infra_error and "score file" in verdict.explanation


def test_the_script_runs_with_the_harness_interpreter_and_a_clean_environment(env_dir, submission, tmp_path, monkeypatch):
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "fake-python-ran"
    for name in ("python", "python3", f"python3.{sys.version_info.minor}"):
        fake = planted / name
        fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted}:{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FOO", "from-the-parent")
    monkeypatch.setenv("PYTHONPATH", str(planted))
    verdict = run(env_dir, submission, """
        meta = {"env": dict(os.environ), "executable": sys.executable, "isolated": sys.flags.isolated,
                "cwd": os.getcwd(), "stdin": sys.stdin.read()}
        json.dump({"score": 1.0, "metadata": meta}, open(os.environ["PROCTOR_SCORE_FILE"], "w"))
    """)
    assert verdict.score == 1.0, verdict.explanation
    meta = verdict.metadata
    assert not marker.exists()
    assert meta["executable"] == os.path.abspath(sys.executable)
    assert meta["isolated"] == 1
    env = meta["env"]
    assert "FOO" not in env and "PYTHONPATH" not in env
    assert set(env) - {"LC_CTYPE"} == {"PATH", "LANG", "HOME", "PROCTOR_SUBMISSION", "PROCTOR_HIDDEN", "PROCTOR_SCORE_FILE", "PROCTOR_PARAMS", "PROCTOR_ANSWER_FILE"}
    assert env["PATH"] == "/usr/sbin:/usr/bin:/sbin:/bin"
    assert env["HOME"] == meta["cwd"] and env["PROCTOR_SUBMISSION"] == str(submission)
    assert meta["stdin"] == ""
    assert not Path(meta["cwd"]).exists(), "the scratch directory must be removed afterwards"


def test_the_scratch_directory_is_private(env_dir, submission):
    verdict = run(env_dir, submission, """
        mode = os.stat(os.getcwd()).st_mode & 0o777
        json.dump({"score": 1.0, "metadata": {"mode": mode}}, open(os.environ["PROCTOR_SCORE_FILE"], "w"))
    """)
    assert verdict.metadata["mode"] == 0o700


def test_a_missing_script_is_an_infra_error_naming_it(env_dir, submission):
    verdict = evaluate(CommandJudge(script="nope.py"), JudgeContext(submission=submission, env_dir=env_dir))
    assert verdict.infra_error and verdict.score == 0.0 and "nope.py" in verdict.explanation


def test_a_relative_script_without_an_environment_directory_is_an_infra_error(submission):
    verdict = evaluate(CommandJudge(script="grade.py"), JudgeContext(submission=submission))
    assert verdict.infra_error and "grade.py" in verdict.explanation


def test_an_absolute_script_path_needs_no_environment_directory(env_dir, submission):
    path = env_dir / script(env_dir, WRITE_ONE)
    assert evaluate(CommandJudge(script=str(path)), JudgeContext(submission=submission)).score == 1.0


def test_script_arguments_are_passed(env_dir, submission):
    verdict = run(env_dir, submission, 'json.dump({"score": 1.0 if sys.argv[1:] == ["--strict", "x y"] else 0.0}, open(os.environ["PROCTOR_SCORE_FILE"], "w"))\n', args=("--strict", "x y"))
    assert verdict.score == 1.0


@pytest.mark.parametrize("bad", ["", "   ", "a\x00b"])
def test_an_empty_script_name_is_refused_when_the_task_is_built(bad):
    with pytest.raises(ValidationError, match="script"):
        CommandJudge(script=bad)
