"""The transcript: JSON lines, one event per line, appended and flushed as things happen, so a
harness killed mid-rollout leaves a readable prefix and loses nothing already written.

Every line is an object with `type`, `seq` (0, 1, 2...), `t` (seconds since the rollout began)
and the event's fields. Event types: rollout_start (instance, agent, confinement, limits),
step_start, model_turn (text, tool calls, reasoning, usage), agent_failure (what a turn that
failed cost and tried: usage, retries, empty replies), tool_result, notice, custody,
misbehaviour, score, error, rollout_end (status, score, reward). Everything the student produced
in it is already bounded by the tools' caps."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Literal

EventType = Literal[
    "rollout_start", "step_start", "model_turn", "agent_failure", "tool_result", "notice", "custody", "misbehaviour",
    "score", "error", "rollout_end",
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
            try:
                line = json.dumps(event, ensure_ascii=False, default=_plain, allow_nan=False) + "\n"
            except ValueError:  # a NaN or infinity somewhere (a model may send them): keep it as text
                line = json.dumps(_finite(json.loads(json.dumps(event, default=_plain))), ensure_ascii=False) + "\n"
            data = line.encode("utf-8", errors="surrogateescape")
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


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def read_transcript(path: Path) -> list[dict[str, Any]]:
    """The events of a transcript; a torn last line (the writer was killed mid-write) is dropped."""
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            break
    return events
