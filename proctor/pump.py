"""Draining a child process's pipes with a deadline: the one loop the sandbox and the judges share.

A child's output is untrusted and unbounded: it may print gigabytes, never close its pipes (a
background process inherits them and outlives the command), stop reading its stdin, or ignore
every deadline. `pump` feeds stdin and drains stdout and stderr into the caller's sinks (bounded
captures such as sandbox.capture.HeadTail) until the child exits or the deadline passes, and
gives a pipe held by a background writer only a short grace after the exit. `read_until_eof`
reads one pipe with a timeout and a size cap.

Exit is seen through a pidfd, so the loop sleeps until something happens instead of polling;
where the kernel has no pidfd it checks the child every 50 ms without reaping it.

This module imports nothing from Proctor: every layer may use it."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable

Sink = Callable[[bytes], object]

CHUNK = 65536
POLL_S = 0.05  # without a pidfd: how often to look whether the child exited


def _exited(pid: int) -> bool:
    """Whether `pid` has exited, without reaping it (the caller still waits for its status)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def pump(
    proc: subprocess.Popen, stdout: Sink, stderr: Sink, *, deadline: float, input: bytes | None = None, grace_s: float = 0.05
) -> bool:
    """Feed `input` to the child's stdin (if it has a pipe) and drain its stdout and stderr into the
    sinks until it exits and both pipes reach EOF, or `grace_s` after its exit, or `deadline`
    (time.monotonic()). Returns True when the deadline passed first. Closes the child's pipes and
    neither kills nor reaps it: that is the caller's.

    A child that stops reading its stdin cannot block the loop (writes are non-blocking), and one
    that closes it (EPIPE) just gets no more input; a background process that keeps the output pipes
    open after the child's exit holds the caller for `grace_s`, not until the deadline."""
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    for stream, sink in ((proc.stdout, stdout), (proc.stderr, stderr)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream.fileno(), selectors.EVENT_READ, sink)
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = -1
    else:
        sel.register(pidfd, selectors.EVENT_READ, "exit")
    pending = memoryview(input or b"")
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        if pending:
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
        else:
            proc.stdin.close()
    exited_at: float | None = None
    streams_open = 2
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and pidfd < 0 and _exited(proc.pid):
                exited_at = now
            if exited_at is None and now >= deadline:
                return True
            if exited_at is not None and (streams_open == 0 or now - exited_at > grace_s):
                return False
            wait = deadline - now if exited_at is None else exited_at + grace_s - now
            if pidfd < 0 and exited_at is None:
                wait = min(wait, POLL_S)
            for key, _ in sel.select(max(wait, 0)):
                if key.data == "exit":
                    sel.unregister(pidfd)
                    exited_at = time.monotonic()
                elif key.data == "stdin":
                    try:
                        pending = pending[os.write(key.fd, pending[:CHUNK]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # the child closed its stdin: the rest is not wanted
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(key.fd)
                        proc.stdin.close()  # type: ignore[union-attr]
                else:
                    try:
                        chunk = os.read(key.fd, CHUNK)
                    except BlockingIOError:
                        continue
                    if chunk:
                        key.data(chunk)
                    else:
                        sel.unregister(key.fd)
                        streams_open -= 1
    finally:
        sel.close()
        if pidfd >= 0:
            os.close(pidfd)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except BrokenPipeError:  # stdin's buffer flush on close, after the child left
                    pass


def read_until_eof(fd: int, *, timeout_s: float, limit: int = CHUNK) -> bytes:
    """Read `fd` until EOF or `limit` bytes, waiting at most `timeout_s` in all."""
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    data = b""
    end = time.monotonic() + timeout_s
    try:
        while len(data) < limit:
            left = end - time.monotonic()
            if left <= 0 or not sel.select(left):
                break
            chunk = os.read(fd, limit - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        sel.close()
    return data
