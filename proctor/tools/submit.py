"""submit: the student says the step is done. Nothing runs in the sandbox; the harness sees
`ends_step` and takes custody. The optional answer is bounded, so it cannot carry a flood into
the transcript or a judge prompt."""

from __future__ import annotations

from pydantic import Field

from .base import Arguments, Tool, ToolContext, ToolResult


class SubmitArgs(Arguments):
    answer: str | None = Field(None, description="Optional short final answer.")


class SubmitTool(Tool):
    name = "submit"
    description = "Finish the current step. Call it when the work is done; it ends your turn."
    Arguments = SubmitArgs

    def execute(self, args: SubmitArgs, ctx: ToolContext) -> ToolResult:
        limit = ctx.config.answer_limit_chars
        if args.answer is not None and len(args.answer) > limit:
            # Not ending the step: the student can resubmit a shorter answer.
            return ToolResult.over_limit("submit", "answer", len(args.answer), limit, unit="characters")
        return ToolResult(output="submitted", ends_step=True, answer=args.answer)
