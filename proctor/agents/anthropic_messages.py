"""The Messages API through the official `anthropic` SDK, with tool use and extended thinking.

Thinking blocks (and redacted thinking) come back with a signature and must be sent back
unchanged in the assistant turn they belong to when tool use continues, so each assistant turn
keeps its content blocks as the API returned them. Tool results for one turn go in one user
message, with any notice after them, as the API requires."""

from __future__ import annotations

import json
from typing import Any

import anthropic

from .. import untrusted
from .conversation import AssistantTurn, Call, Entry, Reply, ToolOutput, UserText, parse_arguments, sendable
from .model_config import ModelConfig
from .retry import BadReply

# The fields each block type takes when sent back; anything else the SDK's model carries is dropped.
_BLOCK_FIELDS = {"text": ("text",), "thinking": ("thinking", "signature"), "redacted_thinking": ("data",),
                 "tool_use": ("id", "name", "input")}


class AnthropicMessages:
    def __init__(self, config: ModelConfig, api_key: str) -> None:
        self.config = config
        self.client = anthropic.Anthropic(api_key=api_key, base_url=config.base_url, max_retries=0,
                                          timeout=config.retry.request_timeout_s, default_headers=config.extra_headers or None)

    def close(self) -> None:
        self.client.close()

    def request(self, system: str, tools: list[dict[str, Any]], entries: list[Entry], *, timeout: float) -> Reply:
        c = self.config
        kwargs: dict[str, Any] = {"model": c.model, "max_tokens": c.max_output_tokens, "messages": sendable(self.messages(entries))}
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = [{"name": t["name"], "description": t.get("description", ""), "input_schema": t["parameters"]} for t in tools]
        if c.stop:
            kwargs["stop_sequences"] = c.stop
        if c.thinking_budget_tokens:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": c.thinking_budget_tokens}
        # Sampling fields go in the body as the API names them, whichever the SDK version types.
        extra = {name: getattr(c, name) for name in ("temperature", "top_p") if getattr(c, name) is not None}
        extra.update(c.extra_body)
        if extra:
            kwargs["extra_body"] = extra
        # The body is read here, not by the SDK: a tool_use input is the model's own JSON, and a
        # number in it too long for Python's int() must be the student's data, not a provider error.
        raw = self.client.messages.with_raw_response.create(**kwargs, timeout=timeout)
        return self.parse(untrusted.loads(raw.http_response.text))

    def messages(self, entries: list[Entry]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []

        def user(block: dict[str, Any]) -> None:
            if out and out[-1]["role"] == "user":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})

        for e in entries:
            if isinstance(e, UserText):
                user({"type": "text", "text": e.text})
            elif isinstance(e, ToolOutput):
                user({"type": "tool_result", "tool_use_id": e.call_id, "content": e.text or "(no output)", "is_error": e.is_error})
            else:
                out.append({"role": "assistant", "content": self._assistant(e)})
        return out

    def _assistant(self, turn: AssistantTurn) -> list[dict[str, Any]]:
        malformed = {c.id for c in turn.calls if c.malformed}
        if turn.native:
            blocks = []
            for block in turn.native:
                block = dict(block)
                if block.get("type") == "tool_use" and block.get("id") in malformed:
                    block["input"] = {}
                blocks.append(block)
            return blocks
        blocks = [{"type": "text", "text": turn.text}] if turn.text else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": {} if c.malformed else c.arguments} for c in turn.calls]
        return blocks

    def parse(self, data: dict[str, Any]) -> Reply:
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, list):
            raise BadReply("the response has no content list")
        texts, thinking, calls, native = [], [], [], []
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind not in _BLOCK_FIELDS:
                continue
            kept = {"type": kind, **{k: block.get(k) for k in _BLOCK_FIELDS[kind]}}
            if kind == "tool_use" and not kept["id"]:
                kept["id"] = f"toolu_{len(calls)}"
            native.append(kept)
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                thinking.append(block["thinking"])
            elif kind == "redacted_thinking":
                thinking.append("[redacted thinking]")
            elif kind == "tool_use":
                arguments, malformed = parse_arguments(block.get("input"))
                name = block.get("name") if isinstance(block.get("name"), str) and block.get("name") else "?"
                calls.append(Call(id=str(kept["id"]), name=name, arguments=arguments,
                                  raw_arguments=json.dumps(block.get("input"), default=str), malformed=malformed))
        usage = data.get("usage") or {}
        cached = int(usage.get("cache_read_input_tokens") or 0)
        fresh = int(usage.get("input_tokens") or 0) + int(usage.get("cache_creation_input_tokens") or 0)
        return Reply(
            text="".join(texts) if texts else None, calls=calls, reasoning="\n".join(thinking) if thinking else None,
            native=native, stop_reason=data.get("stop_reason"), input_tokens=fresh + cached,
            output_tokens=int(usage.get("output_tokens") or 0), cached_tokens=cached,
        )
