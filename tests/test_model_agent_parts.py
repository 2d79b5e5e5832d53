"""The parts of the model-driven agent that need no sandbox: retry rules, backoff, pruning, and
the provider formats (multi-step pairing, reasoning passback, odd replies) over loopback HTTP."""

from __future__ import annotations

import json
import random
from pathlib import Path
from email.utils import format_datetime
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fake_provider import Fail, FakeProvider, Raw, Reply, anthropic_reply, openai_reply
from proctor.agents import ModelAgent, ModelConfig, Observation
from proctor.agents.conversation import AssistantTurn, Call, History, ToolOutput, UserText, prune
from proctor.agents.model_config import ContextPolicy, RetryPolicy
from proctor.agents.retry import backoff_s, retry_after_s

TOOLS = [{"name": "bash", "description": "run", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
         {"name": "submit", "description": "done", "parameters": {"type": "object", "properties": {}}}]


def _agent(server: FakeProvider, provider: str = "openai", **fields) -> ModelAgent:
    url = server.anthropic_url if provider == "anthropic" else server.openai_url
    agent = ModelAgent(ModelConfig(provider=provider, model="m", base_url=url, retry={"base_delay_s": 0.01}, **fields))
    agent.begin(system_prompt="sys", tools=TOOLS, task_id="t")
    return agent


def _far() -> float:
    import time

    return time.monotonic() + 60


# -- retry rules -----------------------------------------------------------------------------------

def test_retry_after_in_seconds_milliseconds_and_http_dates():
    assert retry_after_s({"retry-after": "2.5"}) == 2.5
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    when = datetime.now(timezone.utc) + timedelta(seconds=30)
    assert 25 <= retry_after_s({"retry-after": format_datetime(when, usegmt=True)}) <= 31
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({}) is None


@given(retry=st.integers(1, 30), base=st.floats(0, 5), cap=st.floats(0, 120), after=st.none() | st.floats(0, 100), seed=st.integers())
def test_backoff_is_jittered_bounded_and_never_shorter_than_retry_after(retry, base, cap, after, seed):
    policy = RetryPolicy(base_delay_s=base, max_delay_s=cap)
    wait = backoff_s(retry, policy, random.Random(seed), after)
    ceiling = min(cap, base * 2 ** (retry - 1))
    assert 0 <= wait <= max(ceiling, after or 0)
    if after is not None:
        assert wait >= after


def test_anthropic_overloaded_is_retried_and_a_non_object_tool_input_is_malformed():
    script = [Fail(529, "Overloaded"), anthropic_reply(tool="bash", arguments=["not", "an", "object"])]
    with FakeProvider(script) as server:
        agent = _agent(server, "anthropic")
        turn = agent.next_turn([Observation(kind="instructions", text="go")], deadline=_far())
        assert turn.usage.retries == 1 and turn.extra["retries"][0]["status"] == 529
        [call] = turn.tool_calls
        assert call.malformed and "JSON object" in call.malformed and call.arguments == {}
        # The next request sends {} for that call, so the provider is not asked to re-read it.
        server.script.append(anthropic_reply(text="ok"))
        agent.next_turn([Observation(kind="tool_result", text="[error] malformed", call_id=call.id, tool="bash")], deadline=_far())
        sent = server.requests[-1].body["messages"][1]["content"]
        assert sent[0]["input"] == {}
        agent.close()


# -- multi-step pairing and reasoning passback --------------------------------------------------

@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_call_that_ended_the_step_is_answered_before_the_next_step(provider):
    reply = openai_reply if provider == "openai" else anthropic_reply
    with FakeProvider([reply(tool="submit"), reply(text="step two done")]) as server:
        agent = _agent(server, provider)
        agent.next_turn([Observation(kind="instructions", text="step one")], deadline=_far())
        # The harness never reports the submit call's result: the step ended with it.
        agent.next_turn([Observation(kind="instructions", text="step two")], deadline=_far())
        messages = server.requests[1].body["messages"]
        if provider == "openai":
            assert messages[-2]["role"] == "tool" and "the step ended" in messages[-2]["content"]
            assert messages[-1] == {"role": "user", "content": "step two"}
        else:
            last = messages[-1]
            assert last["role"] == "user" and last["content"][0]["type"] == "tool_result"
            assert last["content"][1] == {"type": "text", "text": "step two"}
        agent.close()


@pytest.mark.parametrize(("mode", "sent"), [("auto", {"reasoning_details"}), ("always", {"reasoning_details", "reasoning_content"}), ("never", set())])
def test_openai_compatible_reasoning_passback(mode, sent):
    details = [{"type": "reasoning.encrypted", "data": "opaque"}]
    with FakeProvider([openai_reply(tool="bash", arguments={"command": "ls"}, reasoning="r", reasoning_details=details),
                       openai_reply(text="done")]) as server:
        agent = _agent(server, reasoning_passback=mode)
        turn = agent.next_turn([Observation(kind="instructions", text="go")], deadline=_far())
        assert turn.reasoning == "r"
        agent.next_turn([Observation(kind="tool_result", text="out", call_id=turn.tool_calls[0].id, tool="bash")], deadline=_far())
        assistant = server.requests[1].body["messages"][2]
        assert {k for k in assistant if k.startswith("reasoning")} == sent
        if "reasoning_details" in sent:
            assert assistant["reasoning_details"] == details
        agent.close()


def test_a_200_without_choices_is_retried_as_a_bad_reply():
    with FakeProvider([Reply({"object": "chat.completion", "choices": []}), openai_reply(text="fine")]) as server:
        agent = _agent(server)
        turn = agent.next_turn([Observation(kind="instructions", text="go")], deadline=_far())
        assert turn.text == "fine" and turn.usage.retries == 1
        assert "unusable reply" in turn.extra["retries"][0]["error"]
        agent.close()


def test_sampling_parameters_reach_the_request():
    with FakeProvider([openai_reply(text="a")]) as server:
        agent = _agent(server, temperature=0.3, top_p=0.9, seed=7, max_output_tokens=123, stop=["END"], extra_body={"top_k": 20})
        agent.next_turn([Observation(kind="instructions", text="go")], deadline=_far())
        body = server.requests[0].body
        assert (body["temperature"], body["top_p"], body["seed"], body["max_completion_tokens"], body["stop"], body["top_k"]) == \
            (0.3, 0.9, 7, 123, ["END"], 20)
        assert "logprobs" not in body and "return_token_ids" not in body  # token data only when asked
        agent.close()


# -- pruning ---------------------------------------------------------------------------------------

def _history(sizes: list[int], calls_per_turn: int) -> History:
    history = History([UserText("instructions")])
    for t, size in enumerate(sizes):
        calls = tuple(Call(id=f"c{t}-{i}", name="bash", arguments={"command": "x"}) for i in range(calls_per_turn))
        history.add(AssistantTurn(text=None, calls=calls))
        for c in calls:
            history.add(ToolOutput(c.id, "bash", "o" * size))
    return history


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 20_000), min_size=1, max_size=30), calls=st.integers(1, 3),
       window=st.integers(256, 50_000), keep=st.integers(1, 5))
def test_pruning_keeps_instructions_last_turns_and_call_pairs(sizes, calls, window, keep):
    history = _history(sizes, calls)
    policy = ContextPolicy(window_tokens=window, keep_last_turns=keep)
    pruned = prune(history, policy)
    if pruned is None:
        assert history.estimate(policy) <= window * policy.trigger_fraction
        return
    out = pruned.entries
    assert out[0] == UserText("instructions")
    turns = [e for e in history.entries if isinstance(e, AssistantTurn)]
    kept = [e for e in out if isinstance(e, AssistantTurn)]
    assert kept[-min(keep, len(turns)):] == turns[-min(keep, len(turns)):]
    # Every call sent has exactly one output, and each output follows its call.
    pending: set[str] = set()
    for e in out:
        if isinstance(e, AssistantTurn):
            assert not pending
            pending = {c.id for c in e.calls}
        elif isinstance(e, ToolOutput):
            pending.remove(e.call_id)
    assert pruned.estimate_after <= pruned.estimate_before


def test_pruning_off_by_default_and_with_strategy_none():
    history = _history([100_000] * 5, 1)
    assert prune(history, ContextPolicy()) is None
    assert prune(history, ContextPolicy(window_tokens=1000, strategy="none")) is None


# -- a real model behind a RubricJudge ---------------------------------------------------------------

def _rubric_verdict(server: FakeProvider, provider: str = "openai", **retry):
    from proctor.judges import JudgeContext, RubricJudge
    from proctor.judges.base import evaluate
    from proctor.agents.judge_model import ProviderJudgeModel

    url = server.anthropic_url if provider == "anthropic" else server.openai_url
    model = ProviderJudgeModel(ModelConfig(provider=provider, model="judge", base_url=url, retry={"base_delay_s": 0.01, **retry}))
    judge = RubricJudge(rubric="Names the capital of France.", model=model, mode="holistic", retries=1, timeout_s=30)
    try:
        return evaluate(judge, JudgeContext(submission=Path("/nonexistent"), answer="The capital of France is Paris."))
    finally:
        model.close()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_provider_model_grades_for_a_rubric_judge_through_retries(provider):
    reply = openai_reply if provider == "openai" else anthropic_reply
    with FakeProvider([Fail(503), reply(text='{"score": 8, "reason": "correct and brief"}')]) as server:
        verdict = _rubric_verdict(server, provider)
    assert verdict.score == pytest.approx(0.8) and not verdict.infra_error
    prompt = server.requests[-1].body["messages"]
    assert "Paris" in json.dumps(prompt)  # the submission reached the judge model, inside the judge's framing


def test_a_judge_provider_that_keeps_failing_is_an_infra_error_not_a_zero():
    with FakeProvider([Fail(503)] * 2) as server:
        verdict = _rubric_verdict(server, max_attempts=2)
    assert verdict.infra_error and "gave up after 2 tries" in verdict.explanation


def test_a_200_that_is_not_json_is_retried_and_an_empty_quota_is_not():
    with FakeProvider([Raw(200, '{"choices": [tru'), openai_reply(text="fine")]) as server:
        agent = _agent(server)
        assert agent.next_turn([Observation(kind="instructions", text="go")], deadline=_far()).text == "fine"
        agent.close()
    from proctor.agents import AgentError

    with FakeProvider([Fail(429, "You exceeded your current quota (insufficient_quota)")] * 3) as server:
        agent = _agent(server)
        with pytest.raises(AgentError, match="not retried"):
            agent.next_turn([Observation(kind="instructions", text="go")], deadline=_far())
        assert len(server.requests) == 1
        agent.close()


def test_a_short_or_absent_key_never_rewrites_what_the_student_runs(monkeypatch):
    monkeypatch.setenv("SHORT_KEY", "EMPTY")
    with FakeProvider([openai_reply(tool="bash", arguments={"command": "grep -n EMPTY config.py; echo not-needed"})]) as server:
        agent = ModelAgent(ModelConfig(model="m", base_url=server.openai_url, api_key_env="SHORT_KEY"))
        agent.begin(system_prompt="", tools=TOOLS, task_id="t")
        turn = agent.next_turn([Observation(kind="instructions", text="go")], deadline=_far())
        assert turn.tool_calls[0].arguments["command"] == "grep -n EMPTY config.py; echo not-needed"
        agent.close()


def test_pruning_keeps_room_for_the_reply():
    history = _history([4000] * 6, 1)  # about 6000 tokens at 4 characters a token
    policy = ContextPolicy(window_tokens=10_000, keep_last_turns=1)
    assert prune(history, policy) is None  # fits the window...
    pruned = prune(history, policy, reserve_tokens=8_000)  # ...but not with an 8000-token reply
    assert pruned is not None and pruned.estimate_after <= 2_000 * policy.target_fraction / policy.trigger_fraction
