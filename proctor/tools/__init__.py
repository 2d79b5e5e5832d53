"""proctor.tools: what the student can do. Every tool executes inside the student's sandbox, as
the student; the harness only passes bounded bytes in and out.

    from proctor.tools import ToolContext, ToolCall, default_tools, call_tool

    with ToolContext(box) as ctx:                      # box: a proctor.sandbox.Sandbox
        tools = default_tools()                        # bash, read_file, write_file, submit
        result = call_tool(tools, ToolCall(name="bash", arguments={"command": "ls"}), ctx)
        result.model_dump()                            # what the transcript records

Shipped tools (TOOLS): bash, read_file, write_file, str_replace, list_dir, submit. A task picks
them by name with make_tools([...]).

Adding a tool: subclass Tool, give it a `name`, a `description`, an `Arguments` model (a subclass
of proctor.tools.Arguments: unknown fields are refused and bad ones reported by name) and an
`execute(args, ctx)` that does its work inside the sandbox, never on host paths. The simplest way
is a Python helper run by the system interpreter as the student (see proctor.tools.inside):

    from pydantic import Field
    from proctor.tools import Arguments, Tool, ToolResult, register_tool, run_inside

    class CountLinesArgs(Arguments):
        path: str = Field(min_length=1, max_length=4096)

    @register_tool
    class CountLines(Tool):
        name = "count_lines"
        description = "Count the lines of a text file."
        Arguments = CountLinesArgs

        def execute(self, args, ctx):
            got = run_inside(ctx, '''
    fd, st = open_regular(resolve(args["path"]), os.O_RDONLY)
    reply({"lines": read_upto(fd, 1 << 30).count(b"\\n")})
    ''', {"path": args.path}, what="count_lines")
            if got.error:
                return ToolResult.failure(got.error)
            return ToolResult(output=str(got.meta["lines"]))

A shell-based tool can equally call ctx.sandbox.run([...], timeout=..., output_cap=...)."""

from .base import Arguments, Tool, ToolCall, ToolConfig, ToolContext, ToolResult
from .bash import BashTool, ShellSession
from .files import ListDirTool, ReadFileTool, StrReplaceTool, WriteFileTool
from .inside import run_inside
from .registry import DEFAULT_TOOL_NAMES, TOOLS, call_tool, default_tools, make_tools, register_tool
from .submit import SubmitTool

__all__ = [
    "DEFAULT_TOOL_NAMES", "TOOLS", "Arguments", "BashTool", "ListDirTool", "ReadFileTool", "ShellSession",
    "StrReplaceTool", "SubmitTool", "Tool", "ToolCall", "ToolConfig", "ToolContext", "ToolResult", "WriteFileTool",
    "call_tool", "default_tools", "make_tools", "register_tool", "run_inside",
]
