"""Judges made of judges: `WeightedSum`, `AllOf`, `AnyOf` and `Gate`.

Every part runs through `evaluate`, on its own copy of the context, so a part that crashes, hangs
or returns garbage scores 0 with its reason instead of taking the whole verdict down, and a part
shrinking its deadline does not steal time from its siblings. What the parts say is kept:

- `infra_error` of any part that ran makes the whole verdict an infra error (an unusable grade
  of one part makes the combination unusable too: a masked rollout beats a wrong reward);
- misbehaviour events are concatenated; `continue_task` is False if any part says so;
- explanations are joined as `Part: explanation; ...` (each part clipped), and metadata is
  `{"parts": [{"judge", "score", ...}, ...]}`, with the parts' own metadata dropped when the
  whole would exceed the metadata cap.

The bound of a composite is the sum of its parts' bounds plus one second; its own `timeout_s`
is not used.

What composition does not do: it does not make a weak part strong. `AnyOf(RegexMatch(...),
RubricJudge(...))` is as easy to fool as the easier of the two."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import Field, model_validator

from .base import METADATA_BYTES, Judge, JudgeContext, Verdict, evaluate

__all__ = ["AllOf", "AnyOf", "Gate", "WeightedSum"]

_SLACK_S = 1.0
_PART_EXPLANATION_CHARS = 300
_PARTS_METADATA_BYTES = METADATA_BYTES * 3 // 4


def _run_part(judge: Judge, ctx: JudgeContext) -> Verdict:
    # A copy per part: `evaluate` shrinks ctx.deadline, and a part must not see a sibling's edits.
    child = dataclasses.replace(ctx, params=dict(ctx.params), misbehaviour=list(ctx.misbehaviour))
    return evaluate(judge, child)


def _clip(text: str, limit: int = _PART_EXPLANATION_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 5] + " [...]"


def _combine(score: float, parts: list[tuple[Judge, Verdict, dict[str, Any]]], *, explanation_prefix: str = "", **fields: Any) -> Verdict:
    """One verdict from the parts that ran: score given, everything else merged from the parts."""
    explanation = "; ".join(f"{judge.describe()}: {_clip(v.explanation or '(no explanation)')}" for judge, v, _ in parts)
    rows = [{"judge": judge.describe(), "score": v.score, **extra, **({"infra_error": True} if v.infra_error else {}), "metadata": v.metadata}
            for judge, v, extra in parts]
    if len(json.dumps(rows, default=str)) > _PARTS_METADATA_BYTES:
        rows = [{k: val for k, val in row.items() if k != "metadata"} for row in rows]
    verdict_fields: dict[str, Any] = {
        "infra_error": any(v.infra_error for _, v, _ in parts),
        "continue_task": all(v.continue_task for _, v, _ in parts),
        "misbehaviour": [event for _, v, _ in parts for event in v.misbehaviour],
    }
    verdict_fields.update(fields)
    return Verdict(score=min(1.0, max(0.0, score)), explanation=explanation_prefix + explanation, metadata={"parts": rows}, **verdict_fields)


class WeightedSum(Judge):
    """Score = sum(weight * score) / sum(weight) over all parts."""

    parts: tuple[tuple[Judge, float], ...] = Field(description="(judge, weight) pairs; weights finite and >= 0, their sum > 0.")

    @model_validator(mode="after")
    def _weights(self) -> WeightedSum:
        if not self.parts:
            raise ValueError("WeightedSum needs at least one (judge, weight) part")
        for i, (_, weight) in enumerate(self.parts):
            if not (weight >= 0 and weight != float("inf")):
                raise ValueError(f"WeightedSum: weight of part {i} is {weight!r}; weights must be finite and >= 0")
        if sum(w for _, w in self.parts) <= 0:
            raise ValueError("WeightedSum: the weights sum to 0; give at least one part a positive weight")
        return self

    def bound_s(self) -> float:
        return sum(judge.bound_s() for judge, _ in self.parts) + _SLACK_S

    def describe(self) -> str:
        return "WeightedSum"

    def grade(self, ctx: JudgeContext) -> Verdict:
        ran = [(judge, _run_part(judge, ctx), {"weight": weight}) for judge, weight in self.parts]
        total = sum(w for _, w in self.parts)
        return _combine(sum(w * v.score for (_, w), (_, v, _) in zip(self.parts, ran)) / total, ran)


class AllOf(Judge):
    """Every part must reach `threshold`; then the score is the lowest part's score, else 0.

    With the default threshold of 1.0 that is pass/fail: 1 only if every part scores 1. With
    threshold=0.0 it is simply the minimum. All parts run, so the explanation covers each."""

    judges: tuple[Judge, ...] = Field(min_length=1, description="The parts; all of them run.")
    threshold: float = Field(1.0, ge=0.0, le=1.0, description="A part scoring below this fails the whole.")

    def bound_s(self) -> float:
        return sum(judge.bound_s() for judge in self.judges) + _SLACK_S

    def describe(self) -> str:
        return "AllOf"

    def grade(self, ctx: JudgeContext) -> Verdict:
        ran = [(judge, _run_part(judge, ctx), {}) for judge in self.judges]
        low = min(v.score for _, v, _ in ran)
        if low < self.threshold:
            return _combine(0.0, ran, explanation_prefix=f"a part scored {low:g}, below the threshold {self.threshold:g}: ")
        return _combine(low, ran)


class AnyOf(Judge):
    """Score = the highest part's score. All parts run, so the explanation covers each."""

    judges: tuple[Judge, ...] = Field(min_length=1, description="The parts; all of them run.")

    def bound_s(self) -> float:
        return sum(judge.bound_s() for judge in self.judges) + _SLACK_S

    def describe(self) -> str:
        return "AnyOf"

    def grade(self, ctx: JudgeContext) -> Verdict:
        ran = [(judge, _run_part(judge, ctx), {}) for judge in self.judges]
        return _combine(max(v.score for _, v, _ in ran), ran)


class Gate(Judge):
    """`then` grades only if `gate` reaches `threshold`; otherwise the score is 0 and, with
    `stop_on_fail`, the rollout ends (`continue_task=False`). E.g. gate on "the tests compile"
    before an expensive rubric."""

    gate: Judge = Field(description="The judge that must pass first.")
    then: Judge = Field(description="The judge that gives the score once the gate passes.")
    threshold: float = Field(1.0, ge=0.0, le=1.0, description="The gate passes at this score or above.")
    stop_on_fail: bool = Field(True, description="A failed gate ends the rollout (later steps are not attempted).")

    def bound_s(self) -> float:
        return self.gate.bound_s() + self.then.bound_s() + _SLACK_S

    def describe(self) -> str:
        return "Gate"

    def grade(self, ctx: JudgeContext) -> Verdict:
        first = _run_part(self.gate, ctx)
        if first.score < self.threshold or first.infra_error:
            fields: dict[str, Any] = {"continue_task": False} if self.stop_on_fail else {}
            return _combine(0.0, [(self.gate, first, {"role": "gate"})],
                            explanation_prefix=f"gate not passed ({first.score:g} < {self.threshold:g}): " if not first.infra_error else "gate could not grade: ",
                            **fields)
        second = _run_part(self.then, ctx)
        return _combine(second.score, [(self.gate, first, {"role": "gate"}), (self.then, second, {"role": "then"})])
