"""Agents that need no model: a script replayed turn by turn, the task's oracle, and the null
agent (does nothing), used by tests, hack reproductions, the demo and the red team; and
`make_agent`, which builds any agent (model-driven ones too) from its `--agent` spec."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..tools.base import ToolCall
from .base import Agent, AgentTurn, Observation
from .model_config import ModelConfig
from .script import Script

if TYPE_CHECKING:  # make_agent reads only task.id and task.oracle; tasks sit above agents
    from ..tasks.models import Task


class ScriptedAgent(Agent):
    """Plays a Script: each tool turn is one tool call, each text turn ends the step. When the
    script runs out the agent is finished."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.name = f"script:{script.name}"
        self._turns: Iterator = iter(enumerate(script.turns))

    def next_turn(self, observations: list[Observation], *, deadline: float) -> AgentTurn:
        for index, turn in self._turns:
            if turn.text is not None:
                return AgentTurn(text=turn.text)
            return AgentTurn(tool_calls=[ToolCall(name=turn.tool, arguments=dict(turn.arguments), id=f"call-{index}")])
        return AgentTurn(finished=True)


class NullAgent(Agent):
    """Does nothing: the validity floor of a task (it must score 0)."""

    name = "null"

    def next_turn(self, observations: list[Observation], *, deadline: float) -> AgentTurn:
        return AgentTurn(finished=True)


def make_agent(spec: str, task: Task, model: ModelConfig | None = None) -> Agent:
    """`script:PATH`, `oracle`, `null` or `model:NAME` (with `model`, the run's model config, for
    everything but the name); anything else is a ConfigError naming the choices."""
    kind, _, arg = spec.partition(":")
    if kind == "script" and arg:
        return ScriptedAgent(Script.load(Path(arg)))
    if kind == "oracle" and not arg:
        if task.oracle is None:
            raise ConfigError(f"task {task.id!r} has no oracle (set Task.oracle to a reference Script)")
        agent = ScriptedAgent(task.oracle)
        agent.name = "oracle"
        return agent
    if kind == "null" and not arg:
        return NullAgent()
    if kind == "model":
        from .model import ModelAgent

        if not arg and model is None:
            raise ConfigError("--agent model:NAME needs the model's name (or a --model-config file naming it)")
        config = model.model_copy(update={"model": arg}) if model and arg else model or ModelConfig(model=arg)
        return ModelAgent(config)
    raise ConfigError(f"unknown agent {spec!r}; use script:PATH, oracle, null or model:NAME")
