"""A real LLM behind a RubricJudge: the openai or anthropic SDK, with the same run config, key
rules and retries as a model-driven student. It lives with the agents, which own every provider
client, and implements the judges' JudgeModel protocol (judges sit below agents and never import them).

    RubricJudge(rubric="...", model=ProviderJudgeModel(ModelConfig(provider="anthropic", model="claude-x")))

The key is read when the judge first grades, not when the environment is loaded, so listing or
checking tasks needs no key. A provider that keeps failing raises JudgeModelError, which the
RubricJudge turns into an infra error after its own attempts: never a student's 0."""

from __future__ import annotations

import random
import threading
import time

from ..errors import ConfigError
from ..judges.rubric import JudgeModel, JudgeModelError
from .base import AgentError, TurnUsage
from .conversation import UserText
from .model_config import ModelConfig
from .provider import ProviderClient, make_client, read_key, redactor, request_with_retries


class ProviderJudgeModel(JudgeModel):
    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._client: ProviderClient | None = None
        self._redact = redactor("")

    def describe(self) -> str:
        return f"{self.config.provider}:{self.config.model}"

    def _connect(self) -> ProviderClient:
        with self._lock:
            if self._client is None:
                try:
                    key = read_key(self.config)
                except ConfigError as exc:
                    raise JudgeModelError(str(exc)) from None
                self._redact = redactor(key)
                self._client = make_client(self.config, key)
            return self._client

    def complete(self, system: str, user: str, timeout_s: float) -> str:
        client = self._connect()
        try:
            reply = request_with_retries(
                client, self.config, system, [], [UserText(user)], deadline=time.monotonic() + timeout_s,
                usage=TurnUsage(), retries=[], rng=random.Random(), redact=self._redact)
        except AgentError as exc:
            raise JudgeModelError(str(exc)) from None
        if not (reply.text or "").strip():
            raise JudgeModelError(f"the judge model gave an empty reply (stop reason: {reply.stop_reason})")
        return self._redact(reply.text or "")

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
