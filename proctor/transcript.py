"""The transcript: JSON lines, one event per line, appended and flushed as things happen, so a
harness killed mid-rollout leaves a readable prefix and loses nothing already written.

Every line is an object with `type`, `seq` (0, 1, 2...), `t` (seconds since the rollout began)
and the event's fields. Event types: rollout_start (instance, agent, confinement, limits),
step_start, model_turn (text, tool calls, reasoning, usage), agent_failure (what a turn that
failed cost and tried: usage, retries, empty replies), tool_result, notice, custody,
misbehaviour (an attempt: kind, detail, step, severity), observation (the same fields, for a kind
recorded but never counted: proctor/vocabulary.py), score, error, rollout_end (status, score,
reward). Everything the student produced
in it is already bounded by the tools' caps.

What a reader can trust: the file is strictly valid UTF-8 and holds exactly one event per
`\n`-terminated line, whatever the student sent. A student controls text (any code point, lone
surrogates included: they are valid JSON escapes), numbers (of any size) and bytes, so a line that
holds a character that could break a reader is written all in ASCII escapes: lone surrogates (not
encodable as UTF-8: the write would raise and end the rollout as an infra error) and the line
separators json leaves raw (U+0085, U+2028, U+2029: `str.splitlines` splits on them). Other lines
stay readable UTF-8. An integer too long
for Python's decimal conversion is written as its exact hexadecimal text ("0x..."), a NaN or
infinity as its name; nothing is dropped."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

EventType = Literal[
    "rollout_start", "step_start", "model_turn", "agent_failure", "tool_result", "notice", "custody", "misbehaviour",
    "observation", "score", "error", "rollout_end",
]
EVENT_TYPES: tuple[str, ...] = EventType.__args__  # type: ignore[attr-defined]


class Transcript:
    """An append-only JSON-lines writer. Each event is one write(2) of one line, flushed to the
    kernel at once (a SIGKILL of the harness loses nothing written); `fsync` at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self._seq = 0
        self._start = time.monotonic()
        self._lock = threading.Lock()

    def emit(self, type: EventType, **fields: Any) -> None:
        if type not in EVENT_TYPES:
            raise ValueError(f"unknown transcript event type {type!r}")
        with self._lock:
            event = {"type": type, "seq": self._seq, "t": round(time.monotonic() - self._start, 6), **fields}
            data = encode_event(event)
            while data:
                data = data[os.write(self._fd, data):]
            self._seq += 1

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Characters json.dumps(ensure_ascii=False) leaves raw that a reader must not see raw: lone
# surrogates (no UTF-8 form) and the line separators beyond the ASCII controls json escapes.
_UNSAFE = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


def encode_event(event: dict[str, Any]) -> bytes:
    """One event as one strictly valid UTF-8 JSON line ending in `\n` (the only `\n` in it):
    readable UTF-8, or all-ASCII escapes when the event holds a character that must not be raw
    (json's C encoder escapes them all at once; escaping them one by one let a student flooding
    U+2028 slow the writer a hundredfold)."""
    try:
        text = _dumps(event, ascii=False)
    except ValueError:  # a NaN, an infinity or an integer too long for str() (a model may send them)
        event = _finite(event)
        text = _dumps(event, ascii=False)
    if _UNSAFE.search(text):
        text = _dumps(event, ascii=True)
    return (text + "\n").encode("utf-8")


def _dumps(event: dict[str, Any], *, ascii: bool) -> str:
    return json.dumps(event, ensure_ascii=ascii, default=_plain, allow_nan=False)


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", errors="surrogateescape")  # invalid bytes kept, escaped as \udcXX
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _finite(value: Any) -> Any:
    """`value` with what JSON (or Python's str()) cannot write as a number turned into exact text."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(value)
    if isinstance(value, int) and not isinstance(value, bool) and _too_long(value):
        return hex(value)
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="python")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_finite(v) for v in value]
    return value


def _too_long(value: int) -> bool:
    try:
        str(value)
    except ValueError:  # more digits than sys.get_int_max_str_digits()
        return True
    return False


def read_transcript(path: Path) -> list[dict[str, Any]]:
    """The events of a transcript; a torn last line (the writer was killed mid-write) is dropped.
    Lines are split on `\n` alone (never `str.splitlines`, which also splits on U+2028 and other
    separators an older writer may have left raw inside a string)."""
    events = []
    for line in path.read_bytes().split(b"\n"):
        if not line:
            continue
        try:
            events.append(json.loads(line.decode("utf-8", errors="surrogateescape")))
        except ValueError:
            break
    return events


# -- typed events, for readers that act on them (the detectors) ------------------------------------


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    type: EventType
    seq: int = -1
    t: float | str = 0.0


class TranscriptToolCall(BaseModel):
    """One tool call as a model_turn event holds it (the student chose every field)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: Any = "?"
    name: Any = "?"
    arguments: Any = None


class ModelTurnEvent(_Event):
    """A `model_turn` event: what the agent said and the tool calls it made in `step`."""

    type: Literal["model_turn"] = "model_turn"
    step: int | None = None
    tool_calls: list[TranscriptToolCall] = Field(default_factory=list)


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a transcript, each line parsed once as it is read (streaming: a long
    transcript is never held whole); a torn or unreadable line is skipped. A file that cannot be
    opened yields nothing."""
    try:
        with open(path, "rb") as f:  # lines end at b"\n" alone, as the writer guarantees
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    yield event
    except OSError:
        return


def model_turns(path: Path, step: int | None = None) -> Iterator[ModelTurnEvent]:
    """The transcript's model_turn events (of `step` only, when given), typed. An event that does
    not fit the model (a hand-edited or foreign line) is skipped, not trusted."""
    for event in iter_events(path):
        if event.get("type") != "model_turn" or (step is not None and event.get("step") != step):
            continue
        try:
            yield ModelTurnEvent.model_validate(event)
        except ValidationError:
            continue
