"""The model-driven student: one agent loop over the official openai and anthropic SDKs.

    agent = ModelAgent(ModelConfig(provider="openai", model="Qwen/Qwen3-8B", base_url="http://127.0.0.1:8000/v1"))

Over thousands of rollouts every rare failure of the loop happens many times, so each has a rule:

- **Retries** (proctor.agents.retry): rate limits, overloads, timeouts, dropped connections and
  5xx are retried with exponential backoff and jitter, waiting at least what `retry-after` asks.
  Every retry is recorded in the turn. Retries exhausted (or a request that can never succeed) is
  an infra error: the rollout is `infra_error`, not a student failure.
- **Empty replies** (no text, no tool call: the output limit hit, reasoning only) are answered
  with a nudge a bounded number of times, then the step ends with a student error.
- **Malformed tool calls** (arguments that are not a JSON object, no tool name) reach the harness
  marked as such; it answers them with an error the model can read, and the request history
  carries `{}` for them so the next request is not poisoned. Unknown tools and wrong argument
  types are answered by the tools themselves.
- **Deadlines**: each request's timeout is clipped to the step's time left; running out of time
  while waiting is the step ending by time.
- **Context**: before each request, a history that would overflow the configured window is
  pruned (proctor.agents.conversation); the transcript still has everything.
- **Reasoning** is kept in the transcript and passed back the way the provider requires.
- **Token ids and logprobs**, when the endpoint returns them, go into the turn for the transcript.

The key is read from the environment variable the config names, in this process only; it never
appears in a request body, a transcript, a result or an error message (every string leaving the
agent is scrubbed of it)."""

from __future__ import annotations

import os
import random
import time
from typing import Any, Protocol

from ..tools.base import ToolCall
from .base import Agent, AgentError, AgentTimeout, AgentTurn, Observation, TurnUsage
from .conversation import AssistantTurn, History, Reply, ToolOutput, UserText, pending_calls, prune
from .model_config import ModelConfig
from .retry import classify, backoff_s
from ..errors import ConfigError

REDACTED = "[redacted key]"
UNANSWERED = "[not run: an earlier call ended the step]"


class ProviderClient(Protocol):
    def request(self, system: str, tools: list[dict[str, Any]], entries: list, *, timeout: float) -> Reply: ...
    def close(self) -> None: ...


def read_key(config: ModelConfig) -> str:
    """The key from the environment variable the config names. A local endpoint (base_url set)
    may need none; a hosted provider without its key is a ConfigError naming the variable."""
    key = os.environ.get(config.key_env, "")
    if key:
        return key
    if config.base_url:
        return "not-needed"
    raise ConfigError(f"environment variable {config.key_env} is not set; it must hold the {config.provider} API key "
                      f"(or set api_key_env to the variable that does)")


def make_client(config: ModelConfig, key: str) -> ProviderClient:
    if config.provider == "anthropic":
        from .anthropic_messages import AnthropicMessages

        return AnthropicMessages(config, key)
    from .openai_chat import OpenAIChat

    return OpenAIChat(config, key)


class ModelAgent(Agent):
    def __init__(self, config: ModelConfig, *, client: ProviderClient | None = None, rng: random.Random | None = None,
                 sleep=time.sleep) -> None:
        self.config = config
        self.name = f"model:{config.model}"
        self._key = read_key(config)
        self._client = client or make_client(config, self._key)
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._system = ""
        self._tools: list[dict[str, Any]] = []
        self.history = History()

    def begin(self, *, system_prompt: str, tools: list[dict[str, Any]], task_id: str) -> None:
        self._system, self._tools = system_prompt, tools

    def close(self) -> None:
        self._client.close()

    # -- one turn ------------------------------------------------------------------------------
    def next_turn(self, observations: list[Observation], *, deadline: float) -> AgentTurn:
        self._take(observations)
        usage = TurnUsage()
        extra: dict[str, Any] = {}
        retries: list[dict[str, Any]] = []
        empties: list[str | None] = []
        try:
            while True:
                pruned = prune(self.history, self.config.context)
                if pruned is not None:
                    self.history.replace_with(pruned.entries)
                    extra.setdefault("context_pruned", []).append(
                        {"estimate_before": pruned.estimate_before, "estimate_after": pruned.estimate_after,
                         "outputs_pruned": pruned.outputs_pruned, "turns_dropped": pruned.turns_dropped})
                reply = self._request(deadline, usage, retries)
                if not reply.empty:
                    break
                empties.append(reply.stop_reason)
                if len(empties) > self.config.empty_turn_nudges:
                    raise AgentError(
                        f"{len(empties)} empty replies in a row (no text, no tool call; stop reasons: "
                        f"{', '.join(str(s) for s in empties)}); the step ends", infra=False)
                self.history.add(UserText(self.config.nudge_text))
        except AgentError as exc:
            # What the failed turn cost is still counted by the harness.
            exc.usage, exc.extra = usage, self._scrub_data(extra)
            raise
        finally:
            usage.retries = len(retries)
            if retries:
                extra["retries"] = retries
            if empties:
                extra["empty_replies"] = empties
        self.history.add(AssistantTurn(text=reply.text, calls=tuple(reply.calls), reasoning=reply.reasoning, native=reply.native))
        self.history.measured(reply.input_tokens + reply.output_tokens)
        if reply.stop_reason:
            extra["stop_reason"] = reply.stop_reason
        if reply.token_data:
            extra["token_data"] = reply.token_data
        malformed = [{"id": c.id, "name": c.name, "raw_arguments": c.raw_arguments, "error": c.malformed}
                     for c in reply.calls if c.malformed]
        if malformed:
            extra["malformed_tool_calls"] = malformed
        turn = AgentTurn(
            text=reply.text, reasoning=reply.reasoning, usage=usage, extra=extra,
            tool_calls=[ToolCall(name=c.name, arguments=c.arguments, id=c.id, malformed=c.malformed) for c in reply.calls],
        )
        return self._scrub(turn)

    def _take(self, observations: list[Observation]) -> None:
        """Add what the harness reports to the history, answering first any call of the last turn
        the harness did not (a call that ended the previous step)."""
        answered = {o.call_id for o in observations if o.kind == "tool_result"}
        for call in pending_calls(self.history.entries):
            if call.id not in answered:
                self.history.add(ToolOutput(call.id, call.name, UNANSWERED, is_error=True))
        for o in observations:
            if o.kind == "tool_result" and o.call_id is not None:
                self.history.add(ToolOutput(o.call_id, o.tool or "?", o.text, is_error=o.text.startswith("[error]")))
            elif o.kind == "notice":
                self.history.add(UserText(f"[notice from the environment] {o.text}"))
            else:
                self.history.add(UserText(o.text))

    def _request(self, deadline: float, usage: TurnUsage, retries: list[dict[str, Any]]) -> Reply:
        policy = self.config.retry
        auth_failures = 0
        attempt = 0
        while True:
            attempt += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentTimeout("the step's time ran out before the model replied")
            timeout = min(policy.request_timeout_s, left)
            usage.calls += 1
            try:
                reply = self._client.request(self._system, self._tools, self.history.entries, timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - classified below; anything unknown is fatal
                failure = classify(exc)
                message = self._redact(failure.message)
                if failure.kind == "retry" and timeout < policy.request_timeout_s and time.monotonic() >= deadline - 0.05:
                    raise AgentTimeout(f"the step's time ran out while waiting for the model ({message})") from None
                if failure.kind == "fatal":
                    raise AgentError(f"the provider refused the request, not retried: {message}") from None
                if failure.kind == "context":
                    raise AgentError(f"the conversation no longer fits the model's context window: {message}", infra=False) from None
                if failure.kind == "auth":
                    auth_failures += 1
                    if auth_failures >= policy.auth_attempts:
                        raise AgentError(f"the provider refused the key {auth_failures} times: {message}") from None
                if attempt >= policy.max_attempts:
                    raise AgentError(f"gave up after {attempt} tries: {message}") from None
                if failure.retry_after_s is not None and failure.retry_after_s > policy.max_retry_after_s:
                    raise AgentError(f"the provider asked to wait {failure.retry_after_s:.0f} s, more than max_retry_after_s: {message}") from None
                wait = backoff_s(attempt, policy, self._rng, failure.retry_after_s)
                if time.monotonic() + wait >= deadline:
                    raise AgentError(f"the provider kept failing until the step's time ran out ({attempt} tries): {message}") from None
                retries.append({"attempt": attempt, "status": failure.status, "error": message,
                                "retry_after_s": failure.retry_after_s, "wait_s": round(wait, 3)})
                self._sleep(wait)
                continue
            usage.input_tokens += reply.input_tokens
            usage.output_tokens += reply.output_tokens
            usage.cached_tokens += reply.cached_tokens
            if self.config.pricing:
                usage.cost_usd += self.config.pricing.cost(reply.input_tokens, reply.output_tokens, reply.cached_tokens)
            return reply

    # -- the key never leaves ------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        return text.replace(self._key, REDACTED) if len(self._key) >= 4 else text

    def _scrub(self, turn: AgentTurn) -> AgentTurn:
        if len(self._key) < 4 or self._key not in turn.model_dump_json():
            return turn
        return AgentTurn.model_validate(_replace_deep(turn.model_dump(), self._key, REDACTED))

    def _scrub_data(self, data: dict[str, Any]) -> dict[str, Any]:
        return _replace_deep(data, self._key, REDACTED) if len(self._key) >= 4 else data


def _replace_deep(value: Any, needle: str, by: str) -> Any:
    if isinstance(value, str):
        return value.replace(needle, by)
    if isinstance(value, list):
        return [_replace_deep(v, needle, by) for v in value]
    if isinstance(value, dict):
        return {_replace_deep(k, needle, by): _replace_deep(v, needle, by) for k, v in value.items()}
    return value
