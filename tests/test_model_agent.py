"""The model-driven student over real HTTP: the official openai and anthropic SDKs talk to a
scripted provider on loopback (tests/fake_provider.py), and rollouts run in real sandboxes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fake_provider import Drop, Fail, FakeProvider, Recorded, anthropic_reply, openai_reply
from proctor.agents import ModelAgent, ModelConfig
from proctor.agents.conversation import PRUNED_NOTE
from proctor.errors import ConfigError
from proctor.harness import run_rollout
from proctor.tasks.loading import load_environment, resolved

ROOT = Path(__file__).resolve().parents[1]
BASICS = ROOT / "tests" / "envs" / "basics"
KEY = "sk-proctor-test-7f3a9c1e5b2d4f6a8c0e"
KEY_ENV = "PROCTOR_TEST_MODEL_KEY"
WRITE_42 = {"command": "echo 42 > /workdir/answer.txt"}


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture(scope="module")
def env():
    return load_environment(str(BASICS))


def _config(server: FakeProvider, provider: str = "openai", **fields) -> ModelConfig:
    url = server.anthropic_url if provider == "anthropic" else server.openai_url
    retry = {"base_delay_s": 0.01, "max_delay_s": 0.05, **fields.pop("retry", {})}
    return ModelConfig(provider=provider, model="fake-model", base_url=url, api_key_env=KEY_ENV, retry=retry, **fields)


def _rollout(env, task_id: str, config: ModelConfig, tmp_path: Path, **task_changes):
    with resolved(env, task_id) as (task, instance):
        if task_changes:
            task = task.model_copy(update={"limits": task.limits.model_copy(update=task_changes)})
        result = run_rollout(task, ModelAgent(config), tmp_path, instance=instance)
    events = [json.loads(line) for line in (tmp_path / result.run_id / "transcript.jsonl").read_text().splitlines()]
    return result, events


def _turns(events):
    return [e for e in events if e["type"] == "model_turn"]


def _tool_results(events):
    return [e["result"] for e in events if e["type"] == "tool_result"]


def _no_key_anywhere(tmp_path: Path) -> None:
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), f"the key leaked into {path}"


def _cmdlines_without_key(record: Recorded) -> None:
    """Runs while the client waits for a reply: no process on the machine has the key in its argv."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            assert KEY.encode() not in argv, f"the key is on the command line of pid {proc.name}"


# -- end to end through `proctor run` ------------------------------------------------------------

def test_proctor_run_with_an_openai_compatible_server(tmp_path):
    # What the student can see of its own world: its environment and every process's arguments.
    probe = "echo 42 > /workdir/answer.txt; env; tr '\\0' '\\n' < /proc/self/environ; ps -eo args"
    script = [openai_reply(tool="bash", arguments={"command": probe}, reasoning="I should write it.", token_ids=True, usage=(120, 30, 100)),
              openai_reply(tool="submit", arguments={}, usage=(200, 10, 120))]
    with FakeProvider(script, on_request=_cmdlines_without_key) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "proctor.cli", "run", str(BASICS), "--task", "write-42", "--agent", "model:fake-model",
             "--base-url", server.openai_url, "--api-key-env", KEY_ENV, "--token-data", "--out", str(tmp_path), "--json"],
            capture_output=True, text=True, timeout=120, env={**os.environ, KEY_ENV: KEY})
    assert proc.returncode == 0, proc.stderr
    assert not server.errors
    [result] = json.loads(proc.stdout)
    assert (result["status"], result["score"]) == ("completed", 1.0)
    assert {k: result["usage"][k] for k in ("input_tokens", "output_tokens", "cached_tokens", "model_calls", "retries", "turns")} == \
        {"input_tokens": 320, "output_tokens": 40, "cached_tokens": 220, "model_calls": 2, "retries": 0, "turns": 2}
    # The key reached the provider, and only the provider.
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert KEY not in proc.stdout + proc.stderr
    _no_key_anywhere(tmp_path)
    events = [json.loads(x) for x in next(tmp_path.rglob("transcript.jsonl")).read_text().splitlines()]
    first = _turns(events)[0]
    assert first["reasoning"] == "I should write it."
    assert first["extra"]["token_data"] == {"prompt_token_ids": [101, 102, 103], "completion_token_ids": [7, 8],
                                            "tokens": ["a", "b"], "logprobs": [-0.25, -1.5]}
    assert server.requests[0].body["logprobs"] is True and server.requests[0].body["return_token_ids"] is True
    # The probe did run in the sandbox (its output is in the transcript), and saw no key.
    assert "PWD=/workdir" in _tool_results(events)[0]["output"]


def test_proctor_run_with_an_anthropic_server_passes_thinking_back(tmp_path, env):
    script = [anthropic_reply(thinking="Plan: write the file.", signature="sig-AAA", tool="bash", arguments=WRITE_42, usage=(50, 10, 40)),
              anthropic_reply(text="Submitting.", tool="submit", arguments={})]
    with FakeProvider(script, on_request=_cmdlines_without_key) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "proctor.cli", "run", str(BASICS), "--task", "write-42", "--agent", "model:claude-fake",
             "--provider", "anthropic", "--base-url", server.anthropic_url, "--api-key-env", KEY_ENV,
             "--out", str(tmp_path), "--json"],
            capture_output=True, text=True, timeout=120, env={**os.environ, KEY_ENV: KEY})
    assert proc.returncode == 0, proc.stderr
    [result] = json.loads(proc.stdout)
    assert (result["status"], result["score"]) == ("completed", 1.0)
    assert result["usage"]["input_tokens"] == 90 + 100 and result["usage"]["cached_tokens"] == 40
    first, second = server.requests
    assert first.path == "/v1/messages"
    assert KEY in (first.headers.get("x-api-key", ""), first.headers.get("authorization", "").removeprefix("Bearer "))
    assert first.body["tools"][0]["input_schema"]["properties"]["command"]
    assistant, user = second.body["messages"][1:3]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {"type": "thinking", "thinking": "Plan: write the file.", "signature": "sig-AAA"}
    assert assistant["content"][1]["type"] == "tool_use"
    assert user["role"] == "user" and user["content"][0]["type"] == "tool_result"
    assert user["content"][0]["tool_use_id"] == assistant["content"][1]["id"]
    _no_key_anywhere(tmp_path)
    events = [json.loads(x) for x in next(tmp_path.rglob("transcript.jsonl")).read_text().splitlines()]
    assert _turns(events)[0]["reasoning"] == "Plan: write the file."


# -- retries -----------------------------------------------------------------------------------

def test_rate_limits_overloads_drops_and_slow_replies_are_retried(tmp_path, env):
    script = [Fail(429, retry_after="0.3"), Fail(500), Fail(529), Drop(),
              openai_reply(tool="bash", arguments=WRITE_42, delay_s=3.0),  # slower than the request timeout
              openai_reply(tool="bash", arguments=WRITE_42), Fail(503, retry_after="0"), openai_reply(tool="submit")]
    with FakeProvider(script) as server:
        result, events = _rollout(env, "write-42", _config(server, retry={"request_timeout_s": 1.0}), tmp_path)
    assert (result.status, result.score) == ("completed", 1.0), result.errors
    assert result.usage.retries == 6 and result.usage.model_calls == 8
    assert server.requests[1].at - server.requests[0].at >= 0.3, "retry-after was not honoured"
    retries = _turns(events)[0]["extra"]["retries"]
    assert [r["status"] for r in retries] == [429, 500, 529, None, None]
    assert retries[0]["retry_after_s"] == 0.3 and retries[0]["wait_s"] >= 0.3
    # A retried request is the same request: the dropped and timed-out tries did not change history.
    assert server.requests[5].body["messages"] == server.requests[0].body["messages"]


def test_exhausted_retries_are_an_infra_error_not_a_student_failure(tmp_path, env):
    with FakeProvider([Fail(503)] * 3) as server:
        result, events = _rollout(env, "write-42", _config(server, retry={"max_attempts": 3}), tmp_path)
    assert result.status == "infra_error" and result.ended_by == "agent_error"
    assert "gave up after 3 tries" in result.errors[0]
    assert result.usage.model_calls == 3 and result.usage.retries == 2
    assert len(server.requests) == 3
    [failure] = [e for e in events if e["type"] == "agent_failure"]
    assert [r["status"] for r in failure["extra"]["retries"]] == [503, 503]


def test_a_request_that_can_never_succeed_is_not_retried(tmp_path, env):
    with FakeProvider([Fail(400, "unknown field 'tools'")]) as server:
        result, _ = _rollout(env, "write-42", _config(server), tmp_path)
    assert result.status == "infra_error" and "not retried" in result.errors[0]
    assert len(server.requests) == 1


def test_context_too_long_ends_the_step_as_the_students_problem(tmp_path, env):
    with FakeProvider([Fail(400, "This model's maximum context length is 8192 tokens")]) as server:
        result, _ = _rollout(env, "write-42", _config(server), tmp_path)
    assert result.status == "completed" and result.score == 0.0 and result.ended_by == "agent_error"
    assert len(server.requests) == 1


def test_a_refused_key_is_tried_twice_and_never_written_down(tmp_path, env):
    echo = f"Incorrect API key provided: {KEY}"
    with FakeProvider([Fail(401, echo), Fail(401, echo)]) as server:
        result, _ = _rollout(env, "write-42", _config(server), tmp_path)
    assert result.status == "infra_error" and "refused the key 2 times" in result.errors[0]
    assert "[redacted key]" in result.errors[0]
    _no_key_anywhere(tmp_path)


def test_a_long_retry_after_is_not_waited_for(tmp_path, env):
    with FakeProvider([Fail(429, retry_after="3600")]) as server:
        started = time.monotonic()
        result, _ = _rollout(env, "write-42", _config(server, retry={"max_retry_after_s": 60}), tmp_path)
    assert result.status == "infra_error" and "asked to wait 3600 s" in result.errors[0]
    assert time.monotonic() - started < 30


# -- empty turns, malformed calls ----------------------------------------------------------------

def test_empty_replies_are_nudged_then_the_rollout_goes_on(tmp_path, env):
    script = [openai_reply(text="", finish="length"), openai_reply(text=None, reasoning="hmm"),
              openai_reply(tool="bash", arguments=WRITE_42), openai_reply(tool="submit")]
    with FakeProvider(script) as server:
        result, events = _rollout(env, "write-42", _config(server), tmp_path)
    assert (result.status, result.score) == ("completed", 1.0)
    nudge = ModelConfig.model_fields["nudge_text"].default
    assert [m["content"] for m in server.requests[2].body["messages"][-2:]] == [nudge, nudge]
    assert _turns(events)[0]["extra"]["empty_replies"] == ["length", "stop"]


def test_endless_empty_replies_end_the_step_as_a_student_error(tmp_path, env):
    with FakeProvider([openai_reply(text="", finish="length")] * 3) as server:
        result, events = _rollout(env, "write-42", _config(server, empty_turn_nudges=2), tmp_path)
    assert result.status == "completed" and result.score == 0.0 and result.ended_by == "agent_error"
    assert len(server.requests) == 3
    assert any(e["type"] == "error" and "3 empty replies" in e["message"] and e["infra"] is False for e in events)


def test_malformed_tool_calls_are_answered_and_do_not_poison_the_next_request(tmp_path, env):
    script = [openai_reply(tool="bash", arguments='{"command": "echo 42 > /workdir/answer.txt"'),  # truncated JSON
              openai_reply(tool="bash", arguments="[1, 2]"),
              openai_reply(tool="no_such_tool", arguments={"x": 1}),
              openai_reply(tool="bash", arguments={"command": 42}),
              openai_reply(tool="bash", arguments=WRITE_42), openai_reply(tool="submit")]
    with FakeProvider(script) as server:
        result, events = _rollout(env, "write-42", _config(server), tmp_path)
    assert (result.status, result.score) == ("completed", 1.0)
    errors = [r["error"] for r in _tool_results(events)[:4]]
    assert "not valid JSON" in errors[0] and "must be a JSON object" in errors[1]
    assert "no tool named 'no_such_tool'" in errors[2] and "command" in errors[3]
    sent = server.requests[1].body["messages"]
    assert sent[-2]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert sent[-1]["role"] == "tool" and "malformed" in sent[-1]["content"]
    turn = _turns(events)[0]
    assert turn["extra"]["malformed_tool_calls"][0]["raw_arguments"].endswith('answer.txt"')


# -- budgets -----------------------------------------------------------------------------------

def test_the_rollout_deadline_interrupts_a_running_tool_call(tmp_path, env):
    with FakeProvider([openai_reply(tool="bash", arguments={"command": "echo 42 > answer.txt; sleep 60", "timeout": 120})]) as server:
        started = time.monotonic()
        result, events = _rollout(env, "short-deadline", _config(server), tmp_path)
    assert time.monotonic() - started < 20
    assert result.ended_by == "rollout_time" and result.status == "completed"
    assert _tool_results(events)[0]["timed_out"] is True


def test_a_model_slower_than_the_deadline_ends_the_step_by_time(tmp_path, env):
    with FakeProvider([openai_reply(tool="submit", delay_s=5)]) as server:
        result, _ = _rollout(env, "short-deadline", _config(server), tmp_path)
    assert result.ended_by == "rollout_time" and result.status == "completed" and result.score == 0.0


def test_cost_budget_ends_the_step_and_the_task_can_score_it_zero(tmp_path, env):
    pricing = {"input_per_mtok": 10_000.0, "output_per_mtok": 0.0}  # 100 input tokens = $1
    script = [openai_reply(tool="bash", arguments=WRITE_42), openai_reply(tool="submit")]
    with FakeProvider(script) as server:
        result, _ = _rollout(env, "write-42", _config(server, pricing=pricing), tmp_path, max_cost_usd=0.5, on_budget="zero")
    assert result.ended_by == "cost_budget" and result.score == 0.0
    assert result.usage.cost_usd == pytest.approx(1.0)
    assert result.steps[0].judge == "budget"
    with FakeProvider(list(script)) as server:
        result, _ = _rollout(env, "write-42", _config(server, pricing=pricing), tmp_path / "judged", max_cost_usd=0.5)
    assert result.ended_by == "cost_budget" and result.score == 1.0  # the default: judge what is there


def test_the_model_is_told_what_is_left_when_the_task_wants_it(tmp_path, env):
    script = [openai_reply(tool="bash", arguments=WRITE_42), openai_reply(tool="submit")]
    with FakeProvider(script) as server:
        result, _ = _rollout(env, "write-42", _config(server), tmp_path, announce_budget=True, max_turns=10, max_tokens=10_000)
    assert result.score == 1.0
    notice = server.requests[1].body["messages"][-1]
    assert notice["role"] == "user" and "turns left: 9" in notice["content"] and "tokens left: 9880" in notice["content"]


# -- context -----------------------------------------------------------------------------------

def test_context_pruning_keeps_the_rollout_going_and_the_transcript_whole(tmp_path, env):
    big = {"command": "head -c 3000 /dev/zero | tr '\\0' x; echo"}
    script = [openai_reply(tool="bash", arguments=big, usage=(500, 10, 0)) for _ in range(6)]
    script += [openai_reply(tool="bash", arguments=WRITE_42), openai_reply(tool="submit")]
    context = {"window_tokens": 4000, "trigger_fraction": 0.8, "target_fraction": 0.5, "keep_last_turns": 1}
    with FakeProvider(script) as server:
        result, events = _rollout(env, "write-42", _config(server, context=context, max_output_tokens=500), tmp_path)
    assert (result.status, result.score) == ("completed", 1.0)
    sizes = [len(json.dumps(r.body["messages"])) for r in server.requests]
    assert max(sizes) < 4000 * 4, sizes
    last = server.requests[-1].body["messages"]
    assert last[1] == {"role": "user", "content": "Write 42 to /workdir/answer.txt."}  # the instructions stay
    assert any(m["role"] == "tool" and m["content"].startswith(PRUNED_NOTE.split("{")[0]) for m in last)
    ids = {c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])}
    assert ids == {m["tool_call_id"] for m in last if m["role"] == "tool"}  # every call still paired
    assert any("context_pruned" in t.get("extra", {}) for t in _turns(events))
    assert sum("x" * 3000 in r["output"] for r in _tool_results(events)) == 6  # the transcript has everything


# -- configuration ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "message"), [
    ({"api_key": "sk-123"}, "a literal key is never read from a config"),
    ({"api_key_env": "sk-abc-123"}, "is not an environment variable name"),
    ({"extra_headers": {"Authorization": "Bearer sk"}}, "carries credentials"),
    ({"base_url": "http://user:pw@host/v1"}, "without credentials"),
    ({"provider": "cohere"}, "provider"),
    ({"provider": "anthropic", "thinking_budget_tokens": 8000, "max_output_tokens": 4096}, "must be below max_output_tokens"),
])
def test_bad_model_configs_are_one_line_errors(tmp_path, fields, message):
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"model": "m", **fields}))
    with pytest.raises(ConfigError, match=message) as info:
        ModelConfig.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert "pw@" not in str(info.value) and "sk-abc" not in str(info.value)  # rejected values are not echoed


def test_a_hosted_provider_without_its_key_is_a_config_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        ModelAgent(ModelConfig(model="gpt-x"))


def test_toml_run_config_and_flags(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('provider = "anthropic"\nmodel = "from-file"\napi_key_env = "MY_KEY"\n[context]\nwindow_tokens = 1000\n')
    config = ModelConfig.load(path, model="from-flag", temperature=0.5)
    assert (config.provider, config.model, config.key_env, config.temperature, config.context.window_tokens) == \
        ("anthropic", "from-flag", "MY_KEY", 0.5, 1000)
    proc = subprocess.run([sys.executable, "-m", "proctor.cli", "run", str(BASICS), "--task", "write-42", "--agent", "oracle",
                           "--base-url", "http://x", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "only apply to --agent model:NAME" in proc.stderr and "Traceback" not in proc.stderr
