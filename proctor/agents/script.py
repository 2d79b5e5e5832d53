"""The scripted-agent file (`--agent script:PATH`, a task's oracle, a red-team attack): the turns a
ScriptedAgent replays, as a pydantic model so a malformed file fails with the field named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .. import untrusted
from ..errors import ConfigError, describe_error
from ..sandbox.models import MiB


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptTurn(_Frozen):
    """One turn of a scripted agent: a tool call, or a text message (which ends the step)."""

    tool: str | None = Field(None, description="Tool name.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Tool arguments.")
    text: str | None = Field(None, description="An assistant message without tool calls; ends the step.")

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptTurn:
        if (self.tool is None) == (self.text is None):
            raise ValueError('a turn is either {"tool": NAME, "arguments": {...}} or {"text": "..."}')
        if self.text is not None and self.arguments:
            raise ValueError("a text turn takes no arguments")
        return self


class Script(_Frozen):
    """The scripted-agent file (`--agent script:PATH`): `{"name": str, "turns": [turn, ...]}`."""

    name: str = Field(min_length=1, max_length=200)
    turns: list[ScriptTurn] = Field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """Read a script file; any problem is a ConfigError naming the file and the field."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the script file ({exc.strerror})") from None
        if len(raw) > 16 * MiB:
            raise ConfigError(f"{path}: script file is {len(raw)} bytes, above the 16 MiB limit")
        try:
            data = untrusted.loads(raw)  # a number of any size is the student's data
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{path}: {describe_error(exc)}") from None
