"""Running a small Python helper inside the sandbox, as the student: the one way file tools (and
custom tools) touch the student's files.

The root harness never opens, stats or follows a path the student controls: a path is only ever
a string handed to a helper that runs with the student's uid, in the student's namespaces, under
the command timeout. The helper is the system interpreter (`/usr/bin/python3`, or a task image's own python3:
`box.system_python`) started as `python3 -I -S`:
`-I` ignores PYTHON* variables, the user site and the current directory, `-S` skips `site`, so
nothing planted in the workdir or /tmp (`sitecustomize.py`, `.pth`, a `json.py`) is imported. Its
input is one JSON object on stdin, never argv or a host path. Its reply is one JSON line
(`meta`) followed by raw bytes (`body`), and the harness reads at most `body_cap` + a small margin
of it: a helper the student has tampered with (it can ptrace its own processes) can at worst lie
about its own files, never make the harness hold more or block longer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .base import ToolContext

PYTHON = "/usr/bin/python3"
_META_CAP = 64 * 1024

# Runs first in every helper: reads the arguments and defines reply()/fail() and the safe opener.
PRELUDE = r'''
import json, os, stat, sys
args = json.loads(sys.stdin.buffer.read())

def reply(meta, body=b""):
    out = sys.stdout.buffer
    out.write(json.dumps(meta).encode() + b"\n")
    out.write(body)
    out.flush()
    os._exit(0)

def fail(message):
    reply({"error": message})

def kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"

def resolve(path):
    # HOME is the sandbox's workdir (/workdir, or the task's own), fixed by the harness.
    return path if path.startswith("/") else os.path.join(os.environ.get("HOME") or "/workdir", path)

def oserror(path, exc):
    return f"{path}: {exc.strerror or exc}"

def open_regular(path, flags, *, create=False):
    """Open a regular file, following symlinks, and refuse anything else without blocking.
    stat first, so a FIFO or device is never even opened; the open is O_NONBLOCK and is checked
    again with fstat, so one swapped in after the stat cannot hang us either."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not create:
            fail(f"{path}: no such file")
        st = None
    except OSError as exc:
        fail(oserror(path, exc))
    if st is not None and not stat.S_ISREG(st.st_mode):
        fail(f"{path} is {kind(st.st_mode)}, not a regular file; refused")
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        fail(oserror(path, exc))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        fail(f"{path} is {kind(st.st_mode)}, not a regular file; refused")
    return fd, st

def read_upto(fd, limit):
    chunks, total = [], 0
    while total < limit:
        chunk = os.read(fd, min(1 << 20, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
'''


@dataclass
class Inside:
    """A helper's reply. `error` is set when the helper refused, failed, or replied malformed."""

    meta: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""
    error: str | None = None
    timed_out: bool = False


def run_inside(ctx: ToolContext, source: str, payload: dict[str, Any], *, body_cap: int = 0,
               timeout: float | None = None, what: str = "tool") -> Inside:
    """Run `PRELUDE + source` as the student with `payload` as `args`; the source ends by calling
    reply(meta, body) with len(body) <= body_cap, or fail(message)."""
    timeout = timeout or ctx.config.file_timeout_s
    python = getattr(ctx.sandbox, "system_python", PYTHON)
    if python is None:
        return Inside(error=f"{what} needs a python3 inside the sandbox and this task's image has none; use bash (cat, printf, tee) instead")
    res = ctx.sandbox.run(
        [python, "-I", "-S", "-c", PRELUDE + source],
        input=json.dumps(payload).encode(), timeout=timeout, output_cap=body_cap + _META_CAP, cwd="/",
    )
    if res.timed_out:
        return Inside(error=f"{what} timed out after {timeout:g} s inside the sandbox", timed_out=True)
    if res.exit_code != 0:
        detail = res.stderr.decode("utf-8", errors="replace").strip().splitlines()
        why = detail[-1] if detail else f"exit status {res.exit_code}, signal {res.signal}"
        return Inside(error=f"{what} helper failed inside the sandbox: {why[:500]}")
    head, sep, body = res.stdout.partition(b"\n")
    try:
        if not sep or res.stdout_dropped or len(body) > body_cap:
            raise ValueError("oversized or unterminated reply")
        meta = json.loads(head)
        if not isinstance(meta, dict):
            raise ValueError("reply is not an object")
    except ValueError:
        return Inside(error=f"{what} helper replied malformed output (was it tampered with?)")
    if "error" in meta:
        return Inside(meta=meta, error=str(meta["error"])[:2000])
    return Inside(meta=meta, body=body)
