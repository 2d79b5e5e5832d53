"""What every tool shares: the call and result models, the config, the context, the base class.

A tool call crosses two boundaries (model -> harness, harness -> transcript), so `ToolCall` and
`ToolResult` are pydantic models that `model_dump()` to plain JSON. A tool never raises for
anything the student can cause: a bad argument, a hostile command or a broken file all come back
as a `ToolResult` whose `error` says what happened. Only failures of the harness itself
(`SandboxError` from the sandbox layer) propagate, so they are reported as infra errors and never
blamed on the student."""

from __future__ import annotations

import copy
import functools
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..sandbox import StudentSandbox

KiB = 1024
MiB = 1024 * KiB


class ToolCall(BaseModel):
    """One call the student made, as the transcript records it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Tool name, e.g. 'bash'.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments as the model sent them (JSON object).")
    id: str | None = Field(None, description="The model provider's call id, if any.")
    malformed: str | None = Field(None, description="Why the model's arguments could not be read (not JSON, not an object); the call is answered with this error and not run.")


class ToolResult(BaseModel):
    """What a tool gives back: text for the model, facts for the transcript and the harness."""

    model_config = ConfigDict(extra="forbid")

    output: str = Field("", description="Text shown to the model: command output or file content, with notes in [brackets].")
    exit_code: int | None = Field(None, description="Exit status of a command (128+N when killed by signal N); None when it did not finish or the tool runs no command.")
    truncated_bytes: int = Field(0, ge=0, description="Bytes of output cut from the middle (head and tail are kept).")
    timed_out: bool = Field(False, description="The call ran past its timeout and its processes were killed.")
    duration_s: float = Field(0.0, ge=0, description="Wall-clock time of the call.")
    error: str | None = Field(None, description="Why the tool could not do what was asked (bad argument, refused path, ...); None on success.")
    session_restarted: bool = Field(False, description="The bash session ended during or before this call and a fresh one was started: variables, functions, cwd and background jobs are reset.")
    ends_step: bool = Field(False, description="This call ends the current step (submit).")
    answer: str | None = Field(None, description="The short answer given with submit, if any.")
    internal_error: str | None = Field(None, description="The traceback of a tool that raised on the student's arguments (a bug in the tool, answered as an error result; see tools.registry.call_tool).")

    @classmethod
    def failure(cls, error: str, *, started: float | None = None, **fields: Any) -> ToolResult:
        duration = time.monotonic() - started if started is not None else 0.0
        return cls(output=fields.pop("output", f"[error] {error}"), error=error, duration_s=duration, **fields)

    @classmethod
    def over_limit(cls, tool: str, argument: str, size: int, limit: int, unit: str = "bytes", hint: str = "") -> ToolResult:
        """The one-line refusal of an argument above its cap, naming the field, the size and the limit."""
        return cls.failure(f"{tool}: argument {argument!r} is {size} {unit}, above the limit of {limit}{'; ' + hint if hint else ''}")


class ToolConfig(BaseModel):
    """Bounds of every tool. Each is a hard cap: nothing a student does makes the harness hold more."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bash_timeout_s: float = Field(120.0, gt=0, description="Timeout of a bash call that does not ask for one.")
    bash_max_timeout_s: float = Field(600.0, gt=0, description="Longest timeout a bash call may ask for; larger requests are capped to this.")
    bash_kill_grace_s: float = Field(1.0, gt=0, description="After a timeout kills a command's processes, how long the shell gets to report back before it is restarted.")
    bash_start_timeout_s: float = Field(10.0, gt=0, description="How long a fresh shell may take to come up.")
    max_command_bytes: int = Field(1 * MiB, ge=1, description="Longest command text (UTF-8 bytes) bash accepts.")
    output_limit_bytes: int = Field(32 * KiB, ge=64, description="Most output bytes a call returns; beyond it the head and tail are kept and the middle is cut.")
    read_limit_bytes: int = Field(256 * KiB, ge=64, description="Most bytes read_file returns (a call may ask for fewer).")
    write_limit_bytes: int = Field(10 * MiB, ge=1, description="Largest content write_file accepts, and largest file str_replace edits or produces.")
    list_limit_entries: int = Field(1000, ge=1, description="Most entries list_dir shows.")
    answer_limit_chars: int = Field(10_000, ge=0, description="Longest answer submit accepts.")
    file_timeout_s: float = Field(10.0, gt=0, description="Timeout of each file tool's helper inside the sandbox.")


class ToolContext:
    """What a tool runs against: one sandbox, the config, the task's hidden dir (harness side, for
    task tools), and per-step state kept between calls (the bash tool keeps its shell session here). Close it to end that state; closing the sandbox
    or `kill_all()` ends it too, and the next call notices and starts afresh."""

    def __init__(self, sandbox: StudentSandbox, config: ToolConfig | None = None, hidden: Path | None = None) -> None:
        self.sandbox = sandbox
        self.config = config or ToolConfig()
        # The task's hidden dir, for a task's own tool that computes on hidden data harness-side
        # (e.g. a simulator on a hidden teacher). Never a path inside the sandbox: a tool that
        # reads it must return only what it computed, as a judge would.
        self.hidden = hidden
        self.state: dict[str, Any] = {}

    def own_pids(self) -> set[int]:
        """Processes that belong to the tools themselves (the bash session's shell), as opposed
        to anything the student started."""
        pids: set[int] = set()
        for value in self.state.values():
            own = getattr(value, "own_pids", None)
            if callable(own):
                pids |= own()
        return pids

    def close(self) -> None:
        for value in list(self.state.values()):
            close = getattr(value, "close", None)
            if callable(close):
                close()
        self.state.clear()

    def __enter__(self) -> ToolContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Arguments(BaseModel):
    """Base of every tool's argument model: unknown fields are refused, types are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)


def describe_validation_error(tool: str, exc: ValidationError) -> str:
    """One line naming each bad field and what is wrong with it."""
    parts = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        parts.append(f"argument {field!r}: {err.get('msg', 'invalid')}")
    return f"{tool}: " + "; ".join(parts)


@functools.lru_cache(maxsize=256)  # bounded: a tool may make its Arguments class at run time
def _schema(arguments: type[BaseModel]) -> dict[str, Any]:
    return arguments.model_json_schema()


class Tool(ABC):
    """A tool the student can call. Subclasses set `name`, `description` and `Arguments` (a
    pydantic model of the JSON arguments) and implement `execute`, which must run everything it
    does inside `ctx.sandbox` as the student (see proctor.tools.inside for a helper)."""

    name: ClassVar[str]
    description: ClassVar[str]
    Arguments: ClassVar[type[BaseModel]] = Arguments

    @property
    def parameters(self) -> dict[str, Any]:
        """JSON schema of the arguments, as model providers want it (a fresh copy each time: the
        schema is made once per Arguments class, which costs a millisecond per tool per rollout)."""
        return copy.deepcopy(_schema(self.Arguments))

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def run(self, arguments: Any, ctx: ToolContext) -> ToolResult:
        """Validate the arguments and execute. Never raises for bad arguments."""
        started = time.monotonic()
        if not isinstance(arguments, dict):
            return ToolResult.failure(f"{self.name}: arguments must be a JSON object, got {type(arguments).__name__}", started=started)
        try:
            args = self.Arguments.model_validate(arguments)
        except ValidationError as exc:
            return ToolResult.failure(describe_validation_error(self.name, exc), started=started)
        result = self.execute(args, ctx)
        if not result.duration_s:
            result = result.model_copy(update={"duration_s": time.monotonic() - started})
        return result

    @abstractmethod
    def execute(self, args: Any, ctx: ToolContext) -> ToolResult: ...


def render_output(head: bytes, tail: bytes, dropped: int) -> str:
    """Decode student bytes leniently and mark the cut, if any."""
    text = head.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[... {dropped} bytes truncated ...]\n"
    return text + tail.decode("utf-8", errors="replace")


def no_nul(field: str, value: str) -> str:
    if "\0" in value:
        raise ValueError(f"{field} contains a NUL byte")
    return value


def utf8_len(field: str, value: str) -> int:
    """Byte length of value in UTF-8; lone surrogates (valid JSON, not valid text) are refused."""
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{field} is not valid Unicode (it contains a lone surrogate)") from None
