"""Reaching a model provider: the key, the client for the configured API, and one request with
its retries (used by the model-driven agent and by model-backed judges)."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import ConfigError
from .base import AgentError, AgentTimeout, TurnUsage
from .conversation import Entry, Reply
from .model_config import ModelConfig
from .retry import backoff_s, classify

REDACTED = "[redacted key]"
NO_KEY = "not-needed"
# Keys shorter than this (a local server's "EMPTY") are not secrets worth rewriting text for:
# scrubbing them would change what the student's tool calls say.
SECRET_MIN_CHARS = 16


def redactor(key: str) -> Callable[[str], str]:
    """A function that replaces `key` in a string, or leaves strings alone when there is no real key."""
    if key == NO_KEY or len(key) < SECRET_MIN_CHARS:
        return lambda text: text
    return lambda text: text.replace(key, REDACTED)


class ProviderClient(Protocol):
    def request(self, system: str, tools: list[dict[str, Any]], entries: list[Entry], *, timeout: float) -> Reply: ...
    def close(self) -> None: ...


def read_key(config: ModelConfig) -> str:
    """The key from the environment variable the config names. A local endpoint (base_url set)
    may need none; a hosted provider without its key is a ConfigError naming the variable."""
    key = os.environ.get(config.key_env, "")
    if key:
        return key
    if config.base_url:
        return NO_KEY
    raise ConfigError(f"environment variable {config.key_env} is not set; it must hold the {config.provider} API key "
                      f"(or set api_key_env to the variable that does)")


def make_client(config: ModelConfig, key: str) -> ProviderClient:
    if config.provider == "anthropic":
        from .anthropic_messages import AnthropicMessages

        return AnthropicMessages(config, key)
    from .openai_chat import OpenAIChat

    return OpenAIChat(config, key)


def request_with_retries(
    client: ProviderClient, config: ModelConfig, system: str, tools: list[dict[str, Any]], entries: list[Entry], *,
    deadline: float, usage: TurnUsage, retries: list[dict[str, Any]], rng: random.Random,
    sleep: Callable[[float], None] = time.sleep, redact: Callable[[str], str] = lambda text: text,
) -> Reply:
    """One reply, retrying what is worth retrying (proctor.agents.retry) until `deadline`.
    Every call is counted in `usage` and every retry appended to `retries`; failures raise
    AgentError (infra unless the conversation itself is at fault) or AgentTimeout."""
    policy = config.retry
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
            reply = client.request(system, tools, entries, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - classified below; anything unknown is fatal
            failure = classify(exc)
            message = redact(failure.message)
            if failure.kind == "retry" and timeout < policy.request_timeout_s and time.monotonic() >= deadline - 0.05:
                raise AgentTimeout(f"the step's time ran out while waiting for the model ({message})") from None
            if failure.kind == "fatal" and failure.status is None and not _from_client_library(exc):
                # Raised by Proctor's own handling of the request or the reply, not by the
                # provider: say so, rather than blame the provider for what was sent or read.
                raise AgentError(f"the harness failed while sending the request or reading the reply (not the provider): {message}") from None
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
            wait = backoff_s(attempt, policy, rng, failure.retry_after_s)
            if time.monotonic() + wait >= deadline:
                raise AgentError(f"the provider kept failing until the step's time ran out ({attempt} tries): {message}") from None
            retries.append({"attempt": attempt, "status": failure.status, "error": message,
                            "retry_after_s": failure.retry_after_s, "wait_s": round(wait, 3)})
            sleep(wait)
            continue
        usage.input_tokens += reply.input_tokens
        usage.output_tokens += reply.output_tokens
        usage.cached_tokens += reply.cached_tokens
        if config.pricing:
            usage.cost_usd += config.pricing.cost(reply.input_tokens, reply.output_tokens, reply.cached_tokens)
        return reply



def _from_client_library(exc: BaseException) -> bool:
    """Whether an exception comes from the provider SDK or its HTTP stack (a refusal or a
    transport failure), as opposed to Proctor's own code."""
    return type(exc).__module__.split(".")[0] in ("openai", "anthropic", "httpx", "httpcore", "h11", "ssl", "socket")
