"""Running student code for a judge, without ever giving it grader rights.

A judge that must execute what the student wrote (call `solution.add(2, 3)`, run a hidden test
against it) cannot import it into the grader's process: the code would run as root, next to the
hidden tests and the answer keys, and could patch whatever checks its result. `StudentRunner`
runs it instead in a FRESH student sandbox (its own uid, cgroup limits, no network, none of the
grader's files), behind a small JSON-lines server (`_student_server.py`) started under the
student's Python. Only bounded plain data comes back:

- **JSON only.** The server refuses anything that is not an exact JSON type (an object whose
  `__eq__` always says True cannot cross); the harness decodes with `json.loads`, refusing NaN and
  infinities, deep nesting and oversized numbers. Nothing from the student is ever unpickled.
- **Bounded.** A reply longer than `response_limit_bytes` is refused and the server killed; the
  server's stderr (where its prints go) is drained continuously by a thread that keeps only a
  tail, so a student printing gigabytes neither blocks nor fills the grader's memory.
- **Timed from outside.** Each call has a deadline kept by the harness with a selector, and wall
  time and cgroup CPU time are measured by the harness, not reported by the student. On timeout
  or crash (sys.exit, os._exit, a segfault, an OOM kill) the server's whole process tree is
  killed and the next call starts a fresh server (module state is lost).
- **Stale replies are skipped.** Every request carries a fresh nonce and only a reply with that
  nonce answers it, so a thread the student left running cannot answer a later call.

- **Watched from outside.** After each call (once its timing is taken) and at close, a process
  of the run that no longer descends from the idle server (a detached daemon), a process that
  survives the kill, and limits the sandbox hit become misbehaviour (grading_watch.py), kept in
  `misbehaviour` and carried to the verdict by `evaluate`.

The server itself runs in the student's process and is therefore untrusted: the student can make
it say anything. That is fine, because what it says is only ever treated as the student's answer.

What this does NOT defend against: timing side channels (the student can measure how long it
runs and what it is asked); a student burning its own CPU, memory or time budget (it only hurts
its own score); state kept across calls in the same server or in /workdir and /tmp (one runner is
one student world: use a fresh runner where calls must be independent); and the kernel itself
(see docs/sandbox.md)."""

from __future__ import annotations

import json
import math
import os
import secrets
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ProctorError, SandboxError
from ..custody import MisbehaviourEvent
from ..sandbox import Mount, SandboxBackend, SandboxLimits, SandboxSpec, StudentProcess, StudentSandbox, get_backend
from . import grading_watch

MiB = 1024 * 1024
SERVER_SOURCE = Path(__file__).with_name("_student_server.py")
STDERR_TAIL_BYTES = 8 * 1024
ERROR_CHARS = 2000
# Python's startup inside the sandbox takes ~50 ms; a server that has not said "ready" by then
# was starved by the student (memory left full, say). It is bounded like any other wait.
_START_TIMEOUT_S = 20.0
# After the server process exits, a reply it wrote just before may still be in the pipe.
_EXIT_DRAIN_S = 0.05
_READ_CHUNK = 64 * 1024


class StudentCallError(ProctorError):
    """A call into student code did not return a value (failed, timed out, crashed)."""

    def __init__(self, message: str, call: StudentCall | None = None) -> None:
        super().__init__(message)
        self.call = call


class StudentCall(BaseModel):
    """The outcome of one call into student code, as measured by the harness."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool = Field(description="True when the student code returned a value that crossed as JSON.")
    value: Any = Field(None, description="The returned value (plain JSON data), when ok.")
    error: str | None = Field(None, description="Why there is no value: 'Type: message' from the student's exception, or the harness's reason.")
    timed_out: bool = Field(False, description="The call passed its deadline; the server was killed.")
    crashed: bool = Field(False, description="The server died during the call (sys.exit, os._exit, a signal, an OOM kill).")
    wall_s: float = Field(0.0, description="Seconds from writing the request to reading the whole reply, measured by the harness.")
    cpu_s: float = Field(0.0, description="CPU seconds the sandbox's cgroup used during the call (all student processes).")


def _clip(text: str, limit: int = ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " [truncated]"


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf without this
        raise ValueError(f"number {text[:40]} is not finite")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_reply(line: bytes) -> Any:
    """Strict JSON: no NaN/Infinity, no infinite floats, no huge ints, no stack overflow."""
    return json.loads(line, parse_constant=_refuse_constant, parse_float=_finite_float)


class _TailSink:
    """The last `limit` bytes of everything written, shared across server restarts."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0
        self.lock = threading.Lock()

    def write(self, chunk: bytes) -> None:
        with self.lock:
            self.total += len(chunk)
            self.data += chunk[-self.limit:]
            if len(self.data) > self.limit:
                del self.data[: len(self.data) - self.limit]

    def text(self) -> str:
        with self.lock:
            return self.data.decode("utf-8", "replace")


def _drain(fd: int, sink: _TailSink) -> None:
    """Read a pipe until EOF so the writer never blocks on it; keep only the sink's tail. A thread
    for the server's whole life, not proctor.pump: no deadline applies, EOF comes when its tree dies."""
    try:
        while chunk := os.read(fd, _READ_CHUNK):
            sink.write(chunk)
    except OSError:
        pass


class _Server:
    """One live call server: its process, its pipes, the unread bytes of its channel."""

    def __init__(self, proc: StudentProcess, sink: _TailSink) -> None:
        self.proc = proc
        assert proc.popen.stdin and proc.popen.stdout and proc.popen.stderr
        self.request_fd = proc.popen.stdin.fileno()
        self.reply_fd = proc.popen.stdout.fileno()
        os.set_blocking(self.request_fd, False)
        self.pidfd = os.pidfd_open(proc.pid)
        self.buf = bytearray()
        self.drainer = threading.Thread(target=_drain, args=(proc.popen.stderr.fileno(), sink), name="proctor-student-stderr", daemon=True)
        self.drainer.start()
        self.dead = False

    def close(self) -> None:
        """Kill the server's whole process tree (daemons included) and release its pipes."""
        if self.proc.alive() or self.proc.processes():
            self.proc.kill_tree()
        self.proc.popen.wait()
        self.drainer.join(timeout=1.0)  # the tree is dead, so EOF is immediate
        os.close(self.pidfd)
        for stream in (self.proc.popen.stdin, self.proc.popen.stdout, self.proc.popen.stderr):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self.dead = True


class _Reply(Exception):
    """Internal: how a wait for a reply ended without a usable line."""

    def __init__(self, error: str, *, timed_out: bool = False, crashed: bool = False) -> None:
        super().__init__(error)
        self.error, self.timed_out, self.crashed = error, timed_out, crashed


class StudentModule:
    """`runner.module("solution").add(2, 3)`: attribute access as calls returning values."""

    def __init__(self, runner: StudentRunner, name: str) -> None:
        self._runner = runner
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        target = f"{self._name}:{attr}"

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.value(target, *args, **kwargs)

        call.__name__ = attr
        return call

    def __repr__(self) -> str:
        return f"<student module {self._name}>"


class StudentRunner:
    """Student code behind a JSON channel in a fresh sandbox. Use as a context manager.

    `submission` is a custody copy (regular files and directories only); it is copied into the
    sandbox's workdir (/workdir, or `spec.workdir`), owned by the student's uid, and the server is
    started there, so `call("solution:add", 2, 3)` imports /workdir/solution.py. Not thread-safe: one call at a
    time. `deadline` (a time.monotonic() value, optional, settable later) clips every call, so
    a judge's whole budget bounds however many calls its tests make."""

    def __init__(
        self,
        submission: Path | str,
        *,
        limits: SandboxLimits | None = None,
        call_timeout_s: float = 30.0,
        response_limit_bytes: int = 1 * MiB,
        data_dir: str | None = None,
        require: Iterable[str] | None = None,
        deadline: float | None = None,
        backend: SandboxBackend | None = None,
        spec: SandboxSpec | None = None,
    ) -> None:
        if call_timeout_s <= 0 or response_limit_bytes <= 0:
            raise ValueError("call_timeout_s and response_limit_bytes must be positive")
        self.submission = Path(submission)
        # The student's own spec (its workdir and data paths, mounts), when the judge has it.
        self.base_spec = spec
        self.limits = limits or (spec.limits if spec is not None else SandboxLimits())
        self.call_timeout_s = call_timeout_s
        self.response_limit_bytes = response_limit_bytes
        self.data_dir = data_dir
        self.require = require
        self.deadline = deadline
        self.backend = backend if backend is not None else get_backend()
        self.sandbox: StudentSandbox | None = None
        self.servers_started = 0
        self._grader_dir: str | None = None
        self._server: _Server | None = None
        self._stderr = _TailSink(STDERR_TAIL_BYTES)
        self._lock = threading.Lock()
        # Telemetry from outside the student's processes (grading_watch.py): kept here and sent
        # to the judge's scope current when the runner was made, so a judge's own threads and a
        # verdict that forgets them still carry it to the rollout.
        self.misbehaviour: list[MisbehaviourEvent] = []
        self._sink = grading_watch.current_sink()
        self.where = "grading sandbox"

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self) -> StudentRunner:
        if self.sandbox is not None:
            return self
        try:
            # A fresh root-owned directory holding only the server: the harness's package
            # directory (graders, reference code) is never mounted into the student's world.
            self._grader_dir = tempfile.mkdtemp(prefix="proctor-grader-")
            shutil.copyfile(SERVER_SOURCE, os.path.join(self._grader_dir, "server.py"))
            os.chmod(os.path.join(self._grader_dir, "server.py"), 0o644)
            os.chmod(self._grader_dir, 0o755)
            grader = Mount(source=self._grader_dir, target="/grader")
            if self.base_spec is not None:
                spec = self.base_spec.model_copy(update={"limits": self.limits, "mounts": (*self.base_spec.mounts, grader)})
            else:
                spec = SandboxSpec(limits=self.limits, data_dir=self.data_dir, mounts=(grader,))
            self.sandbox = self.backend.create(spec, require=self.require)
            if self.submission.is_dir():
                self.sandbox.copy_in(self.submission)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Kill the server and tear the sandbox down. Safe to call twice."""
        try:
            if self._server is not None:
                self._watch_idle(self._server)
                self._kill()
            if self.sandbox is not None:
                self._record(grading_watch.sandbox_events(self.sandbox, self.where))
        finally:
            try:
                if self.sandbox is not None:
                    try:
                        self.sandbox.close()
                    except SandboxError as exc:
                        self._record([MisbehaviourEvent(kind="unreapable_processes", detail=f"{self.where}: {_clip(str(exc), 300)}")])
                        raise
            finally:
                if self._grader_dir:
                    shutil.rmtree(self._grader_dir, ignore_errors=True)
                    self._grader_dir = None

    def __enter__(self) -> StudentRunner:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def uid(self) -> int:
        assert self.sandbox is not None, "runner not open"
        return self.sandbox.uid

    @property
    def stderr_tail(self) -> str:
        """The last few KiB the student's processes wrote to stdout/stderr (across restarts)."""
        return self._stderr.text()

    @property
    def python(self) -> str:
        assert self.sandbox is not None, "runner not open"
        return f"{self.sandbox.python_runtime}/bin/python" if self.sandbox.python_runtime else "/usr/bin/python3"

    # -- calls -------------------------------------------------------------------------------------
    def call(self, target: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> StudentCall:
        """Call `module:qualname` in the student's code with JSON arguments."""
        return self._request({"op": "call", "target": target, "args": list(args), "kwargs": kwargs}, timeout)

    def exec(self, code: str, inputs: dict[str, Any] | None = None, timeout: float | None = None) -> StudentCall:
        """Run a trusted snippet (the test author's, never the student's) inside the student's
        process with `inputs` bound as variables; the value of its variable `result` comes back."""
        return self._request({"op": "exec", "code": code, "inputs": dict(inputs or {})}, timeout)

    def value(self, target: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """The value of a call, or StudentCallError with the reason."""
        return _value_of(target, self.call(target, *args, timeout=timeout, **kwargs))

    def module(self, name: str) -> StudentModule:
        return StudentModule(self, name)

    def _request(self, message: dict[str, Any], timeout: float | None) -> StudentCall:
        if self.sandbox is None:
            raise RuntimeError("StudentRunner is not open; use it as a context manager")
        rid = secrets.token_hex(8)
        try:
            # The arguments are the test author's: a value that is not JSON is an authoring
            # error, raised to the author rather than blamed on the student.
            line = (json.dumps({"id": rid, **message}, allow_nan=False) + "\n").encode()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"arguments to student code must be plain JSON: {exc}") from None
        with self._lock:
            budget = self.call_timeout_s if timeout is None else timeout
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return StudentCall(ok=False, timed_out=True, error="no time left for this call (the judge's budget is spent)")
            server = self._server if self._server is not None and not self._server.dead else None
            if server is None:
                # Starting a server runs no student code, so its time is not the call's: it
                # has its own bound (clipped by the runner's deadline).
                start_end = time.monotonic() + _START_TIMEOUT_S
                try:
                    server = self._start(start_end if self.deadline is None else min(start_end, self.deadline))
                except _Reply as why:
                    return StudentCall(ok=False, error=why.error, timed_out=why.timed_out, crashed=why.crashed)
            end = time.monotonic() + budget
            clipped = self.deadline is not None and self.deadline < end
            if clipped:
                end = self.deadline  # type: ignore[assignment]
            what = "exec snippet" if message["op"] == "exec" else str(message["target"])
            return self._exchange(server, rid, line, end, what, budget if not clipped else None)

    def _start(self, end: float) -> _Server:
        assert self.sandbox is not None
        proc = self.sandbox.spawn([self.python, "-I", "/grader/server.py"], cwd=self.sandbox.spec.workdir)
        server = _Server(proc, self._stderr)
        self._server = server
        self.servers_started += 1
        try:
            ready = self._read_line(server, end)
        except _Reply as why:
            self._kill()
            why.error = f"student server did not start: {why.error}"
            raise
        if ready != b'{"ready": true}':
            self._kill()
            raise _Reply("student server did not start: unexpected greeting", crashed=True)
        return server

    def _kill(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            if survivors := server.proc.processes():
                self._record([MisbehaviourEvent(kind="unreapable_processes", detail=f"{self.where}: {len(survivors)} process(es) of the call server survived the kill")])

    def _record(self, events: list[MisbehaviourEvent]) -> None:
        grading_watch.record(events, self.misbehaviour)
        grading_watch.record(events, self._sink)

    def _watch_idle(self, server: _Server) -> None:
        """The server is idle (between calls, or done): a live process of its run that no longer
        descends from it was detached on purpose. A dead server's children are orphans by its
        death, not by design, so nothing is judged then."""
        if server.dead or server.proc.popen.poll() is not None or self.sandbox is None:
            return
        if left := grading_watch.detached(self.sandbox, server.proc.processes(), server.proc.root()):
            self._record([grading_watch.left_event(left, self.where)])

    def _exchange(self, server: _Server, rid: str, line: bytes, end: float, what: str, budget: float | None) -> StudentCall:
        assert self.sandbox is not None
        before = self.sandbox.usage()
        cpu0, oom0 = before.cpu_ns, before.oom_kills
        start = time.monotonic()
        outcome: dict[str, Any]
        try:
            self._write(server, line, end)
            while True:
                raw = self._read_line(server, end)
                try:
                    reply = decode_reply(raw)
                except RecursionError:
                    raise _Reply("malformed reply: nested too deeply") from None
                except ValueError as exc:
                    raise _Reply(f"malformed reply: {_clip(str(exc), 200)}") from None
                if not isinstance(reply, dict) or "id" not in reply:
                    raise _Reply("malformed reply: not a reply object")
                if reply["id"] != rid:
                    continue  # stale: a reply to an earlier request, e.g. from a leftover thread
                outcome = _interpret(reply)
                break
        except _Reply as why:
            self._kill()  # the channel's state is unknown now: the next call starts afresh
            if why.timed_out:
                why.error = f"{what} timed out after {budget:g}s" if budget is not None else f"{what} stopped: the judge's time ran out"
            elif why.crashed and self.sandbox.usage().oom_kills > oom0:
                why.error += " (out of memory: the kernel killed it)"
            outcome = {"ok": False, "error": why.error, "timed_out": why.timed_out, "crashed": why.crashed}
        wall = time.monotonic() - start
        if server.dead is False and self._server is server and server.proc.popen.poll() is not None:
            self._kill()  # replied, then died: the reply stands, the next call restarts
        cpu = (self.sandbox.usage().cpu_ns - cpu0) / 1e9
        if self._server is server:
            self._watch_idle(server)  # after the measurements: the check costs the student nothing
        return StudentCall(wall_s=wall, cpu_s=max(cpu, 0.0), **outcome)

    # -- the channel -------------------------------------------------------------------------------
    # Not proctor.pump: the server outlives each call, so a call ends at a reply line (or the
    # server's death), and its stdin carries one request at a time rather than a whole input.
    def _write(self, server: _Server, data: bytes, end: float) -> None:
        view = memoryview(data)
        sel = selectors.DefaultSelector()
        sel.register(server.request_fd, selectors.EVENT_WRITE)
        sel.register(server.pidfd, selectors.EVENT_READ)
        try:
            while view:
                left = end - time.monotonic()
                if left <= 0:
                    raise _Reply("timed out", timed_out=True)
                for key, _ in sel.select(left):
                    if key.fd == server.pidfd:
                        raise _Reply(_death(server), crashed=True)
                    try:
                        view = view[os.write(server.request_fd, view[:_READ_CHUNK]):]
                    except BlockingIOError:
                        pass
                    except BrokenPipeError:
                        raise _Reply("student server closed its input", crashed=True) from None
                    if not view:
                        break
        finally:
            sel.close()

    def _read_line(self, server: _Server, end: float) -> bytes:
        """The next complete line of the channel, bounded in size and time."""
        limit = self.response_limit_bytes
        sel = selectors.DefaultSelector()
        sel.register(server.reply_fd, selectors.EVENT_READ)
        sel.register(server.pidfd, selectors.EVENT_READ)
        exited_at: float | None = None
        try:
            while True:
                newline = server.buf.find(b"\n")
                if newline >= 0:
                    if newline > limit:
                        raise _Reply(f"reply too large (over {limit} bytes)")
                    line = bytes(server.buf[:newline])
                    del server.buf[: newline + 1]
                    return line
                if len(server.buf) > limit:
                    raise _Reply(f"reply too large (over {limit} bytes)")
                now = time.monotonic()
                if exited_at is not None and now - exited_at > _EXIT_DRAIN_S:
                    raise _Reply(_death(server), crashed=True)
                if now >= end:
                    raise _Reply("timed out", timed_out=True)
                wait = end - now if exited_at is None else exited_at + _EXIT_DRAIN_S - now
                for key, _ in sel.select(max(wait, 0)):
                    if key.fd == server.pidfd:
                        sel.unregister(server.pidfd)
                        exited_at = time.monotonic()
                        continue
                    chunk = os.read(server.reply_fd, _READ_CHUNK)
                    if not chunk:
                        raise _Reply(_death(server), crashed=True)
                    server.buf += chunk
        finally:
            sel.close()


def _death(server: _Server) -> str:
    """Why the server is gone, from its exit status (nsenter passes on the student's)."""
    try:
        server.proc.popen.wait(timeout=1.0)
    except subprocess.TimeoutExpired:  # still running: it closed the channel and lives on
        return "student server closed its reply channel"
    code = server.proc.popen.returncode
    if code is not None and code < 0:
        return f"student server died (killed by signal {-code})"
    return f"student server exited (status {code})"


def _interpret(reply: Any) -> dict[str, Any]:
    """A decoded reply with our id, as StudentCall fields; anything malformed is a failed call."""
    if not isinstance(reply, dict) or type(reply.get("ok")) is not bool:
        raise _Reply("malformed reply: not a reply object")
    if reply["ok"]:
        if "value" not in reply:
            raise _Reply("malformed reply: no value")
        return {"ok": True, "value": reply["value"]}
    error = reply.get("error")
    return {"ok": False, "error": _clip(error if isinstance(error, str) else "student code failed")}


def _value_of(target: str, call: StudentCall) -> Any:
    if call.ok:
        return call.value
    raise StudentCallError(f"{target}: {call.error}", call)


def run_student(
    submission: Path | str,
    target: str,
    *args: Any,
    limits: SandboxLimits | None = None,
    timeout_s: float = 30.0,
    backend: SandboxBackend | None = None,
    **kwargs: Any,
) -> StudentCall:
    """One call into student code in a fresh sandbox, torn down afterwards."""
    with StudentRunner(submission, limits=limits, call_timeout_s=timeout_s, backend=backend) as runner:
        return runner.call(target, *args, **kwargs)


__all__ = ["StudentCall", "StudentCallError", "StudentModule", "StudentRunner", "decode_reply", "run_student"]
