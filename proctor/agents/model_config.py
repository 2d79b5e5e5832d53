"""How a model-driven student is reached and sampled: the run config of `--agent model:NAME`.

    # run.toml
    provider = "openai"                      # or "anthropic"
    model = "Qwen/Qwen3-8B"
    base_url = "http://127.0.0.1:8000/v1"    # vLLM, SGLang, OpenRouter, a hosted provider
    api_key_env = "VLLM_API_KEY"             # the NAME of an environment variable, never a key
    temperature = 0.7
    max_output_tokens = 4096
    token_data = true                        # ask for token ids and logprobs (vLLM, SGLang)

    [context]
    window_tokens = 32768

A key is only ever read from the environment variable named here, in the harness's process: it
is never written to a file Proctor owns, never passed on a command line, and never reaches a
sandbox. A config that holds something that looks like a literal key is refused."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError, describe_error

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Header names that carry credentials: they must come from api_key_env, not from a file.
_SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "proxy-authorization", "cookie"}
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def read_config_table(path: str | Path, what: str) -> dict[str, Any]:
    """The table of a TOML file (JSON when it ends in .json); any problem is a one-line ConfigError
    naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the {what} must be a table/object")
    return data


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetryPolicy(_Strict):
    """Retries of one provider request. Rate limits, overloads, timeouts, dropped connections and
    5xx are retried with exponential backoff and full jitter, waiting at least what `retry-after`
    asks; requests that can never succeed (invalid, too long) are not retried."""

    max_attempts: int = Field(8, ge=1, le=100, description="Tries of one request, the first included.")
    base_delay_s: float = Field(1.0, ge=0, le=600, description="Backoff before the first retry; doubles each time.")
    max_delay_s: float = Field(60.0, ge=0, le=3600, description="Longest backoff between two tries.")
    max_retry_after_s: float = Field(600.0, ge=0, le=86400, description="A retry-after longer than this is not waited for: the request fails.")
    auth_attempts: int = Field(2, ge=1, le=10, description="Tries while the provider refuses the key (401/403): keys rotate, but a bad key never works.")
    request_timeout_s: float = Field(600.0, gt=0, le=7200, description="Longest one request may take (also clipped to the step's time left).")


class ContextPolicy(_Strict):
    """Keeping a long rollout inside the model's context window. The transcript keeps everything;
    only what is sent to the model is pruned."""

    window_tokens: int | None = Field(None, ge=256, description="The model's context window; None: never prune.")
    trigger_fraction: float = Field(0.85, gt=0, le=1, description="Prune when the next request would exceed this share of the window.")
    target_fraction: float = Field(0.6, gt=0, le=1, description="Prune down to this share of the window.")
    keep_last_turns: int = Field(4, ge=1, le=1000, description="The most recent assistant turns (and their tool results) are never pruned.")
    chars_per_token: float = Field(4.0, gt=0, le=100, description="Estimate of the tokens in text not yet measured by the provider.")
    strategy: Literal["drop_oldest_tool_outputs", "none"] = Field(
        "drop_oldest_tool_outputs",
        description="drop_oldest_tool_outputs: replace the oldest tool outputs by a note, then drop the oldest whole turns; "
                    "the first instructions and the last turns always stay.")

    @model_validator(mode="after")
    def _order(self) -> ContextPolicy:
        if self.target_fraction > self.trigger_fraction:
            raise ValueError("target_fraction must not exceed trigger_fraction")
        return self


class Pricing(_Strict):
    """Dollars per million tokens, for cost budgets (Limits.max_cost_usd) and the result's cost."""

    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)
    cached_input_per_mtok: float | None = Field(None, ge=0, description="Cached input tokens; None: the input price.")

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> float:
        cached_price = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        fresh = max(input_tokens - cached_tokens, 0)
        return (fresh * self.input_per_mtok + cached_tokens * cached_price + output_tokens * self.output_per_mtok) / 1e6


class ModelConfig(_Strict):
    """Everything about the model behind `--agent model:NAME` except the key itself."""

    provider: Literal["openai", "anthropic"] = Field("openai", description="openai: Chat Completions (any OpenAI-compatible server); anthropic: the Messages API.")
    model: str = Field(min_length=1, max_length=300, description="The model name the endpoint knows.")
    base_url: str | None = Field(None, description="Endpoint base URL; None: the provider's own.")
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY).")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    max_output_tokens: int = Field(4096, ge=1, le=1_000_000, description="Most tokens one reply may have.")
    stop: list[str] = Field(default_factory=list, max_length=16)
    reasoning_effort: str | None = Field(None, description="OpenAI-style reasoning effort (low, medium, high...), passed through.")
    thinking_budget_tokens: int | None = Field(None, ge=1024, description="Anthropic extended thinking budget; None: thinking off.")
    reasoning_passback: Literal["auto", "always", "never"] = Field(
        "auto",
        description="OpenAI-compatible servers: whether earlier turns' reasoning goes back in the request. auto: the "
                    "provider's opaque reasoning_details go back (OpenRouter needs them), plain reasoning text does not "
                    "(DeepSeek-style servers reject it). Anthropic thinking blocks always go back unchanged, as that API requires.")
    token_data: bool = Field(False, description="Ask for prompt and completion token ids and logprobs (vLLM, SGLang) and record them per turn.")
    top_logprobs: int = Field(0, ge=0, le=20)
    empty_turn_nudges: int = Field(2, ge=0, le=10, description="Times an empty reply (no text, no tool call) is answered with a nudge before the step ends with an error.")
    nudge_text: str = Field("Your last reply was empty. Continue the task: call a tool, or answer in text if you are done.", max_length=2000)
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Extra request fields passed through unchanged (e.g. vLLM's top_k).")
    extra_headers: dict[str, str] = Field(default_factory=dict, description="Extra request headers; credentials are refused here.")
    retry: RetryPolicy = RetryPolicy()
    context: ContextPolicy = ContextPolicy()
    pricing: Pricing | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_literal_key(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in ("api_key", "key", "token", "auth_token", "apikey"):
                if name in data:
                    raise ValueError(f"{name}: a literal key is never read from a config; set api_key_env to the name of an environment variable that holds it")
        return data

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError("that is not an environment variable name (the value is not repeated here); api_key_env names the variable, it never holds the key")
        return value

    @field_validator("extra_headers")
    @classmethod
    def _no_secret_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name.lower() in _SECRET_HEADERS:
                raise ValueError(f"header {name!r} carries credentials; the key comes from api_key_env only")
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/@]+(/\S*)?$", value):
            raise ValueError("must be an http(s) URL without credentials (the value is not repeated here)")
        return value

    @model_validator(mode="after")
    def _thinking_fits(self) -> ModelConfig:
        if self.thinking_budget_tokens is not None and self.thinking_budget_tokens >= self.max_output_tokens:
            raise ValueError(f"thinking_budget_tokens ({self.thinking_budget_tokens}) must be below max_output_tokens "
                             f"({self.max_output_tokens}): the API counts thinking inside max_tokens")
        return self

    @property
    def key_env(self) -> str:
        return self.api_key_env or DEFAULT_KEY_ENV[self.provider]

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> ModelConfig:
        """Read a TOML or JSON run config; `overrides` (flags) win over the file. Any problem is a
        one-line ConfigError naming the file and the field."""
        data = read_config_table(path, "model config")
        return cls.build({**data, **overrides}, origin=str(path))

    @classmethod
    def build(cls, data: dict[str, Any], origin: str = "model config") -> ModelConfig:
        try:
            return cls.model_validate({k: v for k, v in data.items() if v is not None})
        except ValidationError as exc:
            raise ConfigError(f"{origin}: {describe_error(exc)}") from None
