"""Chat Completions through the official `openai` SDK: OpenAI itself and every OpenAI-compatible
server (vLLM, SGLang, OpenRouter, hosted providers).

The reply is read from the response's plain data, extra fields included, because compatible
servers add what a trainer needs there: vLLM's `prompt_token_ids` and per-choice `token_ids`
(asked for with `return_token_ids`), and `reasoning_content` / `reasoning` / `reasoning_details`
for thinking models. The SDK's own retries are off: Proctor retries, so that every retry is
recorded."""

from __future__ import annotations

import json
import secrets
from typing import Any

import openai

from .. import untrusted
from .conversation import AssistantTurn, Call, Entry, Reply, ToolOutput, UserText, parse_arguments, sendable
from .model_config import ModelConfig
from .retry import BadReply

_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_details")


class OpenAIChat:
    def __init__(self, config: ModelConfig, api_key: str) -> None:
        self.config = config
        self.client = openai.OpenAI(api_key=api_key, base_url=config.base_url, max_retries=0,
                                    timeout=config.retry.request_timeout_s, default_headers=config.extra_headers or None)

    def close(self) -> None:
        self.client.close()

    def request(self, system: str, tools: list[dict[str, Any]], entries: list[Entry], *, timeout: float) -> Reply:
        c = self.config
        kwargs: dict[str, Any] = {"model": c.model, "messages": sendable(self.messages(system, entries)),
                                  "max_completion_tokens": c.max_output_tokens}
        if tools:
            kwargs["tools"] = [{"type": "function", "function": spec} for spec in tools]
        for name in ("temperature", "top_p", "seed", "reasoning_effort"):
            if getattr(c, name) is not None:
                kwargs[name] = getattr(c, name)
        if c.stop:
            kwargs["stop"] = c.stop
        extra = dict(c.extra_body)
        if c.token_data:
            kwargs["logprobs"] = True
            if c.top_logprobs:
                kwargs["top_logprobs"] = c.top_logprobs
            extra.setdefault("return_token_ids", True)
        if extra:
            kwargs["extra_body"] = extra
        # The body is read here, not by the SDK: it is the model's text, and what the model wrote
        # (a 5000-digit number, say) must come back as data, never as an exception blamed on the
        # provider (see proctor.untrusted).
        raw = self.client.chat.completions.with_raw_response.create(**kwargs, timeout=timeout)
        return self.parse(untrusted.loads(raw.http_response.text))

    def messages(self, system: str, entries: list[Entry]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        for e in entries:
            if isinstance(e, UserText):
                out.append({"role": "user", "content": e.text})
            elif isinstance(e, ToolOutput):
                out.append({"role": "tool", "tool_call_id": e.call_id, "content": e.text})
            else:
                out.append(self._assistant(e))
        return out

    def _assistant(self, turn: AssistantTurn) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or ""}
        if turn.calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function",
                 # A malformed call goes back as {}: the error result says what was wrong, and the
                 # server is not asked to re-read arguments it could not parse the first time.
                 "function": {"name": call.name, "arguments": "{}" if call.malformed else json.dumps(call.arguments)}}
                for call in turn.calls]
        native = turn.native or {}
        mode = self.config.reasoning_passback
        for name in _REASONING_FIELDS:
            if name in native and (mode == "always" or (mode == "auto" and name == "reasoning_details")):
                message[name] = native[name]
        return message

    def parse(self, data: dict[str, Any]) -> Reply:
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
            raise BadReply("the response has no choices[0].message")
        choice = choices[0]
        message = choice["message"]
        calls = []
        for raw in message.get("tool_calls") or []:
            fn = raw.get("function") if isinstance(raw, dict) else None
            fn = fn if isinstance(fn, dict) else {}
            raw_args = fn.get("arguments")
            arguments, malformed = parse_arguments(raw_args)
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                name, malformed = "?", malformed or "the call has no tool name"
            calls.append(Call(id=(raw.get("id") if isinstance(raw, dict) else None) or f"call_{secrets.token_hex(6)}",
                              name=name, arguments=arguments,
                              raw_arguments=raw_args if isinstance(raw_args, str) else json.dumps(raw_args),
                              malformed=malformed))
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        native = {k: message[k] for k in _REASONING_FIELDS if message.get(k)}
        usage = data.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        text = message.get("content")
        return Reply(
            text=text if isinstance(text, str) else None, calls=calls,
            reasoning=reasoning if isinstance(reasoning, str) else None, native=native,
            stop_reason=choice.get("finish_reason"),
            input_tokens=int(usage.get("prompt_tokens") or 0), output_tokens=int(usage.get("completion_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0), token_data=_token_data(data, choice),
        )


def _token_data(data: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    """Prompt and completion token ids and per-token logprobs, where the server sent them."""
    out: dict[str, Any] = {}
    prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
    if isinstance(prompt_ids, list):
        out["prompt_token_ids"] = prompt_ids
    completion_ids = choice.get("token_ids")
    if isinstance(completion_ids, list):
        out["completion_token_ids"] = completion_ids
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(content, list) and content:
        out["tokens"] = [t.get("token") for t in content if isinstance(t, dict)]
        out["logprobs"] = [t.get("logprob") for t in content if isinstance(t, dict)]
        tops = [t.get("top_logprobs") for t in content if isinstance(t, dict)]
        if any(tops):
            out["top_logprobs"] = [[{"token": x.get("token"), "logprob": x.get("logprob")} for x in (top or [])] for top in tops]
    return out
