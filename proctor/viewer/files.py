"""Reading run directories without trusting them and without changing them.

The files are the harness's, but what is in them is the student's, and a directory may be half
written (a batch still running, a harness killed mid-write) or damaged. So every open is read-only,
refuses anything but a regular file (a FIFO would hang the server, a link could point anywhere on
the host), and every read is bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

RESULT = "result.json"
TRANSCRIPT = "transcript.jsonl"
RAW_FILES = (RESULT, TRANSCRIPT)
# A result.json is a few kilobytes; anything far larger is damage, not a result to parse.
MAX_RESULT_BYTES = 16 * 1024 * 1024


class Unreadable(Exception):
    """A file the viewer will not or cannot read; the message is one line for the page."""


def open_regular(path: Path) -> int:
    """A read-only descriptor of `path` if it is a regular file. O_NOFOLLOW: a link planted in a
    run directory is not followed; O_NONBLOCK: a FIFO cannot hang the open (and is refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Unreadable(f"{path.name} is missing") from None
    except OSError as exc:
        raise Unreadable(f"{path.name} cannot be opened ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Unreadable(f"{path.name} is not a regular file")
    return fd


def read_bounded(path: Path, limit: int = MAX_RESULT_BYTES) -> bytes:
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise Unreadable(f"{path.name} is {size} bytes, over the viewer's {limit}-byte limit")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def regular_stat(path: Path) -> os.stat_result | None:
    """The lstat of `path` if it is a regular file, else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None
