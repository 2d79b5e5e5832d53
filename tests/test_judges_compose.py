"""Composite judges: each part is evaluated on its own, failures stay contained, flags propagate."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from proctor.custody import MisbehaviourEvent
from proctor.judges.base import FunctionJudge, JudgeContext, Verdict, evaluate
from proctor.judges.compose import AllOf, AnyOf, Gate, WeightedSum


def const(score: float, name: str = "", **fields) -> FunctionJudge:
    return FunctionJudge(fn=lambda ctx: Verdict(score=score, explanation=f"gave {score}", **fields), name=name or f"const{score}")


def crash(ctx):
    raise RuntimeError("boom")


def hang(ctx):
    time.sleep(30)


CRASH = FunctionJudge(fn=crash)
HANG = FunctionJudge(fn=hang, timeout_s=0.5)


def grade(judge, tmp_path):
    return evaluate(judge, JudgeContext(submission=tmp_path))


def test_a_weighted_sum_averages_by_weight(tmp_path):
    verdict = grade(WeightedSum(parts=((const(1.0), 3.0), (const(0.0), 1.0))), tmp_path)
    assert verdict.score == pytest.approx(0.75)
    assert [p["weight"] for p in verdict.metadata["parts"]] == [3.0, 1.0]
    assert "const1.0: gave 1.0" in verdict.explanation and "const0.0: gave 0.0" in verdict.explanation


def test_a_zero_weight_part_runs_but_does_not_count(tmp_path):
    assert grade(WeightedSum(parts=((const(1.0), 1.0), (const(0.0), 0.0))), tmp_path).score == 1.0


@pytest.mark.parametrize("parts", [(), ((const(1.0), -1.0),), ((const(1.0), 0.0),), ((const(1.0), float("nan")),), ((const(1.0), float("inf")),)])
def test_bad_weights_are_refused_when_the_task_is_built(parts):
    with pytest.raises(ValidationError, match="WeightedSum"):
        WeightedSum(parts=parts)


def test_a_crashing_part_scores_zero_and_its_siblings_still_count(tmp_path):
    verdict = grade(WeightedSum(parts=((const(1.0), 1.0), (CRASH, 1.0))), tmp_path)
    assert verdict.score == pytest.approx(0.5)
    assert "boom" in verdict.explanation and not verdict.infra_error


def test_a_hanging_part_is_cut_at_its_own_bound_and_its_sibling_still_grades(tmp_path):
    start = time.monotonic()
    verdict = grade(AnyOf(judges=(HANG, const(0.8))), tmp_path)
    assert verdict.score == pytest.approx(0.8)
    assert "did not finish within its bound" in verdict.explanation
    assert time.monotonic() - start < 3


def test_the_bound_of_a_composite_is_the_sum_of_its_parts(tmp_path):
    judge = WeightedSum(parts=((const(1.0).model_copy(update={"timeout_s": 5}), 1.0), (HANG, 1.0)))
    assert judge.bound_s() == pytest.approx(5 + 0.5 + 1.0)
    assert Gate(gate=HANG, then=HANG).bound_s() == pytest.approx(2.0)


def test_a_part_shrinking_its_deadline_does_not_shrink_its_siblings(tmp_path):
    seen = []

    def record(ctx):
        seen.append(ctx.time_left())
        return 1.0

    probe = FunctionJudge(fn=record, timeout_s=30)
    short = FunctionJudge(fn=lambda ctx: 1.0, timeout_s=0.5)
    grade(AllOf(judges=(short, probe)), tmp_path)
    assert seen and seen[0] > 20


def test_all_of_with_the_default_threshold_is_pass_fail(tmp_path):
    assert grade(AllOf(judges=(const(1.0), const(1.0))), tmp_path).score == 1.0
    verdict = grade(AllOf(judges=(const(1.0), const(0.9))), tmp_path)
    assert verdict.score == 0.0 and "below the threshold 1" in verdict.explanation


def test_all_of_with_threshold_zero_is_the_minimum(tmp_path):
    assert grade(AllOf(judges=(const(0.7), const(0.4)), threshold=0.0), tmp_path).score == pytest.approx(0.4)
    assert grade(AllOf(judges=(const(0.7), const(0.6)), threshold=0.5), tmp_path).score == pytest.approx(0.6)
    assert grade(AllOf(judges=(const(0.7), const(0.4)), threshold=0.5), tmp_path).score == 0.0


def test_any_of_is_the_maximum(tmp_path):
    assert grade(AnyOf(judges=(const(0.2), const(0.6), CRASH)), tmp_path).score == pytest.approx(0.6)


def test_an_infra_error_in_any_part_makes_the_whole_an_infra_error(tmp_path):
    broken = const(0.0, name="broken", infra_error=True)
    for judge in (WeightedSum(parts=((const(1.0), 1.0), (broken, 1.0))), AllOf(judges=(const(1.0), broken), threshold=0.0),
                  AnyOf(judges=(const(1.0), broken)), Gate(gate=broken, then=const(1.0)), Gate(gate=const(1.0), then=broken)):
        verdict = grade(judge, tmp_path)
        assert verdict.infra_error, judge.describe()


def test_misbehaviour_from_all_parts_is_kept(tmp_path):
    a = const(1.0, name="a", misbehaviour=[MisbehaviourEvent(kind="judge_tampering", detail="edited the tests")])
    b = const(1.0, name="b", misbehaviour=[MisbehaviourEvent(kind="judge_tampering", detail="wrote conftest.py")])
    verdict = grade(AllOf(judges=(a, b)), tmp_path)
    assert [e.detail for e in verdict.misbehaviour] == ["edited the tests", "wrote conftest.py"]


def test_a_failed_gate_scores_zero_and_stops_the_task(tmp_path):
    ran = []
    then = FunctionJudge(fn=lambda ctx: ran.append(1) or 1.0, name="then")
    verdict = grade(Gate(gate=const(0.5), then=then), tmp_path)
    assert verdict.score == 0.0 and not verdict.continue_task and not ran
    assert "gate not passed" in verdict.explanation


def test_a_failed_gate_without_stop_on_fail_lets_the_task_continue(tmp_path):
    verdict = grade(Gate(gate=const(0.5), then=const(1.0), stop_on_fail=False), tmp_path)
    assert verdict.score == 0.0 and verdict.continue_task


def test_a_passed_gate_gives_the_then_score(tmp_path):
    verdict = grade(Gate(gate=const(1.0), then=const(0.3)), tmp_path)
    assert verdict.score == pytest.approx(0.3) and verdict.continue_task
    assert [p["role"] for p in verdict.metadata["parts"]] == ["gate", "then"]
    assert grade(Gate(gate=const(0.6), then=const(0.3), threshold=0.5), tmp_path).score == pytest.approx(0.3)


def test_a_crashing_gate_scores_zero(tmp_path):
    verdict = grade(Gate(gate=CRASH, then=const(1.0)), tmp_path)
    assert verdict.score == 0.0 and "boom" in verdict.explanation


def test_large_part_metadata_is_dropped_but_scores_are_kept(tmp_path):
    big = FunctionJudge(fn=lambda ctx: Verdict(score=1.0, metadata={"blob": "x" * 10_000}), name="big")
    verdict = grade(AllOf(judges=(big, big)), tmp_path)
    assert verdict.score == 1.0
    assert all("metadata" not in p and p["score"] == 1.0 for p in verdict.metadata["parts"])


def test_many_long_explanations_stay_bounded(tmp_path):
    wordy = FunctionJudge(fn=lambda ctx: Verdict(score=0.5, explanation="w" * 5000), name="wordy")
    verdict = grade(AnyOf(judges=(wordy,) * 20), tmp_path)
    assert verdict.score == 0.5 and len(verdict.explanation) <= 2000


def test_composites_nest(tmp_path):
    inner = AnyOf(judges=(const(0.0), const(1.0)))
    verdict = grade(WeightedSum(parts=((inner, 1.0), (const(0.5), 1.0))), tmp_path)
    assert verdict.score == pytest.approx(0.75)
