"""Proctor: RL environments for AI agents that the agents cannot cheat.

What an environment author needs on day one; the machinery lives in the subpackages:

    from proctor import Task, Step, Limits, Script, ExactAnswer, run_rollout, Episode, Action
"""

from .custody import CustodyLimits, CustodyReport, custody_point, take_custody
from .errors import ConfigError, ConfinementError, ProctorError, SandboxError, SandboxUnavailable
from .episode import Action, AsyncEpisode, Episode
from .harness import RolloutConfig, run_rollout
from .judges import (
    AllOf, AnyOf, CommandJudge, Criterion, ExactAnswer, FunctionJudge, Gate, Judge, JudgeContext, NumericAnswer, RegexMatch,
    RubricJudge, TestSuiteJudge, Verdict, WeightedSum,
)
from .results import RolloutResult
from .sandbox import Device, Mount, NetworkPolicy, Sandbox, SandboxLimits, SandboxSpec
from .tasks import Family, Instance, Limits, Script, Step, Task, load_environment
from .tools import Tool, ToolCall, ToolConfig, ToolContext, ToolResult, call_tool, default_tools, register_tool

__all__ = [
    "Action", "AsyncEpisode", "Episode",
    "AllOf", "AnyOf", "CommandJudge", "ConfigError", "Criterion", "ConfinementError", "CustodyLimits", "CustodyReport", "Device",
    "ExactAnswer", "Family", "FunctionJudge", "Gate", "Instance", "Judge", "JudgeContext", "Limits", "Mount",
    "NetworkPolicy", "NumericAnswer", "ProctorError", "RegexMatch", "RolloutConfig", "RolloutResult", "RubricJudge",
    "Sandbox", "SandboxError", "SandboxLimits", "SandboxSpec", "SandboxUnavailable", "Script", "Step", "Task",
    "TestSuiteJudge", "Tool", "ToolCall", "ToolConfig", "ToolContext", "ToolResult", "Verdict", "WeightedSum",
    "call_tool", "custody_point", "default_tools", "load_environment", "register_tool", "run_rollout", "take_custody",
]
