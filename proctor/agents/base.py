"""What the harness and an agent say to each other.

The harness drives: it gives the agent what happened since its last turn (the step's
instructions, tool results, notices about budgets) and asks for the next turn. A turn is text, or
tool calls, or both; text with no tool calls ends the step. Scripted agents, the oracle and (in
proctor.agents.model) real models all fit this one small interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ProctorError
from ..tools.base import ToolCall


class AgentError(ProctorError):
    """The agent could not produce a turn. `infra=True` (the provider failed, retries ran out)
    makes the rollout an infra_error; `infra=False` means the agent itself is at fault."""

    def __init__(self, message: str, *, infra: bool = True) -> None:
        super().__init__(message)
        self.infra = infra
        self.usage: TurnUsage | None = None
        """What the failed turn cost (calls, retries, tokens), counted in the result."""
        self.extra: dict[str, Any] = {}
        """Provider data for the transcript (the retries made, the empty replies seen)."""


class AgentTimeout(AgentError):
    """The step's time ran out while the agent was waiting for its model: the step ends by time,
    like a tool call cut at the deadline (not an infra error)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, infra=False)


class Observation(BaseModel):
    """One thing the agent is told."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["instructions", "tool_result", "notice"]
    text: str
    call_id: str | None = Field(None, description="For tool results: the call it answers.")
    tool: str | None = None


class TurnUsage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    calls: int = 0
    retries: int = 0
    cost_usd: float = 0.0


class AgentTurn(BaseModel):
    """What the agent did in one turn."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasoning: str | None = Field(None, description="Reasoning/thinking content, kept for the transcript.")
    usage: TurnUsage = Field(default_factory=TurnUsage)
    finished: bool = Field(False, description="The agent has nothing more to do at all (e.g. a script ran out); ends the rollout's agent work.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Provider data for the transcript (token ids, logprobs...).")


class Agent(ABC):
    """A student. `begin` once per rollout, then `next_turn` until the harness stops asking."""

    name: str = "agent"

    def begin(self, *, system_prompt: str, tools: list[dict[str, Any]], task_id: str) -> None:
        """Called once before the first turn with the system prompt and the tools' specs."""

    @abstractmethod
    def next_turn(self, observations: list[Observation], *, deadline: float) -> AgentTurn:
        """The next turn, given what happened since the last one. Must return by `deadline`
        (time.monotonic()); raise AgentError when it cannot."""

    def close(self) -> None:
        """Release whatever the agent holds (connections...)."""
