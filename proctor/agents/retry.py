"""Which provider failures are worth retrying, and how long to wait before the next try.

Both official SDKs raise the same shapes: a status error with the HTTP status and headers, a
connection error, a timeout. Retried: 408, 409, 429, 5xx (529 is Anthropic's "overloaded"),
dropped connections, timeouts, and a 200 whose body is not a usable reply. Not retried: requests
that can never succeed (400, 404, 422: invalid; a prompt longer than the context window). A
refused key (401, 403) gets a couple of tries, since keys rotate, and then fails."""

from __future__ import annotations

import email.utils
import json
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Literal

from .model_config import RetryPolicy

_CONTEXT_TOO_LONG = re.compile(
    r"context.length|context_length_exceeded|maximum context|context window|prompt is too long|too many tokens"
    r"|reduce the length|input is too long|exceeds the model's|context limit|context size", re.IGNORECASE)
# Refusals that look retryable but never pass (an account out of credit).
_PERMANENT = re.compile(r"insufficient_quota|exceeded your current quota|credit balance is too low|billing", re.IGNORECASE)
_RETRY_STATUS = {408, 409, 425, 429}


class BadReply(Exception):
    """A 200 response that is not a usable reply (no choices, no content field): retried."""


@dataclass(frozen=True)
class Failure:
    kind: Literal["retry", "auth", "context", "fatal"]
    message: str
    status: int | None = None
    retry_after_s: float | None = None


def classify(exc: BaseException) -> Failure:
    """What an exception from a provider SDK (openai or anthropic) means for retrying."""
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    message = _message(exc)
    if isinstance(exc, (BadReply, json.JSONDecodeError)):
        return Failure("retry", f"unusable reply: {exc}")
    if status is None:
        if "Timeout" in name or "Connection" in name or isinstance(exc, (TimeoutError, ConnectionError)):
            return Failure("retry", f"{name}: {message}")
        return Failure("fatal", f"{name}: {message}")
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    retry_after = retry_after_s(headers)
    text = f"HTTP {status}: {message}"
    if status in (400, 413) and _CONTEXT_TOO_LONG.search(message):
        return Failure("context", text, status)
    if status in (401, 403):
        return Failure("auth", text, status, retry_after)
    if _PERMANENT.search(message) or str(headers.get("x-should-retry", "")).lower() == "false":
        return Failure("fatal", text, status)
    if status in _RETRY_STATUS or status >= 500:
        return Failure("retry", text, status, retry_after)
    return Failure("fatal", text, status)


def retry_after_s(headers: Any) -> float | None:
    """Seconds asked for by `retry-after-ms`, or `retry-after` (seconds or an HTTP date)."""
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(float(ms) / 1000, 0.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(float(value), 0.0)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(when.timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


def backoff_s(retry: int, policy: RetryPolicy, rng: random.Random, retry_after: float | None) -> float:
    """Exponential backoff with full jitter before retry number `retry` (1-based), never shorter
    than what the provider asked for."""
    ceiling = min(policy.max_delay_s, policy.base_delay_s * 2 ** (retry - 1))
    wait = rng.uniform(0, ceiling)
    return max(wait, retry_after) if retry_after is not None else wait


def _message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            parts = [inner.get(k) for k in ("message", "code", "type")]
            text = " ".join(p for p in parts if isinstance(p, str))
            if text:
                return text[:500]
        if isinstance(inner, str):
            return inner[:500]
    if isinstance(body, str) and body:
        return body[:500]
    return (str(exc) or type(exc).__name__)[:500]
