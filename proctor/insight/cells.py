"""One cell of a report: the rollouts of one student on one (family, difficulty, parameters), folded
into running sums as they are read, so a report over any number of results holds one small
accumulator per cell and never the results themselves."""

from __future__ import annotations

import math
from collections import Counter
from statistics import NormalDist
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Verdict = Literal["weak", "frontier", "saturated", "too_few"]


class Thresholds(BaseModel):
    """When a cell is weak, frontier, saturated or too few to say (documented in docs/insight.md).

    A rollout passes when it completed with `score >= pass_score`. A cell with fewer than `min_n`
    scored rollouts is `too_few`; otherwise its pass rate decides: at most `weak_at_most` is `weak`
    (the student mostly fails), at least `saturated_at_least` is `saturated` (mastered), anything
    between is `frontier` (mixed: where RL learns most)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pass_score: float = Field(1.0, gt=0, le=1, description="Score a completed rollout needs to count as a pass.")
    min_n: int = Field(5, ge=1, description="Fewest scored rollouts (infra errors excluded) for a verdict other than too_few.")
    weak_at_most: float = Field(0.2, ge=0, lt=1, description="Pass rate at or below which a cell is weak.")
    saturated_at_least: float = Field(0.8, gt=0, le=1, description="Pass rate at or above which a cell is saturated.")
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the Wilson interval on the pass rate.")

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if self.weak_at_most >= self.saturated_at_least:
            raise ValueError(f"weak_at_most ({self.weak_at_most}) must be below saturated_at_least ({self.saturated_at_least})")
        return self

    def verdict(self, n: int, pass_rate: float) -> Verdict:
        if n < self.min_n:
            return "too_few"
        if pass_rate <= self.weak_at_most:
            return "weak"
        if pass_rate >= self.saturated_at_least:
            return "saturated"
        return "frontier"


def wilson_interval(passes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion. Unlike the normal approximation it stays
    inside [0, 1] and does not collapse to a point at 0 or n passes, which is exactly where a
    weak or saturated cell sits. With no rollouts it is the whole of [0, 1]."""
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = passes / n
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    return max(0.0, centre - half), min(1.0, centre + half)


class Cell(BaseModel):
    """One row of a report (what `proctor report --json` prints in `cells`)."""

    model_config = ConfigDict(extra="forbid")

    family: str | None = Field(description="The family (or the task id of a plain task); None when not grouped by family.")
    difficulty: int | None = Field(description="None when not grouped by difficulty, or for a plain task.")
    params: dict[str, Any] = Field(description="The grouped parameters and their values.")
    student: str | None = Field(description="The agent (script:NAME, oracle, model:NAME...); None when not grouped by student.")
    n: int = Field(description="Scored rollouts: completed or misbehaved (infra errors and abandoned ones excluded).")
    passes: int
    pass_rate: float
    ci: tuple[float, float] = Field(description="Wilson interval on the pass rate at the report's confidence.")
    mean_score: float
    misbehaviour_rate: float = Field(description="Share of scored rollouts whose status is misbehaved.")
    misbehaviour_kinds: dict[str, int] = Field(description="The most frequent misbehaviour kinds (up to 3), with their counts.")
    mean_tokens: float = Field(description="Input plus output model tokens per scored rollout.")
    mean_tool_calls: float
    mean_wall_s: float = Field(description="Wall time per scored rollout, start to teardown.")
    infra_errors: int = Field(description="Rollouts of this cell that ended infra_error or abandoned: counted apart, never scored.")
    verdict: Verdict


class CellStats:
    """Running sums of one cell."""

    __slots__ = ("n", "passes", "score", "misbehaved", "kinds", "tokens", "tool_calls", "wall_s", "infra")

    def __init__(self) -> None:
        self.n = self.passes = self.misbehaved = self.tokens = self.tool_calls = self.infra = 0
        self.score = self.wall_s = 0.0
        self.kinds: Counter[str] = Counter()

    def add(self, status: str, score: float, kinds: list[str], tokens: int, tool_calls: int, wall_s: float,
            pass_score: float) -> None:
        if status not in ("completed", "misbehaved"):
            self.infra += 1
            return
        self.n += 1
        # A misbehaved rollout never passes, whatever its judges gave (its score is 0 already).
        self.passes += status == "completed" and score >= pass_score - 1e-9
        self.score += score
        if status == "misbehaved":
            self.misbehaved += 1
            self.kinds.update(set(kinds))
        self.tokens += tokens
        self.tool_calls += tool_calls
        self.wall_s += wall_s

    def cell(self, key: dict[str, Any], thresholds: Thresholds) -> Cell:
        n = self.n
        rate = self.passes / n if n else 0.0
        return Cell(
            **key, n=n, passes=self.passes, pass_rate=rate, ci=wilson_interval(self.passes, n, thresholds.confidence),
            mean_score=self.score / n if n else 0.0, misbehaviour_rate=self.misbehaved / n if n else 0.0,
            misbehaviour_kinds=dict(sorted(self.kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:3]),
            mean_tokens=self.tokens / n if n else 0.0, mean_tool_calls=self.tool_calls / n if n else 0.0,
            mean_wall_s=self.wall_s / n if n else 0.0, infra_errors=self.infra, verdict=thresholds.verdict(n, rate),
        )
