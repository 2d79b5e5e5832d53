"""What every judge shares: the verdict, the context it grades from, the base class, and
`evaluate`, which is the only way the harness calls a judge.

A judge reads the custody copy (never the student's live workdir), the hidden data and the
student's final answer. It is trusted task code, but it handles untrusted bytes, so `evaluate`
treats it as something that can fail: a judge that raises, hangs past its bound, returns
something that is not a `Verdict`, a score that is NaN or outside [0, 1], or metadata over the
size cap scores 0 with that reason. That is a student-visible 0, not an infra error, because every
one of those can be caused by what the student submitted. Only a judge that says so itself
(`Verdict.infra_error`, e.g. the LLM judge's provider kept failing) is an infra error.

A judge overrunning its bound is abandoned: its thread is left to finish on its own (Python
cannot kill a thread). Judges that run processes kill them at their own bound; a judge written in
pure Python should keep its work bounded by input size (the custody caps bound the input)."""

from __future__ import annotations

import json
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..custody import MisbehaviourEvent
from . import grading_watch

if TYPE_CHECKING:
    from ..sandbox import SandboxBackend

EXPLANATION_CHARS = 2000
METADATA_BYTES = 16 * 1024


class Verdict(BaseModel):
    """A judge's decision about one step."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(ge=0.0, le=1.0, allow_inf_nan=False, description="Score in [0, 1].")
    explanation: str = Field("", description="Short human explanation of the score.")
    metadata: dict[str, Any] = Field(default_factory=dict, description=f"Plain JSON data for people and tools (at most {METADATA_BYTES} bytes serialised).")
    continue_task: bool = Field(True, description="False ends the rollout after this step (later steps are not attempted).")
    infra_error: bool = Field(False, description="The judge itself could not work (e.g. its model provider kept failing): the rollout is an infra_error, not a student failure.")
    misbehaviour: list[MisbehaviourEvent] = Field(default_factory=list, description="Attempts the judge detected (e.g. judge_tampering).")

    @classmethod
    def zero(cls, explanation: str, **fields: Any) -> Verdict:
        return cls(score=0.0, explanation=_clip(explanation), **fields)


@dataclass
class JudgeContext:
    """What a judge grades from. Paths are host paths the student cannot reach."""

    submission: Path
    """Custody copy of this step's declared paths, laid out as they were under the workdir."""
    hidden: Path | None = None
    """The task's hidden data (answer keys, hidden tests), or None."""
    answer: str | None = None
    """The student's final answer of this step: the `submit` answer if given, else its last text message."""
    params: dict[str, Any] = field(default_factory=dict)
    """The instance's parameters (seed, difficulty and family parameters)."""
    env_dir: Path | None = None
    """The environment's directory, for judge scripts and test files it ships."""
    limits: Any = None
    """The task's `Limits`, for judges that run student code in a fresh sandbox."""
    step: int = 0
    deadline: float = field(default_factory=lambda: time.monotonic() + 3600.0)
    """time.monotonic() by which the judge must be done."""
    misbehaviour: list[MisbehaviourEvent] = field(default_factory=list)
    """Events recorded so far in this step (custody refusals, ...), read-only for judges."""
    backend: Any = None
    """The rollout's sandbox runtime (a `SandboxBackend`), or None for the default (bwrap). A judge
    that runs student code makes its sandboxes with `sandbox_backend()` (StudentRunner takes it as
    `backend=`), so graded code is confined exactly as the student was."""
    starting_files: dict[str, str] = field(default_factory=dict)
    """SHA-256 of each file the workdir started with (custody.starting_files: the task's
    workdir_files, an image's files), by path relative to the workdir; a submitted file with the
    same bytes at the same path is the task's own, never the student's doing."""
    sandbox_spec: Any = None
    """The `SandboxSpec` the student's sandbox was made from (its limits, workdir and data paths,
    mounts), or None outside a rollout. A judge that runs student code in a fresh sandbox builds it
    from this (`grading_spec`), so the code sees the same world at the same paths."""

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def grading_spec(self) -> Any:
        """The student's `SandboxSpec` (or a default one), for a fresh grading sandbox: the same
        paths, limits, mounts and image, without the image's starting workdir files."""
        from ..sandbox import SandboxSpec

        if self.sandbox_spec is not None:
            # Never the image's starting files: what is graded is the custody copy, files the student deleted stay deleted.
            return self.sandbox_spec.model_copy(update={"seed_workdir": False})
        limits = getattr(self.limits, "sandbox", None)
        return SandboxSpec(limits=limits) if limits is not None else SandboxSpec()

    def sandbox_backend(self) -> SandboxBackend:
        from ..sandbox import get_backend

        return self.backend if self.backend is not None else get_backend()


class Judge(BaseModel, ABC):
    """Turns a custody copy into a Verdict. Subclasses are pydantic models (so a task's judge
    configuration is validated, with errors naming the field) and implement `grade`."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    timeout_s: float = Field(60.0, gt=0, le=24 * 3600, description="Bound on this judge's wall time; past it the step scores 0.")

    @abstractmethod
    def grade(self, ctx: JudgeContext) -> Verdict: ...

    def bound_s(self) -> float:
        """The whole time this judge may take (composite judges add their parts)."""
        return self.timeout_s

    def describe(self) -> str:
        return type(self).__name__

    def missing_files(self, hidden: Path | None, env_dir: Path | None) -> list[str]:
        """The files this judge reads from the task (a key in the hidden data, a test suite, a
        grading script) that are not there, each as a short phrase; `proctor check` reports them
        so the task is fixed before a rollout scores 0 with a task error. Nested judges are
        walked by `judges_of`, not here."""
        return []


def judges_of(judge: Judge) -> Iterator[Judge]:
    """`judge` and every judge nested in it (Gate, AllOf, AnyOf, WeightedSum and the like)."""
    yield judge
    for name in type(judge).model_fields:
        yield from _nested(getattr(judge, name, None))


def _nested(value: object) -> Iterator[Judge]:
    if isinstance(value, Judge):
        yield from judges_of(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _nested(item)


def _clip(text: str, limit: int = EXPLANATION_CHARS) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 20] + " [... truncated]"


def _bounded_metadata(metadata: Any) -> tuple[dict[str, Any], str | None]:
    try:
        blob = json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return {}, f"metadata dropped: not plain JSON ({exc})"
    except RecursionError:
        return {}, "metadata dropped: nested too deeply"
    if len(blob) > METADATA_BYTES:
        return {"truncated": True, "bytes": len(blob)}, f"metadata dropped: {len(blob)} bytes, above the cap of {METADATA_BYTES}"
    return metadata, None


def sanitise(verdict: Any, judge: str) -> Verdict:
    """Whatever a judge returned, as a valid bounded Verdict (0 with the reason when it is not one)."""
    if isinstance(verdict, Verdict):
        raw = verdict.model_dump()
    elif isinstance(verdict, dict):
        raw = verdict
    else:
        return Verdict.zero(f"judge {judge} returned {type(verdict).__name__}, not a Verdict")
    score = raw.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) or not 0 <= score <= 1:
        return Verdict.zero(f"judge {judge} returned an invalid score {score!r} (a finite number in [0, 1] is required)")
    metadata, note = _bounded_metadata(raw.get("metadata") or {})
    explanation = _clip(raw.get("explanation") or "")
    if note:
        explanation = _clip(f"{explanation} [{note}]" if explanation else f"[{note}]")
    try:
        return Verdict(**{**raw, "metadata": metadata, "explanation": explanation})
    except ValidationError as exc:
        return Verdict.zero(f"judge {judge} returned a malformed verdict: {exc.errors(include_url=False)[0].get('msg')}")


def evaluate(judge: Judge, ctx: JudgeContext) -> Verdict:
    """Run one judge under its bound and return a sanitised Verdict; never raises, never hangs."""
    name = judge.describe()
    bound = judge.bound_s()
    ctx.deadline = min(ctx.deadline, time.monotonic() + bound)
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            with grading_watch.collecting() as events:
                # Bound before any student code runs, so the telemetry of every sandbox the judge
                # opens lands here (a judge's own sandbox is watched whatever its verdict says).
                box["events"] = events
                box["verdict"] = judge.grade(ctx)
        except RecursionError:
            box["error"] = "RecursionError (input nested too deeply)"
        except BaseException as exc:  # noqa: BLE001 - a judge may raise anything, even SystemExit
            box["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=work, name=f"proctor-judge-{name}", daemon=True)
    worker.start()
    worker.join(bound)
    if worker.is_alive():
        verdict = Verdict.zero(f"judge {name} did not finish within its bound of {bound:g}s")
    elif "error" in box:
        verdict = Verdict.zero(f"judge {name} crashed: {_clip(box['error'], 500)}")
    else:
        verdict = sanitise(box.get("verdict"), name)
    return _with_telemetry(verdict, list(box.get("events", ())))


def _with_telemetry(verdict: Verdict, events: list[MisbehaviourEvent]) -> Verdict:
    """The verdict with what the judge's sandboxes saw (grading_watch.py) added once each."""
    new = [e for e in events if not any(m.kind == e.kind and m.detail == e.detail for m in verdict.misbehaviour)]
    return verdict.model_copy(update={"misbehaviour": [*verdict.misbehaviour, *new]}) if new else verdict


class FunctionJudge(Judge):
    """A judge written as a plain function `fn(ctx) -> Verdict | float`, for tasks whose grading
    is a few lines of Python. A float is taken as the score."""

    fn: Any = Field(description="Callable taking a JudgeContext, returning a Verdict or a float score.")
    name: str = ""

    def grade(self, ctx: JudgeContext) -> Verdict:
        got = self.fn(ctx)
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            return sanitise({"score": got}, self.describe())
        return got

    def describe(self) -> str:
        return self.name or getattr(self.fn, "__name__", "function")
