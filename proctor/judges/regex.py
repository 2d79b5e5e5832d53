"""`RegexMatch`: the student's final answer matches a pattern.

It matches `ctx.answer` only: the student's own final answer, never the prompt, the instructions
or tool output. A judge that searched the whole transcript would give the point to a student that
merely echoed the instructions or `cat`ed a file holding the expected string.

The pattern is compiled when the task is built, so a bad pattern is a ValidationError naming the
`pattern` field, not a crash at grading time. The answer is capped at `max_chars` before matching.

What it does not defend against: catastrophic backtracking. Python's `re` cannot be interrupted
and holds the GIL, so a pattern with nested quantifiers (`(a+)+$`) run on a long adversarial
answer can stall the harness past the judge's bound. `max_chars` limits the damage; the task
author must still write patterns without nested unbounded quantifiers."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, PrivateAttr, field_validator

from .base import Judge, JudgeContext, Verdict

__all__ = ["RegexMatch"]


class RegexMatch(Judge):
    """Score 1 when the final answer matches `pattern` (`fullmatch` by default, or `search`)."""

    pattern: str = Field(description="A Python regular expression, matched against the final answer only.")
    mode: Literal["search", "fullmatch"] = Field("fullmatch", description="'fullmatch': the whole answer must match; 'search': anywhere in it.")
    ignore_case: bool = Field(False, description="Match case-insensitively (re.IGNORECASE).")
    max_chars: int = Field(10_000, gt=0, le=10_000_000, description="Longer answers score 0 without being matched.")

    _compiled: re.Pattern[str] = PrivateAttr()

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    def model_post_init(self, context: object, /) -> None:
        self._compiled = re.compile(self.pattern, re.IGNORECASE if self.ignore_case else 0)

    def grade(self, ctx: JudgeContext) -> Verdict:
        answer = ctx.answer
        if answer is None:
            return Verdict.zero("no final answer (the step ended without a submitted answer or a final message)")
        if not isinstance(answer, str):
            return Verdict.zero(f"the final answer is {type(answer).__name__}, not text")
        if len(answer) > self.max_chars:
            return Verdict.zero(f"the final answer is {len(answer)} characters, above the cap of {self.max_chars}", metadata={"chars": len(answer)})
        match = self._compiled.fullmatch(answer) if self.mode == "fullmatch" else self._compiled.search(answer)
        if match is None:
            return Verdict.zero(f"the final answer does not match the expected pattern ({self.mode})", metadata={"chars": len(answer)})
        return Verdict(score=1.0, explanation=f"the final answer matches ({self.mode})", metadata={"chars": len(answer)})
