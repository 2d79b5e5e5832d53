"""Runs of known outcomes for the insight tests, written through the real result models
(proctor/results.py), so a report reads exactly what a rollout writes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from proctor.results import MisbehaviourRecord, RolloutResult, Timings, Usage, write_result
from proctor.tasks import load_environment
from proctor.tasks.models import Instance

ENV = str(Path(__file__).parent / "envs" / "insight")
# Sums only the first six numbers: right while count x difficulty <= 6, wrong beyond.
MEDIOCRE = {"name": "mediocre", "turns": [
    {"tool": "bash", "arguments": {"command": "python3 -c \"print(sum(int(l) for l in open('/data/numbers.txt').readlines()[:6]))\" > /workdir/answer.txt"}},
    {"tool": "submit", "arguments": {}}]}


@pytest.fixture(scope="module")
def env():
    return load_environment(ENV)


@pytest.fixture
def mediocre(tmp_path) -> str:
    path = tmp_path / "mediocre.json"
    path.write_text(json.dumps(MEDIOCRE))
    return f"script:{path}"

_ids = itertools.count()


def write_run(out: Path, *, family: str = "sum", difficulty: int = 1, params: dict[str, Any] | None = None,
              varied: tuple[str, ...] = ("count",), seed: int | None = None, agent: str = "script:mediocre",
              status: str = "completed", score: float = 1.0, kinds: tuple[str, ...] = (), tokens: int = 0,
              tool_calls: int = 0, wall_s: float = 1.0, impossible: bool = False) -> Path:
    """One rollout's result.json under OUT/<run_id>/, as the harness writes it."""
    i = next(_ids)
    run_id = f"{family}-{i}"
    seed = i if seed is None else seed
    instance = Instance(task_id=f"{family}-{seed}-{difficulty}", family=family, seed=seed, difficulty=difficulty,
                        params=dict(params or {}), varied=varied, impossible=impossible)
    result = RolloutResult(
        run_id=run_id, task_id=instance.task_id, instance=instance, agent=agent, status=status, score=score,
        judged_score=score, reward=score, misbehaviour=[MisbehaviourRecord(kind=k, detail="seen") for k in kinds],
        errors=["provider down"] if status == "infra_error" else [],
        usage=Usage(input_tokens=tokens // 2, output_tokens=tokens - tokens // 2, tool_calls=tool_calls),
        timings=Timings(started_at="2026-01-01T00:00:00Z", total_s=wall_s), impossible=impossible,
    )
    run_dir = out / run_id
    run_dir.mkdir(parents=True)
    return write_result(result, run_dir)


def write_known_outcomes(out: Path, *, agent: str = "script:mediocre", per_cell: int = 10) -> None:
    """A student that always solves count=3, never count=8, and half the time count=5 (difficulty 1)."""
    for i in range(per_cell):
        write_run(out, params={"count": 3}, agent=agent, score=1.0)
        write_run(out, params={"count": 8}, agent=agent, score=0.0)
        write_run(out, params={"count": 5}, agent=agent, score=1.0 if i % 2 == 0 else 0.0)
