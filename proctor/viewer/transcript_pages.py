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
    if not data and not torn:
        return Line(number, None, "", f"line {number} is empty")
    if torn:
        return Line(number, None, _decode(data), "the last line is incomplete: the harness was killed mid-write, or the rollout is still running")
    try:
        event = json.loads(_decode(data))
    except ValueError as exc:
        return Line(number, None, _decode(data), f"line {number} is not valid JSON ({exc})")
    if not isinstance(event, dict):
        return Line(number, None, _decode(data), f"line {number} is not a JSON object")
    return Line(number, event)


def _page_lines(fd: int, first: int, last: int) -> tuple[list[tuple[int, bytes, int, bool]], int]:
    """(index, bytes kept, bytes cut, torn) of the lines with first <= index < last, and how many
    lines there are. Only lines in the window are copied (at most MAX_LINE_BYTES each); the lines
    after it are only counted, in C, so any page of a 100 MB transcript costs about one read of it."""
    found: list[tuple[int, bytes, int, bool]] = []
    index, kept, cut, partial = 0, bytearray(), 0, False
    while chunk := os.read(fd, _CHUNK):
        pos, size = 0, len(chunk)
        while pos < size:
            if index >= last:
                count = chunk.count(b"\n", pos)
                index += count
                partial = (partial or pos < size) if count == 0 else not chunk.endswith(b"\n")
                break
            end = chunk.find(b"\n", pos)
            stop = size if end < 0 else end
            if index >= first:
                room = MAX_LINE_BYTES - len(kept)
                kept += chunk[pos:min(stop, pos + room)]
                cut += max(0, stop - pos - room)
            partial = partial or stop > pos
            if end < 0:
                break
            if index >= first:
                found.append((index, bytes(kept), cut, False))
                kept, cut = bytearray(), 0
            index, partial, pos = index + 1, False, end + 1
    if partial:  # a last line without its newline: a torn write
        if first <= index < last:
            found.append((index, bytes(kept), cut, True))
        index += 1
    return found, index


def read_page(path: Path, page: int = 1, per_page: int = EVENTS_PER_PAGE) -> TranscriptPage:
    try:
        fd = open_regular(path)
    except Unreadable as exc:
        return TranscriptPage(page=1, pages=1, note=str(exc))
    try:
        size = os.fstat(fd).st_size
        found, total = _page_lines(fd, (page - 1) * per_page, page * per_page)
        lines = [_parse(index + 1, data, cut, torn) for index, data, cut, torn in found]
        pages = max(1, -(-total // per_page))
        return TranscriptPage(page=page, pages=pages, lines=lines, total_lines=total, size_bytes=size)
    finally:
        os.close(fd)


def first_line(path: Path) -> Any:
    """The first event of a transcript (its rollout_start), or None; reads at most its first line."""
    try:
        fd = open_regular(path)
    except Unreadable:
        return None
    try:
        data = bytearray()
        while b"\n" not in data and len(data) <= MAX_LINE_BYTES and (chunk := os.read(fd, 64 * 1024)):
            data += chunk
    finally:
        os.close(fd)
    end = data.find(b"\n")
    if end < 0:
        return None
    return _parse(1, bytes(data[:end]), 0, False).event
