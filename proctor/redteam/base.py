"""What every attack shares: the Attack record and the helpers that adapt an attack to a task.

An attack is a small generator: given a task and its first declared submission path it returns
the turns of a scripted student (or None when it does not apply, e.g. a submission attack on a
task that declares no submission path, or an LLM-judge attack on a task without an LLM judge).
Attacks run only as scripted students inside the harness's sandbox; nothing here executes them.

Every command is bounded: each bash call carries a short timeout, and anything that could run
long is wrapped in `timeout`, so the whole library stays fast enough for CI."""

from __future__ import annotations

import base64
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..judges.base import Judge, judges_of
from ..tasks.models import Script, ScriptTurn, Task

Maker = Callable[[Task, str], "list[ScriptTurn] | None"]


@dataclass(frozen=True)
class Attack:
    id: str
    family: str
    description: str
    defence: str
    flagged: tuple[str, ...]  # misbehaviour kinds, any of which must be recorded; () if not detectable
    make: Maker

    def script(self, task: Task) -> Script | None:
        target = first_submission(task)
        if target is None and self.family == "submission":
            return None
        turns = self.make(task, target)
        if turns is None:
            return None
        return Script(name=f"attack:{self.id}", turns=[*turns, ScriptTurn(tool="submit", arguments={})])


def first_submission(task: Task) -> str | None:
    for step in task.steps:
        if step.submit:
            return step.submit[0]
    return None


def declared(task: Task) -> list[str]:
    """Every declared submission path of the task, in order, without repeats."""
    seen: dict[str, None] = {}
    for step in task.steps:
        for path in step.submit:
            seen[path] = None
    return list(seen)


def bash(command: str, timeout: float = 20) -> ScriptTurn:
    return ScriptTurn(tool="bash", arguments={"command": command, "timeout": timeout})


def py(code: str, *args: str, timeout: float = 20, limit_s: float | None = None) -> ScriptTurn:
    """A bash call running `code` with the student's python3 (as a heredoc, so it needs no quoting);
    `limit_s` wraps it in `timeout`."""
    wrap = f"timeout -s KILL {limit_s:g} " if limit_s else ""
    quoted = " ".join(shlex.quote(a) for a in args)
    return bash(f"{wrap}python3 - {quoted} <<'PROCTOR_PY'\n{code.strip()}\nPROCTOR_PY\necho exit=$?", timeout=timeout)


def w(target: str | None) -> str:
    """The shell-quoted /workdir path of a submission target (answer.txt when there is none)."""
    return shlex.quote(f"/workdir/{target or 'answer.txt'}")


def fresh(target: str | None) -> str:
    """Shell that empties the place of `target` (whatever it is now) and creates its parent."""
    return f"mkdir -p \"$(dirname {w(target)})\"; rm -rf {w(target)}"


def put(task: Task, path: str, content: str) -> ScriptTurn:
    """Write `content` to /workdir/`path`, with write_file when the task offers it."""
    if "write_file" in task.tools:
        return ScriptTurn(tool="write_file", arguments={"path": f"/workdir/{path}", "content": content})
    blob = base64.b64encode(content.encode()).decode()
    return bash(f"mkdir -p \"$(dirname {w(path)})\"; echo {blob} | base64 -d > {w(path)}")


def key_files(task: Task) -> list[str]:
    """Host paths of the task's hidden files (the strongest key-reading attack knows them)."""
    if task.hidden is None or not Path(task.hidden).is_dir():
        return []
    return sorted(str(p) for p in Path(task.hidden).rglob("*") if p.is_file())[:5]


def task_judges(task: Task) -> list[Judge]:
    return [j for step in task.steps for j in judges_of(step.judge)]
