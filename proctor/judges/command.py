"""`CommandJudge`: grade with a Python script the task ships.

The script is trusted task code; what it reads is not. It runs:

- with the harness's own interpreter, by absolute path (`sys.executable`, the harness venv's
  `python`), with `-I` (isolated mode: no `PYTHON*` variables, no user site-packages, the
  script's directory not on `sys.path` ahead of the stdlib). Never `python3` from a `PATH`: the
  student plants a fake `python3` wherever it can;
- in a clean environment holding only the variables below, so nothing of the harness's own
  environment (API keys, `PYTHONPATH`, ...) reaches it;
- in a fresh scratch directory (0700, removed afterwards) as its cwd and `HOME`, with stdin from
  `/dev/null`;
- in its own session; when it finishes, times out or the judge is done, its whole process group
  is killed with SIGKILL (while the script is still an unreaped zombie, so the group id cannot
  have been reused) and it is reaped. A child the script left behind dies with it;
- under `min(timeout_s, time left)`; its stdout and stderr are drained as they come and only the
  first and last `output_limit_bytes // 2` bytes of each are kept, so a script that prints
  gigabytes (e.g. echoing a huge submission) costs no memory.

Environment of the script::

    PATH=/usr/sbin:/usr/bin:/sbin:/bin    LANG=C.UTF-8    HOME=<scratch>
    PROCTOR_SUBMISSION   the custody copy, laid out like /workdir
    PROCTOR_HIDDEN       the task's hidden data directory ("" when none)
    PROCTOR_PARAMS       a JSON file holding the instance's parameters
    PROCTOR_ANSWER_FILE  a UTF-8 file holding the student's final answer ("" when none)
    PROCTOR_SCORE_FILE   where the script writes its verdict

The verdict comes only from the score file, a JSON object::

    {"score": 0.75, "explanation": "3 of 4 cases", "metadata": {"cases": [1, 1, 1, 0]}}

`score` is a number in [0, 1]; `explanation` (a string) and `metadata` (an object) are optional;
no other key is allowed. Never stdout and never the exit status alone: a submission that makes the
script print `{"score": 1}` or exit 0 early gains nothing. Fail closed:

- exit status not 0 (a crash, a signal): 0 with the status and the stderr tail, even if a score
  file exists, because a script that crashed may have left a partial or stale one;
- no score file, a score file that is not a regular file or is over `score_file_limit_bytes`,
  not JSON, `NaN`/`Infinity` (rejected by the parser), a number that overflows to inf, nesting
  deeper than 32 levels, wrong types, unknown keys, a score outside [0, 1]: 0 with the reason;
- past its time: killed, 0 with "did not finish within Ns";
- the script missing at grading time, or the interpreter failing to start: an `infra_error`
  naming it (the task is broken, not the student).

What it does not defend against: the script runs with the harness's rights. It must never import,
exec or unpickle the submission (run student code with `run_student`, in a fresh sandbox); a
grandchild that calls `setsid()` itself escapes the group kill."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from ..pump import pump
from ..sandbox.capture import HeadTail
from .answers import Unreadable, read_submission_file
from .base import Judge, JudgeContext, Verdict

__all__ = ["CommandJudge", "interpreter"]

KiB = 1024
_GRACE_S = 1.0  # reserved for killing, reaping and parsing after the script's own timeout
_MAX_DEPTH = 32
_TAIL_CHARS = 500
_SCORE_KEYS = {"score", "explanation", "metadata"}
_SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def interpreter() -> str:
    """The harness's own Python, by absolute path.

    Deliberately not `realpath`: the harness venv's `bin/python` is a symlink to the base
    interpreter, and resolving it would drop the venv's site-packages (numpy, proctor) that
    grading scripts import. The symlink lives in the harness's environment, which no sandbox
    mounts, so the student cannot swap it."""
    if not sys.executable:
        raise OSError("sys.executable is empty: the harness's interpreter is unknown")
    return os.path.abspath(sys.executable)


@dataclass
class _Run:
    returncode: int | None
    timed_out: bool
    wall_s: float
    stdout: HeadTail
    stderr: HeadTail


def _run(argv: list[str], env: dict[str, str], cwd: str, budget: float, limit: int) -> _Run:
    start = time.monotonic()
    deadline = start + budget
    half = max(1, limit // 2)
    out, err = HeadTail(half, half), HeadTail(half, half)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    try:
        # A grandchild may hold the pipes open after the script exits: drain 0.2 s more, then stop.
        timed_out = pump(proc, out.write, err.write, deadline=deadline, grace_s=0.2)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # SIGKILLed yet alive: stuck in the kernel; leave it
            pass
    return _Run(None if timed_out else proc.returncode, timed_out, time.monotonic() - start, out, err)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (a finite number is required)")


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, iteratively (a deep value must not blow the stack here)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > _MAX_DEPTH:
            break
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def _has_nonfinite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_score_file(raw: bytes) -> dict[str, Any] | str:
    """The score file's content as {"score", "explanation", "metadata"}, or the reason it is refused."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "the score file is not UTF-8"
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        return "the score file is nested too deeply"
    except ValueError as exc:
        return f"the score file is not valid JSON ({exc})"
    if not isinstance(data, dict):
        return f"the score file holds a JSON {type(data).__name__}, not an object like {{\"score\": 1.0}}"
    if _depth(data) > _MAX_DEPTH:
        return f"the score file is nested deeper than {_MAX_DEPTH} levels"
    unknown = sorted(set(data) - _SCORE_KEYS)
    if unknown:
        return f"the score file has unknown keys {unknown[:5]} (allowed: score, explanation, metadata)"
    score = data.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return f"the score file's \"score\" must be a number, got {type(score).__name__}"
    if not math.isfinite(score):
        return "the score file's \"score\" is not finite"
    if not 0 <= score <= 1:
        return f"the score file's \"score\" {score!r} is outside [0, 1]"
    explanation = data.get("explanation", "")
    if not isinstance(explanation, str):
        return "the score file's \"explanation\" must be a string"
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        return "the score file's \"metadata\" must be an object"
    if _has_nonfinite(metadata):
        return "the score file's \"metadata\" holds a number that is not finite"
    return {"score": float(score), "explanation": explanation, "metadata": metadata}


def _text(capture: HeadTail) -> str:
    head, tail = capture.parts()
    middle = f"\n[... {capture.dropped} bytes dropped ...]\n".encode() if capture.dropped else b""
    return (head + middle + tail).decode("utf-8", "replace")


def _tail(capture: HeadTail) -> str:
    text = _text(capture).strip()
    text = text[-_TAIL_CHARS:] if len(text) > _TAIL_CHARS else text
    return text or "(no stderr)"


class CommandJudge(Judge):
    """Run a grading script (see the module docstring for its environment and the score file)."""

    script: str = Field(description="The grading script: absolute, or relative to the environment's directory.")
    args: tuple[str, ...] = Field((), description="Extra command-line arguments for the script.")
    timeout_s: float = Field(60.0, gt=0, le=24 * 3600, description="The script's wall-time bound; past it the script is killed and the step scores 0.")
    output_limit_bytes: int = Field(64 * KiB, gt=0, le=64 * 1024 * KiB, description="Bytes of stdout and of stderr kept (head and tail); the rest is drained and dropped.")
    score_file_limit_bytes: int = Field(64 * KiB, gt=0, le=64 * 1024 * KiB, description="Largest score file accepted.")

    @field_validator("script")
    @classmethod
    def _nonempty(cls, value: str) -> str:
        if not value.strip() or "\x00" in value:
            raise ValueError("must name a grading script, e.g. 'grade.py' (relative to the environment's directory)")
        return value

    @field_validator("args")
    @classmethod
    def _no_nul(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any("\x00" in a for a in value):
            raise ValueError("arguments cannot contain NUL bytes")
        return value

    def bound_s(self) -> float:
        return self.timeout_s + _GRACE_S

    def describe(self) -> str:
        return f"CommandJudge({Path(self.script).name})"

    def missing_files(self, hidden: Path | None, env_dir: Path | None) -> list[str]:
        found = self._find_script(env_dir)
        return [found.removeprefix("task error: ")] if isinstance(found, str) else []

    def _script_path(self, ctx: JudgeContext) -> Path | str:
        return self._find_script(ctx.env_dir)

    def _find_script(self, env_dir: Path | None) -> Path | str:
        script = Path(self.script)
        if not script.is_absolute():
            if env_dir is None:
                return f"task error: grading script {self.script!r} is relative but the task has no environment directory"
            script = Path(env_dir) / script
        script = script.resolve()
        if not script.is_file():
            return f"task error: grading script {script} does not exist (or is not a file)"
        return script

    def grade(self, ctx: JudgeContext) -> Verdict:
        script = self._script_path(ctx)
        if isinstance(script, str):
            return Verdict.zero(script, infra_error=True)
        budget = min(self.timeout_s, ctx.time_left() - _GRACE_S)
        if budget <= 0:
            return Verdict.zero("no time left to run the grading script")
        scratch = tempfile.mkdtemp(prefix="proctor-judge-")  # mode 0700
        try:
            return self._grade_in(ctx, script, Path(scratch), budget)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _grade_in(self, ctx: JudgeContext, script: Path, scratch: Path, budget: float) -> Verdict:
        params, answer, score = scratch / "params.json", scratch / "answer.txt", scratch / "score.json"
        try:
            params.write_text(json.dumps(ctx.params, allow_nan=False, default=str), encoding="utf-8")
        except (TypeError, ValueError) as exc:
            return Verdict.zero(f"task error: the instance parameters are not JSON ({exc})", infra_error=True)
        answer.write_text(ctx.answer or "", encoding="utf-8", errors="replace")
        env = {
            "PATH": _SAFE_PATH,
            "LANG": "C.UTF-8",
            "HOME": str(scratch),
            # Absolute: the script's cwd is the scratch directory, not the harness's.
            "PROCTOR_SUBMISSION": os.path.abspath(ctx.submission),
            "PROCTOR_HIDDEN": os.path.abspath(ctx.hidden) if ctx.hidden else "",
            "PROCTOR_SCORE_FILE": str(score),
            "PROCTOR_PARAMS": str(params),
            "PROCTOR_ANSWER_FILE": str(answer),
        }
        try:
            argv = [interpreter(), "-I", str(script), *self.args]
            run = _run(argv, env, str(scratch), budget, self.output_limit_bytes)
        except OSError as exc:
            return Verdict.zero(f"task error: cannot start the grading script {script}: {exc}", infra_error=True)
        info = {"exit_code": run.returncode, "wall_s": round(run.wall_s, 3), "stdout_bytes": run.stdout.total, "stderr_bytes": run.stderr.total}
        name = script.name
        if run.timed_out:
            return Verdict.zero(f"grading script {name} did not finish within {budget:.3g}s (killed): {_tail(run.stderr)}", metadata={"command": info})
        if run.returncode != 0:
            how = f"was killed by signal {-run.returncode}" if run.returncode and run.returncode < 0 else f"exited with {run.returncode}"
            return Verdict.zero(f"grading script {name} {how}: {_tail(run.stderr)}", metadata={"command": info})
        try:
            raw = read_submission_file(scratch, score.name, self.score_file_limit_bytes)
        except Unreadable as exc:
            if exc.missing:
                return Verdict.zero(f"grading script {name} exited 0 but wrote no score file ($PROCTOR_SCORE_FILE): {_tail(run.stderr)}", metadata={"command": info})
            return Verdict.zero(f"grading script {name}: {exc}", metadata={"command": info})
        parsed = parse_score_file(raw)
        if isinstance(parsed, str):
            return Verdict.zero(f"grading script {name}: {parsed}", metadata={"command": info})
        return Verdict(score=parsed["score"], explanation=parsed["explanation"] or f"grading script {name}: {parsed['score']:g}",
                       metadata={**parsed["metadata"], "command": info})
