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

import json
import random
import time
from typing import Any

from ..tools.base import ToolCall
from .base import Agent, AgentError, AgentTurn, Observation, TurnUsage
from .conversation import AssistantTurn, History, Reply, ToolOutput, UserText, pending_calls, prune
from .model_config import ModelConfig
from .provider import ProviderClient, make_client, read_key, redactor, request_with_retries

UNANSWERED = "[result not shown: the step ended with this turn]"


class ModelAgent(Agent):
    def __init__(self, config: ModelConfig, *, client: ProviderClient | None = None, rng: random.Random | None = None,
                 sleep=time.sleep) -> None:
        self.config = config
        self.name = f"model:{config.model}"
        self._key = read_key(config)
        self._redact = redactor(self._key)
        self._client = client or make_client(config, self._key)
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._system = ""
        self._tools: list[dict[str, Any]] = []
        self.history = History()

    def begin(self, *, system_prompt: str, tools: list[dict[str, Any]], task_id: str) -> None:
        self._system, self._tools = system_prompt, tools
        self.history = History()  # one conversation per rollout

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
                pruned = prune(self.history, self.config.context, reserve_tokens=self.config.max_output_tokens)
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
            # What the failed turn cost, and what was tried, still reach the result and transcript.
            exc.usage, exc.extra = usage, self._scrub_data(_record(extra, usage, retries, empties))
            raise
        _record(extra, usage, retries, empties)
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
        return request_with_retries(self._client, self.config, self._system, self._tools, self.history.entries,
                                    deadline=deadline, usage=usage, retries=retries, rng=self._rng, sleep=self._sleep,
                                    redact=self._redact)

    # -- the key never leaves ------------------------------------------------------------------
    def _scrub(self, turn: AgentTurn) -> AgentTurn:
        # json.dumps, not model_dump_json: a lone surrogate the model sent is data to keep, and
        # pydantic's encoder refuses it (ensure_ascii writes it as an escape the key never matches).
        dumped = json.dumps(turn.model_dump(), default=str)
        if self._redact(dumped) == dumped:
            return turn
        return AgentTurn.model_validate(_replace_deep(turn.model_dump(), self._redact))

    def _scrub_data(self, data: dict[str, Any]) -> dict[str, Any]:
        return _replace_deep(data, self._redact)


def _record(extra: dict[str, Any], usage: TurnUsage, retries: list[dict[str, Any]], empties: list[str | None]) -> dict[str, Any]:
    usage.retries = len(retries)
    if retries:
        extra["retries"] = retries
    if empties:
        extra["empty_replies"] = empties
    return extra


def _replace_deep(value: Any, redact) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_replace_deep(v, redact) for v in value]
    if isinstance(value, dict):
        return {_replace_deep(k, redact): _replace_deep(v, redact) for k, v in value.items()}
    return value
