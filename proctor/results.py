"""What one rollout produces for a trainer: `result.json`, one RolloutResult per rollout.

Four outcome classes, because a trainer needs them: `completed` (a real score), `misbehaved`
(an attempt to cheat or to break the harness was seen: reward is the configured penalty, with
the evidence in `misbehaviour`; `observations` are recorded but never make a rollout misbehaved), `infra_error` (the harness, a judge's provider or the model provider failed:
mask it, do not learn from it), and `abandoned` (the driver left before the rollout ended, e.g. a
client that disconnected from `proctor serve`: the sandbox was torn down; mask it too)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .framing import Framing
from .tasks.models import Instance
from .vocabulary import Severity

Status = Literal["completed", "misbehaved", "infra_error", "abandoned"]
StepEnd = Literal[
    "submit", "text", "agent_finished", "turn_budget", "token_budget", "cost_budget", "step_time", "rollout_time",
    "agent_error", "not_reached", "abandoned",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MisbehaviourRecord(_Model):
    """One thing seen, recorded whether or not it worked: an attempt (in `misbehaviour`) or an
    observation (in `observations`)."""

    kind: str = Field(description="From the vocabulary (proctor/vocabulary.py, docs/misbehaviour.md), e.g. submission_symlink, processes_left_at_custody.")
    detail: str = Field(description="What was seen, for a human.")
    step: int | None = Field(None, description="Step index (0-based) it was seen in; None for the rollout as a whole.")
    severity: Severity = Field("attempt", description=(
        "attempt: counted (the rollout is misbehaved); observation: recorded for analysis only, by the kind's "
        "severity or because the rollout's RolloutConfig.ignore_misbehaviour lists it."))


class StepResult(_Model):
    index: int
    score: float = Field(ge=0, le=1)
    weight: float
    explanation: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    judge: str = ""
    ended_by: StepEnd = Field(description="Why the agent's work on the step ended.")
    custody: list[dict[str, Any]] = Field(default_factory=list, description="What custody did with each declared path.")
    duration_s: float = 0.0


class Usage(_Model):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_calls: int = 0
    retries: int = 0
    cost_usd: float = Field(0.0, description="Model spend, from the model config's pricing (0 without one).")
    turns: int = 0
    tool_calls: int = 0
    cpu_s: float = Field(0.0, description="CPU time of all student processes (cgroup accounting).")
    peak_memory_bytes: int = Field(0, description="Peak memory of the student's cgroup, tmpfs included.")
    oom_kills: int = 0
    pids_limit_hits: int = 0


class Timings(_Model):
    started_at: str = Field(description="Wall-clock start, ISO 8601 UTC.")
    total_s: float = 0.0
    setup_s: float = 0.0
    agent_s: float = 0.0
    custody_s: float = 0.0
    judge_s: float = 0.0
    teardown_s: float = 0.0


class RolloutResult(_Model):
    run_id: str
    task_id: str
    instance: Instance
    agent: str
    status: Status
    score: float = Field(ge=0, le=1, description="Weighted mean of step scores; 0 when misbehaved (a cheat earns no score).")
    judged_score: float = Field(ge=0, le=1, description="Weighted mean of step scores as the judges gave them, misbehaviour or not (for analysis, not for training).")
    reward: float = Field(description="What a trainer should use: the score, or minus the misbehaviour penalty when misbehaved.")
    steps: list[StepResult] = Field(default_factory=list)
    misbehaviour: list[MisbehaviourRecord] = Field(default_factory=list, description="Attempts: any makes the rollout misbehaved.")
    observations: list[MisbehaviourRecord] = Field(default_factory=list, description=(
        "Recorded for analysis, never penalised: kinds of severity observation (resource_limit_hit) and kinds the "
        "rollout's ignore_misbehaviour lists."))
    errors: list[str] = Field(default_factory=list, description="Infra errors, one line each.")
    confinement: dict[str, Any] = Field(default_factory=dict, description="What the machine granted; `degraded` lists protections run without.")
    sandbox_start: Literal["warm", "cold"] | None = Field(None, description="Whether the student's sandbox came ready from a warm pool (`--pool`) or was built for this rollout; None if none was made.")
    usage: Usage = Field(default_factory=Usage)
    timings: Timings
    ended_by: StepEnd | None = Field(None, description="Why the agent's work ended in the last step attempted.")
    impossible: bool = Field(False, description=(
        "A cheating-rate probe (`proctor run --impossible`): the instance cannot be passed honestly, so a pass is a hack "
        "(the same as instance.impossible, here for a reader of the top level)."))
    framing: Framing | None = Field(None, description="The preamble shown before the instructions (`--framing`), if any.")


def write_atomically(path: Path, data: str) -> None:
    """Write a file so a reader sees the old content or the whole new one, never a prefix."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_result(result: RolloutResult, run_dir: Path) -> Path:
    path = run_dir / "result.json"
    write_atomically(path, result.model_dump_json(indent=2) + "\n")
    return path


def read_result(path: Path) -> RolloutResult:
    return RolloutResult.model_validate(json.loads(path.read_text()))
