"""One rollout end to end: outcomes, budgets, deadlines, steps, hooks, judges that fail, and what
the result and the transcript record. What the sandbox confines runs through the real sandbox
(`out`); what the harness decides runs on the fake backend (`fake_rollout`), without root."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest

from proctor import Script
from proctor.harness import RolloutConfig
from proctor.results import read_result
from proctor.tasks import salts
from proctor.testing import rollout
from proctor.transcript import read_transcript

BASICS = Path(__file__).parent / "envs" / "basics"
EXAMPLE = Path(__file__).parent.parent / "examples" / "quarterly_revenue"


def script(*turns) -> Script:
    out = []
    for turn in turns:
        if isinstance(turn, str):
            out.append({"tool": "bash", "arguments": {"command": turn}})
        else:
            out.append(turn)
    return Script(name="test", turns=out)


SUBMIT = {"tool": "submit", "arguments": {}}


@pytest.fixture
def out(confinement, tmp_path):
    return tmp_path


@pytest.fixture
def fake_rollout(fake_backend):
    """rollout() on the fake backend: for what the harness decides (budgets, steps, judges,
    results), not for what the sandbox confines, which the tests on `out` check for real."""
    return functools.partial(rollout, backend=fake_backend)


def test_the_oracle_of_the_example_scores_one_and_the_result_has_every_field(out):
    result = rollout(EXAMPLE, "q3-revenue", "oracle", out)
    assert (result.status, result.score, result.reward) == ("completed", 1.0, 1.0)
    on_disk = read_result(out / result.run_id / "result.json")
    assert on_disk == result
    raw = (out / result.run_id / "result.json").read_text()
    for key in ("run_id", "task_id", "instance", "status", "score", "reward", "steps", "misbehaviour",
                "confinement", "usage", "timings"):
        assert f'"{key}"' in raw
    assert result.confinement["protections"]["memory_limit"] == "enforced"
    assert result.usage.tool_calls == 2 and result.usage.peak_memory_bytes > 0


def test_the_transcript_records_each_event_in_order(out):
    result = rollout(EXAMPLE, "q3-revenue", "oracle", out)
    events = read_transcript(out / result.run_id / "transcript.jsonl")
    types = [e["type"] for e in events]
    assert types == ["rollout_start", "step_start", "model_turn", "tool_result", "model_turn", "tool_result",
                     "custody", "score", "rollout_end"]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[0]["instance"]["task_id"] == "q3-revenue" and "protections" in events[0]["confinement"]
    assert events[3]["result"]["output"].strip() == "37087"


def test_a_wrong_answer_scores_zero_without_being_misbehaviour(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(EXAMPLE, "q3-revenue", script("echo 1 > /workdir/answer.txt", SUBMIT), out)
    assert (result.status, result.score, result.misbehaviour) == ("completed", 0.0, [])


@pytest.mark.parametrize("command, kind", [
    ("ln -s /etc/passwd /workdir/answer.txt", "submission_symlink"),
    ("mkfifo /workdir/answer.txt", "submission_special_file"),
    ("echo 1 > /workdir/answer.txt; setsid sh -c 'while :; do echo 37087 > /workdir/answer.txt; sleep 0.05; done' >/dev/null 2>&1 </dev/null &",
     "processes_left_at_custody"),
])
def test_each_demo_hack_scores_zero_and_is_flagged(out, command, kind):
    result = rollout(EXAMPLE, "q3-revenue", script(command, SUBMIT), out)
    assert result.status == "misbehaved" and result.score == 0.0 and result.reward == 0.0
    assert kind in [m.kind for m in result.misbehaviour]
    assert all(m.step == 0 for m in result.misbehaviour)


def test_what_the_background_rewriter_writes_after_the_step_is_never_graded(out):
    # It writes the right answer every 10 ms once the step has ended: custody kills it and
    # proves the sandbox empty, and a change after the end means nothing is graded.
    command = "setsid sh -c 'sleep 0.3; while :; do echo 37087 > /workdir/answer.txt; sleep 0.01; done' >/dev/null 2>&1 </dev/null &"
    result = rollout(EXAMPLE, "q3-revenue", script("echo 0 > /workdir/answer.txt", command, SUBMIT), out)
    assert [m.kind for m in result.misbehaviour] == ["processes_left_at_custody"]
    assert result.score == 0.0 and "changed /workdir/answer.txt after the step ended" in result.steps[0].explanation


def test_a_misbehaviour_penalty_becomes_a_negative_reward(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(EXAMPLE, "q3-revenue", script("mkfifo /workdir/answer.txt", SUBMIT), out,
                     config=RolloutConfig(misbehaviour_penalty=0.5))
    assert result.status == "misbehaved" and result.reward == -0.5


def test_a_connection_attempt_to_the_internet_is_recorded_as_network_blocked(out):
    probe = "python3 -c \"import socket; s = socket.socket(); s.settimeout(1); print(s.connect_ex(('192.0.2.1', 80)))\""
    result = rollout(BASICS, "write-42", script(probe, "echo 42 > /workdir/answer.txt", SUBMIT), out)
    assert [m.kind for m in result.misbehaviour] == ["network_blocked"]
    ignored = rollout(BASICS, "write-42", script(probe, "echo 42 > /workdir/answer.txt", SUBMIT), out,
                      config=RolloutConfig(ignore_misbehaviour=("network_blocked",)))
    # Ignored: still recorded, as an observation (never lost), not counted.
    assert ignored.status == "completed" and ignored.reward == 1.0 and not ignored.misbehaviour
    assert [(m.kind, m.severity) for m in ignored.observations] == [("network_blocked", "observation")]


def test_a_rollout_past_its_deadline_ends_with_a_result(tmp_path, fake_rollout):
    out = tmp_path
    started = time.monotonic()
    result = fake_rollout(BASICS, "short-deadline", script("echo 42 > /workdir/answer.txt; sleep 30", SUBMIT), out)
    assert time.monotonic() - started < 10
    assert result.ended_by == "rollout_time" and result.status == "completed"
    # The running call was cut at the deadline; what was written before it still counts.
    assert result.score == 1.0
    events = read_transcript(out / result.run_id / "transcript.jsonl")
    cut = [e for e in events if e["type"] == "tool_result"][0]["result"]
    assert cut["timed_out"] and cut["duration_s"] < 4


def test_a_step_past_its_time_is_scored_and_the_next_step_runs(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "short-step", script("echo 1 > /workdir/answer.txt; sleep 20", "echo 2 > /workdir/answer.txt", SUBMIT), out)
    assert [s.ended_by for s in result.steps] == ["step_time", "submit"]
    assert [s.score for s in result.steps] == [1.0, 1.0]


def test_the_second_step_continues_from_the_first_steps_workdir_with_a_fresh_shell(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "two-steps", script(
        "echo 1 > /workdir/answer.txt; export MARK=set", SUBMIT,
        "test -z \"$MARK\" && test \"$(cat /workdir/answer.txt)\" = 1 && echo 2 > /workdir/answer.txt", SUBMIT), out)
    assert [s.score for s in result.steps] == [1.0, 1.0] and result.score == 1.0


def test_a_failed_gate_stops_the_task(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "gated", script("echo 0 > /workdir/answer.txt", SUBMIT, "echo 2 > /workdir/answer.txt", SUBMIT), out)
    assert [s.ended_by for s in result.steps] == ["submit", "not_reached"] and result.score == 0.0


def test_the_turn_budget_ends_the_step_and_it_is_still_scored(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "three-turns", script("echo 42 > /workdir/answer.txt", "true", "true", "true", SUBMIT), out)
    assert result.ended_by == "turn_budget" and result.usage.turns == 3 and result.score == 1.0


def test_an_agent_that_does_nothing_scores_zero(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(EXAMPLE, "q3-revenue", "null", out)
    assert result.status == "completed" and result.score == 0.0 and result.ended_by == "agent_finished"


def test_a_text_turn_ends_the_step_and_is_the_final_answer(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "write-42", script("echo 42 > /workdir/answer.txt", {"text": "I am done."}), out)
    assert result.steps[0].ended_by == "text" and result.score == 1.0


def test_a_malformed_tool_call_gets_an_error_result_and_the_rollout_goes_on(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "write-42", script({"tool": "no_such_tool", "arguments": {}},
                                                {"tool": "bash", "arguments": {"command": 42}},
                                                "echo 42 > /workdir/answer.txt", SUBMIT), out)
    assert result.score == 1.0
    errors = [e["result"]["error"] for e in read_transcript(out / result.run_id / "transcript.jsonl") if e["type"] == "tool_result"]
    assert "no tool named 'no_such_tool'" in errors[0] and "command" in errors[1]


@pytest.mark.parametrize("task, reason", [
    ("crashing-judge", "crashed: RuntimeError: the grader fell over"),
    ("hanging-judge", "did not finish within its bound of 1s"),
    ("nan-judge", "invalid score nan"),
])
def test_a_judge_that_fails_scores_zero_with_the_reason_not_an_infra_error(tmp_path, fake_rollout, task, reason):
    out = tmp_path
    started = time.monotonic()
    result = fake_rollout(BASICS, task, script("echo 42 > /workdir/answer.txt", SUBMIT), out)
    assert result.status == "completed" and result.score == 0.0
    assert reason in result.steps[0].explanation
    assert time.monotonic() - started < 10


def test_a_judge_reporting_an_infra_error_makes_the_rollout_an_infra_error(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "infra-judge", script(SUBMIT), out)
    assert result.status == "infra_error" and result.reward == 0.0
    assert any("provider down" in e for e in result.errors)


def test_a_missing_runtime_package_is_an_infra_error_naming_the_fix(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "needs-a-package", "null", out)
    assert result.status == "infra_error"
    assert "surely-not-installed-pkg" in result.errors[0] and "runtime-requirements.txt" in result.errors[0]


def test_a_before_hook_runs_in_the_sandbox_before_the_step(tmp_path, fake_rollout):
    out = tmp_path
    result = fake_rollout(BASICS, "hooked", script("echo $(( $(cat /workdir/hint.txt) + 1 )) > /workdir/answer.txt", SUBMIT), out)
    assert result.score == 1.0


def test_starter_files_are_copied_into_the_workdir_owned_by_the_student(out):
    result = rollout(BASICS, "starter-files", script("test -O /workdir/answer.txt && echo mine", SUBMIT), out)
    assert result.score == 1.0
    events = read_transcript(out / result.run_id / "transcript.jsonl")
    assert [e for e in events if e["type"] == "tool_result"][0]["result"]["output"].strip() == "mine"


def test_a_family_instance_is_recorded_and_rebuilt_identically_from_it(tmp_path, fake_rollout):
    out = tmp_path
    first = fake_rollout(BASICS, "sum", "null", out, seed=3, difficulty=2)
    assert first.instance.model_dump() == {"task_id": "sum-3-2", "family": "sum", "seed": 3, "difficulty": 2,
                                           "params": {"count": 5, "numbers": 10}, "varied": (), "key_fingerprint": salts.key_fingerprint(),
                                           "impossible": False}
    oracle = script("python3 -c \"print(sum(int(l) for l in open('/data/numbers.txt')))\" > /workdir/answer.txt", SUBMIT)
    again = fake_rollout(BASICS, "sum", oracle, out, seed=first.instance.seed, difficulty=first.instance.difficulty,
                    params={"count": 5})
    assert again.task_id == first.task_id and again.score == 1.0
