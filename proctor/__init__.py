"""Proctor: RL environments for AI agents that the agents cannot cheat.

What an environment author needs on day one; the machinery lives in the subpackages."""

from .custody import CustodyLimits, CustodyReport, custody_point, take_custody
from .errors import ConfigError, ConfinementError, ProctorError, SandboxError, SandboxUnavailable
from .sandbox import Device, Mount, NetworkPolicy, Sandbox, SandboxLimits, SandboxSpec
from .tools import Tool, ToolCall, ToolConfig, ToolContext, ToolResult, call_tool, default_tools, register_tool

__all__ = [
    "ConfigError", "ConfinementError", "CustodyLimits", "CustodyReport", "Device", "Mount", "NetworkPolicy",
    "ProctorError", "Sandbox", "SandboxError", "SandboxLimits", "SandboxSpec", "SandboxUnavailable", "Tool",
    "ToolCall", "ToolConfig", "ToolContext", "ToolResult", "call_tool", "custody_point",
    "default_tools", "register_tool", "take_custody",
]
