"""Hidden tests against student code, with the tests on the grader's side of the wall.

The usual way to grade code with hidden tests is to copy them next to the submission and run
pytest there. Against an adversarial student that is broken in every direction at once: the
runner, its plugins and the verdict all live in the process the student's code controls. A
planted `conftest.py` rewrites every report to "passed"; `sitecustomize.py` or a `.pth` file
patches the runner before it starts; `sys.exit(0)` or `os._exit(0)` before the first assert makes
the run "succeed"; `pytest.skip()` or a deselecting hook makes failing tests vanish; an object
whose `__eq__` always returns True satisfies every `assert got == expected`.

So `TestSuiteJudge` inverts it. The hidden tests are trusted task code and run HERE, in the
judge's process, never inside the sandbox. Each test is a function taking one argument,
`student`: a `StudentRunner` over a fresh sandbox holding the custody copy (one sandbox for the
whole suite), through which alone it reaches the student's code::

    def test_add(student):
        assert student.module("solution").add(2, 3) == 5

Only JSON crosses back from the student, and every consequence follows from that:
- a `conftest.py`, `sitecustomize.py`, `usercustomize.py` or `.pth` in the submission is never
  loaded by anything that decides the verdict (the student-side server starts with `python -I`
  and appends /workdir to the end of sys.path only after its own imports);
- `sys.exit(0)` / `os._exit(0)` in student code just kills the student's server, so the call
  raises StudentCallError and the test fails;
- an always-equal object cannot be serialised, so the call fails;
- the student cannot skip, deselect or uncollect a test: collection happens here, and any
  exception a test raises (AssertionError, pytest's Skipped, unittest.SkipTest, SystemExit,
  any BaseException) is a failure;
- the runner cannot be patched, because it is not in the student's process.

Collection is exact: with `expected`, the collected test names must equal it (a missing or extra
test scores 0, naming them), and zero collected tests always score 0. Test files are loaded with
importlib from their path under a unique module name; neither the submission nor the hidden
directory is ever put on the grader's sys.path (a test file that needs a helper should define it
inline). Every call into student code is bounded by `call_timeout_s`, each test's calls
together by `test_timeout_s`, and the suite by the judge's deadline.

Planted loader files are telemetry, not a defence: when `flag_planted_files` is on, their names
are reported as a `judge_tampering` misbehaviour event so trainers see the attempt, while the
score is whatever the tests say."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import json
import os
import secrets
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Literal

from pydantic import Field

from ..custody import MisbehaviourEvent
from ..errors import ConfigError, ProctorError, SandboxError
from .base import Judge, JudgeContext, Verdict
from .student_code import StudentRunner

PLANTED_NAMES = ("conftest.py", "sitecustomize.py", "usercustomize.py")
MESSAGE_CHARS = 300
_METADATA_BUDGET = 12 * 1024  # under base.METADATA_BYTES, with room for the counts
_MAX_MESSAGES = 20


class _AuthoringError(ConfigError):
    """The hidden tests themselves are wrong: an infra error, never the student's fault."""


class _NoBytecodeLoader(importlib.machinery.SourceFileLoader):
    """Loads a test file without writing __pycache__ into the task's hidden directory."""

    def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
        return None


class TestSuiteJudge(Judge):
    """Grader-side hidden tests that reach the student's code only through a `student` runner."""

    __test__ = False  # not a pytest test class, despite the name

    tests: str = Field(description="A .py file, or a directory of test_*.py files: relative to the task's hidden data, else to the environment directory, or absolute.")
    expected: tuple[str, ...] | None = Field(None, description="Exact set of test function names that must be collected; None: any non-empty set.")
    scoring: Literal["all", "fraction"] = Field("all", description="all: 1.0 only if every test passed, else 0. fraction: passed / total.")
    call_timeout_s: float = Field(30.0, gt=0, description="Bound on each call into student code.")
    test_timeout_s: float = Field(120.0, gt=0, description="Bound on all student calls of one test together.")
    timeout_s: float = Field(300.0, gt=0, le=24 * 3600, description="Bound on the whole suite, sandbox included.")
    flag_planted_files: bool = Field(True, description="Report conftest.py, sitecustomize.py, usercustomize.py and *.pth in the submission as judge_tampering.")

    def describe(self) -> str:
        return f"TestSuiteJudge({self.tests})"

    def grade(self, ctx: JudgeContext) -> Verdict:
        events = _planted_files(ctx.submission) if self.flag_planted_files else []
        modules: list[str] = []
        try:
            try:
                tests = self._collect(ctx, modules)
            except _AuthoringError as exc:
                return Verdict.zero(str(exc), infra_error=True, misbehaviour=events)
            names = [name for name, _ in tests]
            if not names:
                return Verdict.zero(f"no tests collected from {self.tests}", misbehaviour=events)
            if self.expected is not None and set(names) != set(self.expected):
                missing = sorted(set(self.expected) - set(names))
                extra = sorted(set(names) - set(self.expected))
                parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unexpected {', '.join(extra)}"] if extra else [])
                return Verdict.zero(f"collected tests differ from the expected set: {'; '.join(parts)}",
                                    metadata={"missing": missing, "unexpected": extra}, misbehaviour=events)
            try:
                results, servers = self._run(ctx, tests)
            except (SandboxError, ProctorError, OSError) as exc:
                return Verdict.zero(f"could not run student code: {type(exc).__name__}: {exc}", infra_error=True, misbehaviour=events)
        finally:
            for name in modules:
                sys.modules.pop(name, None)
        return self._verdict(results, servers, events)

    def missing_files(self, hidden: Path | None, env_dir: Path | None) -> list[str]:
        if any(c.exists() for c in self._candidates(hidden, env_dir)):
            return []
        where = ", ".join(str(c) for c in self._candidates(hidden, env_dir)) or "no hidden data or environment directory"
        return [f"tests {self.tests!r} (looked in {where})"]

    # -- collection --------------------------------------------------------------------------------
    def _candidates(self, hidden: Path | None, env_dir: Path | None) -> list[Path]:
        path = Path(self.tests)
        if path.is_absolute():
            return [path]
        return [Path(base) / path for base in (hidden, env_dir) if base is not None]

    def _resolve(self, ctx: JudgeContext) -> Path:
        candidates = self._candidates(ctx.hidden, ctx.env_dir)
        for candidate in candidates:
            if candidate.exists():
                return candidate
        where = ", ".join(str(c) for c in candidates) or "nowhere (the context has neither hidden data nor an environment directory)"
        raise _AuthoringError(f"hidden tests {self.tests!r} not found (looked in {where}); fix TestSuiteJudge.tests")

    def _collect(self, ctx: JudgeContext, modules: list[str]) -> list[tuple[str, Callable[..., Any]]]:
        root = self._resolve(ctx)
        files = [root] if root.is_file() else sorted(p for p in root.glob("test_*.py") if p.is_file())
        tests: list[tuple[str, Callable[..., Any]]] = []
        seen: dict[str, Path] = {}
        for file in files:
            module = _load(file, modules)
            for name, obj in list(vars(module).items()):
                if not name.startswith("test_") or not callable(obj):
                    continue
                _check_signature(file, name, obj)
                if name in seen:
                    raise _AuthoringError(f"test {name} is defined in both {seen[name]} and {file}; test names must be unique")
                seen[name] = file
                tests.append((name, obj))
        return tests

    # -- running -----------------------------------------------------------------------------------
    def _run(self, ctx: JudgeContext, tests: list[tuple[str, Callable[..., Any]]]) -> tuple[list[tuple[str, str, str]], int]:
        limits = getattr(ctx.limits, "sandbox", None)  # the task's SandboxLimits, when the judge runs inside a task
        # Leave time to kill the server and tear the sandbox down inside the judge's bound.
        margin = min(2.0, 0.1 * ctx.time_left())
        end = ctx.deadline - margin
        results: list[tuple[str, str, str]] = []
        with StudentRunner(ctx.submission, limits=limits, call_timeout_s=self.call_timeout_s, deadline=end, backend=ctx.sandbox_backend(),
                           spec=ctx.grading_spec() if ctx.sandbox_spec is not None else None) as student:
            for name, fn in tests:
                now = time.monotonic()
                if now >= end:
                    results.append((name, "not_run", "the judge's time ran out before this test"))
                    continue
                student.deadline = min(end, now + self.test_timeout_s)
                results.append((name, *_run_one(fn, student)))
            return results, student.servers_started

    def _verdict(self, results: list[tuple[str, str, str]], servers: int, events: list[MisbehaviourEvent]) -> Verdict:
        total = len(results)
        passed = sum(1 for _, outcome, _ in results if outcome == "passed")
        failed = [(name, message) for name, outcome, message in results if outcome != "passed"]
        if self.scoring == "fraction":
            score = passed / total
        else:
            score = 1.0 if passed == total else 0.0
        if not failed:
            explanation = f"all {total} tests passed"
        else:
            name, message = failed[0]
            explanation = f"{passed} of {total} tests passed; {name} failed: {message}"
            if len(failed) > 1:
                explanation += f" (and {len(failed) - 1} more)"
        return Verdict(score=score, explanation=explanation, metadata=_metadata(results, passed, servers), misbehaviour=events)


def _load(file: Path, modules: list[str]) -> ModuleType:
    name = f"_proctor_hidden_{secrets.token_hex(4)}_{file.stem}"
    loader = _NoBytecodeLoader(name, str(file))
    spec = importlib.util.spec_from_file_location(name, file, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling-by-reference look modules up by name
    modules.append(name)
    try:
        loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - the task's file; a bug in it is the author's
        raise _AuthoringError(f"hidden test file {file} failed to load: {type(exc).__name__}: {exc}") from None
    return module


def _check_signature(file: Path, name: str, fn: Any) -> None:
    if inspect.isclass(fn) or inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise _AuthoringError(f"{file}: {name} must be a plain function `def {name}(student):`")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise _AuthoringError(f"{file}: {name} has no inspectable signature; write `def {name}(student):`") from None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) != 1 or params[0].name != "student" or params[0].kind not in kinds:
        got = ", ".join(p.name for p in params)
        raise _AuthoringError(f"{file}: test function {name}({got}) must take exactly one parameter, `student`")


def _run_one(fn: Callable[..., Any], student: StudentRunner) -> tuple[str, str]:
    """Run one test; anything but a clean None return is a failure, whatever it raised."""
    try:
        returned = fn(student)
    except BaseException as exc:  # noqa: BLE001 - Skipped, SkipTest, SystemExit, ...: all failures
        if isinstance(exc, SandboxError):
            raise  # the harness could not run the student: an infra error, not a failed test
        return "failed", _failure(exc, fn)
    if returned is not None:
        return "failed", _clip(f"test returned {type(returned).__name__} instead of None; tests must assert, not return")
    return "passed", ""


def _failure(exc: BaseException, fn: Callable[..., Any]) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except Exception:  # noqa: BLE001
        text = type(exc).__name__
    test_file = getattr(getattr(fn, "__code__", None), "co_filename", None)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == test_file]
    if frames:
        frame = frames[-1]
        text += f" at {os.path.basename(frame.filename)}:{frame.lineno}"
        if frame.line:
            text += f": {frame.line.strip()}"
    return _clip(text)


def _clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = " ".join(text.split())  # one line: student-derived text cannot forge log lines
    return text if len(text) <= limit else text[: limit - 15] + " [truncated]"


def _metadata(results: list[tuple[str, str, str]], passed: int, servers: int) -> dict[str, Any]:
    entries: list[dict[str, str]] = []
    messages = 0
    for name, outcome, message in results:
        entry = {"name": name, "outcome": outcome}
        if message and messages < _MAX_MESSAGES:
            entry["message"] = message
            messages += 1
        entries.append(entry)
    meta: dict[str, Any] = {"passed": passed, "total": len(results), "servers_started": servers, "tests": entries}
    while entries and len(json.dumps(meta)) > _METADATA_BUDGET:
        entries.pop()
        meta["tests_truncated"] = True
    return meta


def _planted_files(submission: Path) -> list[MisbehaviourEvent]:
    """Loader hooks planted in the submission, as telemetry (the custody copy is trusted to walk)."""
    found: list[str] = []
    for root, _dirs, files in os.walk(submission):
        for name in files:
            if name in PLANTED_NAMES or name.endswith(".pth"):
                found.append(os.path.relpath(os.path.join(root, name), submission))
    if not found:
        return []
    found.sort()
    shown = ", ".join(_clip(p, 120) for p in found[:10]) + (f" and {len(found) - 10} more" if len(found) > 10 else "")
    return [MisbehaviourEvent(
        kind="judge_tampering",
        detail=f"submission contains files that hook Python or pytest start-up ({shown}); they were not loaded",
    )]


__all__ = ["TestSuiteJudge"]
