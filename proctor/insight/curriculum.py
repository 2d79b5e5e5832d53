"""`proctor curriculum`: the loop closed. Each round generates instances aimed by every earlier
round's rollouts (the first, with nothing to aim by, spreads over the family's space), gates them,
runs them with the student, and keeps its own report, so a user can watch the failure share move:

    OUT/curriculum.json              one line of numbers per round (the Curriculum model)
    OUT/round-01/instances.jsonl     what the round ran (`proctor run --instances` reruns it)
    OUT/round-01/runs/<run_id>/      the student's rollouts
    OUT/round-01/gate/<run_id>/      the validity gate's oracle and null rollouts
    OUT/round-01/report.json         the round's own report (`proctor report OUT` pools every round)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..agents.model_config import ModelConfig
from ..errors import ConfigError
from ..harness import RolloutConfig
from ..results import write_atomically
from ..runner import run_instances
from ..sandbox.backend import SandboxBackend
from ..tasks.loading import Environment
from .cells import Thresholds
from .generate import Strategy, generate_instances, report_by
from .report import build_report

SUMMARY = "curriculum.json"


class Round(BaseModel):
    """One round's numbers."""

    model_config = ConfigDict(extra="forbid")

    round: int
    instances: int = Field(description="Instances written by generate (after the gate).")
    rejected: int = Field(description="Instances the validity gate rejected (reasons in the round's gate.json).")
    scored: int
    passes: int
    failure_share: float = Field(description="Share of scored rollouts that did not pass.")
    misbehaviour_rate: float
    infra_errors: int
    verdicts: dict[str, int] = Field(description="Cells of the round's report by verdict.")
    directory: str


class Curriculum(BaseModel):
    model_config = ConfigDict(extra="forbid")

    family: str
    agent: str
    rounds: list[Round]


def round_dir(out: Path, index: int) -> Path:
    return out / f"round-{index:02d}"


def run_curriculum(
    env: Environment, family_id: str, agent_spec: str, out_dir: str | Path, *, rounds: int, per_round: int, seed: int = 0,
    strategy: Strategy = "targeted", validate: bool | None = None, thresholds: Thresholds | None = None, parallel: int = 1,
    config: RolloutConfig | None = None, model: ModelConfig | None = None, backend: SandboxBackend | None = None,
    on_round: Callable[[Round], None] | None = None,
) -> Curriculum:
    if family_id not in env.families:
        raise ConfigError(f"{env.name}: unknown family {family_id!r}; known: {', '.join(sorted(env.families)) or 'none'}")
    if rounds < 1 or per_round < 1:
        raise ConfigError("--rounds and --per-round must be at least 1")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out}: not empty; a curriculum starts in a new directory")
    out.mkdir(parents=True, exist_ok=True)
    thresholds = thresholds or Thresholds()
    config = config or RolloutConfig()
    family = env.families[family_id]
    summary = Curriculum(family=family_id, agent=agent_spec, rounds=[])
    for index in range(1, rounds + 1):
        here = round_dir(out, index)
        here.mkdir()
        earlier = [round_dir(out, i) / "runs" for i in range(1, index) if (round_dir(out, i) / "runs").is_dir()]
        made = generate_instances(env, family_id, earlier, n=per_round, seed=seed * 1000 + index, out=here / "instances.jsonl",
                                  strategy=strategy, validate=validate, gate_out=here / "gate", thresholds=thresholds,
                                  parallel=parallel, runtime=config.runtime, backend=backend)
        write_atomically(here / "gate.json", made.model_dump_json(indent=2) + "\n")
        runs = here / "runs"
        runs.mkdir()
        if made.written:
            run_instances(env, made.written, agent_spec, runs, config=config, parallel=parallel, model=model, backend=backend)
        report = build_report([runs], by=report_by(family), thresholds=thresholds, family=family_id)
        write_atomically(here / "report.json", report.model_dump_json(indent=2) + "\n")
        passes = sum(c.passes for c in report.cells)
        misbehaved = sum(round(c.misbehaviour_rate * c.n) for c in report.cells)
        verdicts: dict[str, int] = {}
        for c in report.cells:
            verdicts[c.verdict] = verdicts.get(c.verdict, 0) + 1
        row = Round(round=index, instances=len(made.written), rejected=sum(not c.accepted for c in made.checked),
                    scored=report.scored, passes=passes, failure_share=1 - passes / report.scored if report.scored else 0.0,
                    misbehaviour_rate=misbehaved / report.scored if report.scored else 0.0, infra_errors=report.infra_errors,
                    verdicts=verdicts, directory=str(here))
        summary.rounds.append(row)
        write_atomically(out / SUMMARY, summary.model_dump_json(indent=2) + "\n")
        if on_round:
            on_round(row)
    return summary


def read_curriculum(directory: str | Path) -> Curriculum | None:
    """The summary of a curriculum directory, or None when it is not one (or not readable)."""
    path = Path(directory) / SUMMARY
    try:
        return Curriculum.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None
