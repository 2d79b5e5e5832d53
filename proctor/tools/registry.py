"""Which tools a task offers, by name, and dispatching one call to its tool."""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterable, Mapping

from ..errors import ProctorError
from .base import Tool, ToolCall, ToolContext, ToolResult
from .bash import BashTool
from .files import ListDirTool, ReadFileTool, StrReplaceTool, WriteFileTool
from .submit import SubmitTool

# Every tool Proctor ships, by name. register_tool() adds a custom one.
TOOLS: dict[str, type[Tool]] = {
    cls.name: cls for cls in (BashTool, ReadFileTool, WriteFileTool, StrReplaceTool, ListDirTool, SubmitTool)
}
DEFAULT_TOOL_NAMES = ("bash", "read_file", "write_file", "submit")


def register_tool(cls: type[Tool]) -> type[Tool]:
    """Make a Tool subclass available by its name (usable as a class decorator)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"tool {cls.__name__} needs a `name` that is an identifier, got {name!r}")
    if name in TOOLS and TOOLS[name] is not cls:
        raise ValueError(f"a tool named {name!r} is already registered ({TOOLS[name].__name__})")
    TOOLS[name] = cls
    return cls


def make_tools(names: Iterable[str]) -> list[Tool]:
    """Instances of the named tools, in that order."""
    out: list[Tool] = []
    for name in names:
        if name not in TOOLS:
            raise ValueError(f"unknown tool {name!r}; known tools: {', '.join(sorted(TOOLS))}")
        out.append(TOOLS[name]())
    return out


def default_tools() -> list[Tool]:
    """bash, read_file, write_file, submit: the tools a task offers unless it says otherwise."""
    return make_tools(DEFAULT_TOOL_NAMES)


def call_tool(tools: Iterable[Tool] | Mapping[str, Tool], call: ToolCall, ctx: ToolContext) -> ToolResult:
    """Run one call against the offered tools. A name not offered is an error result, not an
    exception: the student asked for it, so the transcript should show it.

    Arguments are the student's content: a tool that raises on them (a bug the student's input
    found) answers with an error result that names the exception, so the rollout stays the
    student's, with custody, detectors and the judge still run, rather than ending as an infra
    error (which trainers mask, hiding any hack earlier in the rollout). The traceback goes into
    the result's `internal_error` for maintainers. The harness's own failures (ProctorError, e.g.
    a SandboxError) still propagate."""
    by_name = dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools}
    tool = by_name.get(call.name)
    if tool is None:
        return ToolResult.failure(f"no tool named {call.name!r}; available: {', '.join(sorted(by_name)) or 'none'}",
                                  started=time.monotonic())
    started = time.monotonic()
    try:
        return tool.run(call.arguments, ctx)
    except ProctorError:
        raise
    except Exception as exc:  # noqa: BLE001 - see above: the student's input, the student's result
        return ToolResult.failure(f"{call.name}: the tool failed on these arguments ({type(exc).__name__}: {str(exc)[:300]})",
                                  started=started, internal_error="".join(traceback.format_exception(exc))[-4000:])
