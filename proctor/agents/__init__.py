"""proctor.agents: the students. Scripted agents, the oracle, the null agent, and the model-driven
agent over the openai and anthropic SDKs (imported only when a model agent is made)."""

from .base import Agent, AgentError, AgentTimeout, AgentTurn, Observation, TurnUsage
from .model import ModelAgent
from .model_config import ContextPolicy, ModelConfig, Pricing, RetryPolicy
from .scripted import NullAgent, ScriptedAgent, make_agent

__all__ = ["Agent", "AgentError", "AgentTimeout", "AgentTurn", "ContextPolicy", "ModelAgent", "ModelConfig", "NullAgent",
           "Observation", "Pricing", "RetryPolicy", "ScriptedAgent", "TurnUsage", "make_agent"]
