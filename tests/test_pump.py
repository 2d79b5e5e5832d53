"""The shared pump: a child's pipes drained into bounded captures until it exits or the deadline,
whatever the child does with them. Plain host processes, no sandbox: the pump is what every
sandbox command and grading script runs through, and it must be correct before confinement."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.pump import pump, read_until_eof
from proctor.sandbox.capture import HeadTail


def spawn(code: str, stdin: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def run(code: str, *, timeout: float = 10.0, input: bytes | None = None, cap: int = 1 << 20, grace_s: float = 0.05):
    proc = spawn(code, stdin=input is not None)
    out, err = HeadTail(cap // 2, cap - cap // 2), HeadTail(cap // 2, cap - cap // 2)
    start = time.monotonic()
    try:
        timed_out = pump(proc, out.write, err.write, deadline=start + timeout, input=input, grace_s=grace_s)
    finally:
        try:
            os.killpg(proc.pid, 9)  # the child's whole group: background writers too
        except ProcessLookupError:
            pass
        proc.wait()
    return timed_out, out, err, time.monotonic() - start


def test_stdout_and_stderr_are_captured_apart():
    timed_out, out, err, _ = run("import sys; print('to out'); print('to err', file=sys.stderr)")
    assert not timed_out and out.getvalue() == b"to out\n" and err.getvalue() == b"to err\n"


def test_a_child_past_its_deadline_is_reported_and_the_pump_returns_on_time():
    timed_out, out, _, wall = run("import time; print('started', flush=True); time.sleep(30)", timeout=0.5)
    assert timed_out and out.getvalue() == b"started\n" and wall < 3


def test_a_flood_of_output_keeps_head_and_tail_within_the_cap():
    timed_out, out, _, _ = run("import sys; sys.stdout.write('A' * 1000 + 'x' * 10_000_000 + 'Z' * 1000)", cap=4096)
    head, tail = out.parts()
    assert not timed_out and head == b"A" * 1000 + b"x" * 1048 and tail == b"x" * 1048 + b"Z" * 1000
    assert out.total == 10_002_000 and out.dropped == 10_002_000 - 4096


def test_a_background_writer_holding_the_pipe_costs_only_the_grace():
    # The child exits at once, leaving a grandchild that holds stdout open and writes for 30 s.
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(30)\nprint('parent done', flush=True)\nos._exit(0)"
    timed_out, out, _, wall = run(code, timeout=20, grace_s=0.1)
    assert not timed_out and out.getvalue() == b"parent done\n" and wall < 3


def test_without_a_pidfd_the_exit_is_still_seen_promptly(monkeypatch):
    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")  # ENOSYS: a kernel before 5.3

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    timed_out, out, _, wall = run("print('bye')", timeout=20)
    assert not timed_out and out.getvalue() == b"bye\n" and wall < 3


def test_stdin_is_fed_in_full_to_a_child_that_reads_it():
    data = os.urandom(3_000_000)  # far more than a pipe buffer: the writes must interleave with reads
    timed_out, out, _, _ = run("import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())", input=data)
    import hashlib

    assert not timed_out and out.getvalue().strip() == hashlib.sha256(data).hexdigest().encode()


def test_a_child_that_closes_its_stdin_early_is_no_error():
    timed_out, out, _, _ = run("import os; os.close(0); print('closed', flush=True)", input=b"y" * 5_000_000)
    assert not timed_out and out.getvalue() == b"closed\n"


def test_a_child_that_never_reads_its_stdin_cannot_block_the_deadline():
    timed_out, _, _, wall = run("import time; time.sleep(30)", input=b"y" * 5_000_000, timeout=0.5)
    assert timed_out and wall < 3


def test_read_until_eof_stops_at_the_limit_and_at_the_timeout():
    r, w = os.pipe()
    try:
        os.write(w, b"0123456789")
        assert read_until_eof(r, timeout_s=1.0, limit=4) == b"0123"
        start = time.monotonic()
        assert read_until_eof(r, timeout_s=0.3) == b"456789"  # the writer is still open: no EOF
        assert 0.25 < time.monotonic() - start < 2
        os.close(w)
        w = -1
        assert read_until_eof(r, timeout_s=1.0) == b""
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=300), max_size=30), head=st.integers(0, 200), tail=st.integers(0, 200))
def test_head_tail_keeps_the_first_and_last_bytes_and_counts_the_rest(chunks, head, tail):
    cap = HeadTail(head, tail)
    for chunk in chunks:
        cap.write(chunk)
    whole = b"".join(chunks)
    kept_head, kept_tail = cap.parts()
    assert kept_head == whole[:head]
    rest = whole[head:]
    assert kept_tail == (rest[-tail:] if tail else b"")
    assert cap.total == len(whole) and cap.dropped == len(whole) - len(kept_head) - len(kept_tail) >= 0
