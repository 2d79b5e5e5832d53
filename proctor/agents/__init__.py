"""proctor.agents: the students. Scripted agents and the oracle for now."""

from .base import Agent, AgentError, AgentTurn, Observation, TurnUsage
from .scripted import NullAgent, ScriptedAgent, make_agent

__all__ = ["Agent", "AgentError", "AgentTurn", "NullAgent", "Observation", "ScriptedAgent", "TurnUsage", "make_agent"]
