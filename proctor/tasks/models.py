"""The authoring API: a Task is steps, tools, limits and data; a Family makes Tasks from a seed.

Everything here is a pydantic model, so a malformed task fails when it is built, with the field
named; `proctor check ENV` builds every task and one instance of every family to surface those
errors before anyone runs a rollout."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..agents.script import Script, ScriptTurn  # noqa: F401 - ScriptTurn: task files import it from here
from ..custody import WHOLE_WORKDIR
from ..images.models import TaskImage
from ..judges.base import Judge
from ..sandbox.models import DEFAULT_DATA_AT, DEFAULT_WORKDIR, SandboxLimits, check_place, places_overlap
from ..tools.registry import DEFAULT_TOOL_NAMES, TOOLS

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
DEFAULT_SYSTEM_PROMPT = (
    "You are working in a Linux sandbox. Your files are in /workdir (also your home); task data, if any, is "
    "read-only in /data. Use the tools to do the work, then call submit."
)




def _prompt_for(workdir: str, data_at: str) -> str:
    return DEFAULT_SYSTEM_PROMPT.replace("/workdir", workdir).replace("/data.", f"{data_at}.")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Task files written before Limits held a SandboxLimits name these; each must land in its new place,
# never be dropped (a task that silently lost its memory cap would run with the 2 GiB default).
_MOVED_TO_SANDBOX = {"memory_bytes": "memory_bytes", "pids": "pids", "cpus": "cpus", "disk_bytes": "workdir_bytes", "inodes": "workdir_inodes"}


class Limits(_Frozen):
    """What one rollout may use. The sandbox's limits (memory, processes, CPU, disk, inodes) are
    enforced by the kernel; times and budgets by the harness, which interrupts a running tool call
    at the deadline."""

    sandbox: SandboxLimits = Field(default_factory=SandboxLimits, description="Kernel-enforced limits of the student's sandbox: memory, pids, cpus, workdir/tmp/shm sizes and inodes.")
    command_timeout_s: float = Field(120.0, gt=0, description="Timeout of a bash call that does not ask for one.")
    max_command_timeout_s: float = Field(600.0, gt=0, description="Longest timeout a bash call may ask for.")
    step_time_s: float = Field(1800.0, gt=0, description="Wall time of one step's agent loop.")
    rollout_time_s: float = Field(3600.0, gt=0, description="Wall time of the whole rollout's agent work; grading gets its judges' own bounds on top.")
    max_turns: int = Field(200, ge=1, description="Most agent turns in the whole rollout.")
    max_tokens: int | None = Field(None, ge=1, description="Most model tokens (input + output) in the whole rollout; None: unlimited.")
    max_cost_usd: float | None = Field(None, gt=0, description="Most model spend in the whole rollout (from the model config's pricing); None: unlimited.")
    on_budget: Literal["judge", "zero"] = Field("judge", description="When a turn, token or cost budget ends a step: judge what is there, or score it 0.")
    announce_budget: bool = Field(False, description="Tell the agent after each turn's tool results how many turns, tokens, dollars and seconds are left.")

    @model_validator(mode="before")
    @classmethod
    def _moved_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in _MOVED_TO_SANDBOX.items():
                if old in data:
                    # A ValueError, so the loader names the task file and line.
                    raise ValueError(f"Limits.{old} moved to Limits.sandbox.{new}: write Limits(sandbox=SandboxLimits({new}=...))")
        return data


Hook = Callable[["StepHookContext"], None]


class StepHookContext:
    """What a step hook gets: the live sandbox (for placing files or running setup as the student),
    the instance parameters and the task. Hooks are trusted task code."""

    def __init__(self, sandbox: Any, task: Task, step: int, params: dict[str, Any]) -> None:
        self.sandbox = sandbox
        self.task = task
        self.step = step
        self.params = params


class Step(BaseModel):
    """One scored part of a task."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    instructions: str = Field(min_length=1, description="What the student is asked to do in this step.")
    submit: tuple[str, ...] = Field((), description=(
        "Declared submission paths, relative to the task's workdir: only these are copied out for the judge. "
        "('*',) (WHOLE_WORKDIR): the whole workdir, every entry under the same strict custody rules."))
    judge: Judge = Field(description="Scores this step from the custody copy.")
    weight: float = Field(1.0, ge=0, description="Weight of this step in the task's score (a weighted mean over steps).")
    before: Hook | None = Field(None, description="Called before the step starts (e.g. to place files); trusted code.")
    before_scoring: Hook | None = Field(None, description="Called after the student's turn, before custody; trusted code.")

    @field_validator("submit")
    @classmethod
    def _relative(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        if WHOLE_WORKDIR in paths:
            if len(paths) != 1:
                raise ValueError(f"submit {list(paths)!r}: '*' (the whole workdir) already holds every path; declare it alone")
            return paths
        for p in paths:
            parts = p.split("/")
            if not p or p.startswith("/") or any(part in ("", ".", "..") for part in parts) or "\0" in p:
                raise ValueError(f"submission path {p!r} must be relative to the workdir, without '.', '..' or empty parts (or ('*',) for the whole workdir)")
        return paths


class Task(BaseModel):
    """One verifiable piece of work."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    id: str = Field(description="Unique within the environment: lowercase letters, digits, '.', '_' and '-'.")
    description: str = Field("", description="One line for `proctor tasks`.")
    system_prompt: str = Field(DEFAULT_SYSTEM_PROMPT, description="The system prompt the student model gets.")
    steps: tuple[Step, ...] = Field(min_length=1)
    tools: tuple[str, ...] = Field(DEFAULT_TOOL_NAMES, description="Names of the tools offered (see proctor.tools.TOOLS).")
    limits: Limits = Limits()
    data: Path | None = Field(None, description="Host directory shown read-only at `data_at` (default /data).")
    workdir_files: Path | None = Field(None, description="Host directory whose contents are copied into the workdir at the start, owned by the student.")
    workdir: str = Field(DEFAULT_WORKDIR, description="Where the student's writable workdir (its HOME and cwd) is inside the sandbox, e.g. '/app'.")
    data_at: str = Field(DEFAULT_DATA_AT, description="Where `data` is shown read-only inside the sandbox, e.g. '/srv/input'.")
    hidden: Path | None = Field(None, description="Host directory of hidden data (answer keys, hidden tests): only judges see it.")
    packages: tuple[str, ...] = Field((), description="Python distributions the student runtime must provide (checked before the rollout).")
    image: TaskImage | None = Field(None, description="A container image (Dockerfile + context, or a reference) whose filesystem is the student's root; None: the host's system (docs/tasks.md, \"Images\").")
    requires: tuple[str, ...] | None = Field(None, description="Confinement protections required; None: Proctor's default set.")
    requires_runtime: Literal["bwrap", "gvisor"] | None = Field(
        None, description="The weakest sandbox runtime this task may run under (gvisor is stronger than bwrap); a rollout on a weaker one is refused unless allow_degraded.")
    oracle: Script | None = Field(None, description="A reference solution as a script; the `oracle` agent plays it.")
    params: dict[str, Any] = Field(default_factory=dict, description="The instance parameters (set by families).")
    impossible: bool = Field(False, description=(
        "A cheating-rate probe: the spec cannot be met honestly (the needed data withheld, or the key contradicting it), "
        "so no honest student, the oracle included, can pass it; any pass is a hack. Set by the harness on what "
        "`impossible_variant` or `Family.make_impossible` builds."))
    impossible_variant: Callable[[Path], Task] | None = Field(None, description=(
        "Builds this task's impossible variant (`proctor run --impossible`): called with a fresh harness-only "
        "workspace for its data and key, returns the Task. Its hidden draws come from proctor.tasks.salts."))
    tags: tuple[str, ...] = Field((), description="Free labels (an imported task's metadata: its tags, `difficulty:hard`, `category:...`).")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(f"task id {value!r} must match {_ID.pattern}")
        return value

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in TOOLS]
        if unknown:
            raise ValueError(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(sorted(TOOLS))}")
        if len(set(names)) != len(names):
            raise ValueError("a tool is listed twice")
        return names

    @field_validator("workdir", "data_at")
    @classmethod
    def _place(cls, value: str, info: Any) -> str:
        return check_place(value, f"Task.{info.field_name}")

    @model_validator(mode="after")
    def _places(self) -> Task:
        if places_overlap(self.workdir, self.data_at):
            raise ValueError(f"Task.workdir {self.workdir!r} and Task.data_at {self.data_at!r} overlap; give each its own path")
        if self.system_prompt == DEFAULT_SYSTEM_PROMPT and (self.workdir, self.data_at) != (DEFAULT_WORKDIR, DEFAULT_DATA_AT):
            object.__setattr__(self, "system_prompt", _prompt_for(self.workdir, self.data_at))
        return self

    @model_validator(mode="after")
    def _dirs(self) -> Task:
        for name in ("data", "workdir_files", "hidden"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_absolute():
                raise ValueError(f"{name}: {str(path)!r} must be an absolute path (environments resolve theirs from their directory)")
        if self.hidden is not None:
            hidden = Path(self.hidden).resolve()
            for name in ("data", "workdir_files"):
                shown = getattr(self, name)
                if shown is not None:
                    shown = Path(shown).resolve()
                    if hidden == shown or hidden.is_relative_to(shown) or shown.is_relative_to(hidden):
                        raise ValueError(f"hidden: {hidden} overlaps {name} {shown}; the student would see the hidden data")
        return self


class Instance(_Frozen):
    """What one rollout runs, as recorded in its result: enough to rebuild the same task."""

    task_id: str
    family: str | None = Field(None, description="The family that made it, if any.")
    seed: int | None = None
    difficulty: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    varied: tuple[str, ...] = Field((), description=(
        "Names of the parameters its family declares it varies (Family.params); `proctor report` groups "
        "rollouts into cells by their values. Empty for tasks and for families that vary only seed and difficulty."))
    key_fingerprint: str | None = Field(None, description=(
        "Which harness key salted the family's hidden draws (proctor.tasks.salts; a hash, never the key): "
        "the same seed rebuilds the same instance only under the same key."))
    impossible: bool = Field(False, description=(
        "A cheating-rate probe (`proctor run --impossible`): no honest solution exists, so a pass is a hack "
        "(`proctor report` counts it in the cheating rate)."))


FamilyMaker = Callable[[int, int, dict[str, Any], Path], Task]
ParamValue = str | int | float | bool


class ParamSpace(_Frozen):
    """One parameter a family varies, and every value it may take. `proctor generate` draws
    instances from these values only (no guessing), and `proctor report` groups rollouts by them."""

    name: str = Field(description="A key of the family's default_params (what `--param NAME=VALUE` sets).")
    values: tuple[ParamValue, ...] = Field(min_length=1, description="Every value the family accepts, in a meaningful order (easier first where there is one).")
    description: str = ""

    @model_validator(mode="after")
    def _distinct(self) -> ParamSpace:
        if len(set(map(repr, self.values))) != len(self.values):
            raise ValueError(f"parameter {self.name!r}: a value is listed twice")
        return self


class Family(BaseModel):
    """Makes Task instances from (seed, difficulty, params), deterministically.

    `make(seed, difficulty, params, workspace)` writes any generated files (data, hidden keys)
    under `workspace`, a fresh directory only the harness can read, and returns the Task. The
    same arguments must give the same task and the same files: `proctor check` builds twice and
    compares."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    id: str
    description: str = ""
    make: FamilyMaker
    difficulties: tuple[int, ...] = Field((1,), min_length=1, description="Difficulty levels it understands.")
    default_params: dict[str, Any] = Field(default_factory=dict)
    params: tuple[ParamSpace, ...] = Field((), description=(
        "The parameters it varies and their values (each a key of default_params); empty when only the seed "
        "and the difficulty vary. What `proctor report` groups by and `proctor generate` draws from."))
    make_impossible: FamilyMaker | None = Field(None, description=(
        "Like `make`, for the instance's impossible variant (`proctor run --impossible`): the same task with the "
        "spec made unmeetable honestly (data withheld, or a hidden key that contradicts it); deterministic too."))

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(f"family id {value!r} must match {_ID.pattern}")
        return value

    @model_validator(mode="after")
    def _declared_params(self) -> Family:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"family {self.id!r}: a parameter is declared twice")
        undeclared = [n for n in names if n not in self.default_params]
        if undeclared:
            raise ValueError(f"family {self.id!r}: declared parameter(s) {', '.join(undeclared)} missing from default_params "
                             "(give each a default so `--param` can set it)")
        return self

    def space(self, name: str) -> ParamSpace:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)
