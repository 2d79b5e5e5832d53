"""A transcript read one page at a time, whatever its size or state.

A 100 MB transcript must open without hanging the server or the browser: a page holds at most
`EVENTS_PER_PAGE` events, read by streaming past the earlier lines, and a line over
`MAX_LINE_BYTES` is cut (with a note) instead of parsed. Damage is shown, never fatal: a line that
is not JSON is shown raw with a note, and a last line without its newline is the torn write of a
harness killed mid-event (or one still writing), said as such. Lines are split on `\\n` alone, as the
writer guarantees (docs/harness.md)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .files import Unreadable, open_regular

EVENTS_PER_PAGE = 200
MAX_LINE_BYTES = 1024 * 1024
_CHUNK = 1 << 20


@dataclass
class Line:
    """One line of the transcript: its event, or what is wrong with it and its raw text."""

    number: int  # 1-based
    event: dict[str, Any] | None
    raw: str = ""
    note: str = ""


@dataclass
class TranscriptPage:
    page: int
    pages: int
    lines: list[Line] = field(default_factory=list)
    total_lines: int = 0
    size_bytes: int = 0
    note: str = ""  # why the transcript cannot be shown at all


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def _parse(number: int, data: bytes, cut: int, torn: bool) -> Line:
    if cut:
        return Line(number, None, _decode(data), f"line {number} is {len(data) + cut} bytes; only the first {len(data)} are shown")
    if torn:
        return Line(number, None, _decode(data), "the last line is incomplete: the harness was killed mid-write, or the rollout is still running")
    try:
        event = json.loads(_decode(data))
    except ValueError as exc:
        return Line(number, None, _decode(data), f"line {number} is not valid JSON ({exc})")
    if not isinstance(event, dict):
        return Line(number, None, _decode(data), f"line {number} is not a JSON object")
    return Line(number, event)


def _lines(fd: int):
    """(bytes kept, bytes cut, torn) per line, holding at most MAX_LINE_BYTES of any line."""
    kept, cut = bytearray(), 0
    while True:
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            room = MAX_LINE_BYTES - len(kept)
            kept += piece[:room]
            cut += max(0, len(piece) - room)
            if end < 0:
                break
            yield bytes(kept), cut, False
            kept, cut = bytearray(), 0
            start = end + 1
    if kept or cut:
        yield bytes(kept), cut, True


def read_page(path: Path, page: int = 1, per_page: int = EVENTS_PER_PAGE) -> TranscriptPage:
    try:
        fd = open_regular(path)
    except Unreadable as exc:
        return TranscriptPage(page=1, pages=1, note=str(exc))
    try:
        size = os.fstat(fd).st_size
        first, last = (page - 1) * per_page, page * per_page
        lines, total = [], 0
        for index, (data, cut, torn) in enumerate(_lines(fd)):
            total = index + 1
            if first <= index < last:
                lines.append(_parse(index + 1, data, cut, torn))
        pages = max(1, -(-total // per_page))
        return TranscriptPage(page=page, pages=pages, lines=lines, total_lines=total, size_bytes=size)
    finally:
        os.close(fd)


def first_line(path: Path) -> Any:
    """The first event of a transcript (its rollout_start), or None."""
    try:
        fd = open_regular(path)
    except Unreadable:
        return None
    try:
        for data, cut, torn in _lines(fd):
            line = _parse(1, data, cut, torn)
            return line.event
        return None
    finally:
        os.close(fd)
