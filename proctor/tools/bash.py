"""bash: one persistent shell per sandbox, with an end-of-command signal the command cannot fake
or break.

How a call works
----------------
The shell is `/bin/bash --norc --noprofile` started with `Sandbox.spawn`, so it is the student's
process in the student's namespaces. Its three pipes have fixed jobs:

* stdin carries commands, one line per call, written only by the harness;
* stdout (kept by the shell at fd 62) carries the command's output, stdout and stderr merged;
* stderr (kept at fd 61) is the *control channel*: only the wrapper writes to it, one line
  `<nonce> <status> ok|lost` when the command has finished.

Each call is sent as::

    \\__proctor_begin; { \\eval '<command>'; } </dev/null >&62 2>&1 61>&- 62>&-; \\__proctor_done <nonce>

Why it cannot be spoofed or broken:

* Output is never parsed. Whatever the command prints (a fake marker included) is data on the
  output pipe; completion is read only from the control pipe.
* The command runs with fd 61 and 62 closed, and programs it executes never see the control
  pipe (bash keeps its saved copies close-on-exec). The pipes were made by the root harness, so
  reopening them through /proc/$$/fd is refused. A *builtin* of the command can still write to
  bash's saved copy (`echo ... >&12`), so a line counts only with the nonce of this call: 128
  random bits, fresh per call, sent only at the end of the line above. Bash parses the whole
  line before running any of it, and the nonce is the argument of a command that runs after the
  user's command: it is in no variable, argument, environment or file while the command runs.
* The command text is one single-quoted word (each `'` becomes `'\\''`), so no text can end the
  wrapper early. `eval` of a complete string cannot hang on an unterminated quote or heredoc: it
  is a syntax error (or a heredoc ending at the end), reported as output with status 2.
  `\\__proctor_begin;` first works around a bash 5.2 bug where, after such a parse error, the next
  input line's first reserved word (`{`) is misparsed and the shell exits.
* The wrapper functions are readonly (they cannot be redefined or unset), their names are quoted
  (aliases cannot replace them) and they use `builtin printf`. Redirections on the `{ }` group
  are undone by bash when it finishes, so `exec >/dev/null`, `exec 1>&-`, `exec 61>&-` inside a
  command last only for that command.
* Anything else ends in a bounded, recognised outcome: the shell exiting (`exit`, `kill -9 $$`,
  `kill -9 0`, `set -e`, closing every fd) is seen through a pidfd; the control pipe losing its
  last writer is seen as EOF; the output fd no longer open is reported as `lost`; `exec sleep`
  and a builtin loop are timeouts. In each case the session is restarted and the result says so.

Residual limit (stated, not hidden): the shell is the student's own process, so code that runs
*inside it* (a DEBUG trap with `extdebug`, `enable -f` of a compiled builtin), reads its memory
through /proc/PID/mem (same uid; no Yama on this host), or stops it and reads the next line from
the saved stdin that forked subshells inherit, can learn a nonce and forge that call's result.
That is the student lying about its own command, which it can do by printing anyway: nothing
downstream trusts tool output (custody copies files, judges read those), and the harness stays
bounded and in sync, because only the current nonce is accepted, stale lines are dropped, and a
shell that stops answering is restarted at the timeout.

Timeouts
--------
At the deadline every process that appeared in the shell's cgroup during this call is killed
(pidfd-pinned, then checked still to be in the cgroup, so a recycled pid is never hit); the shell
itself and background jobs from earlier calls are left alone. If the shell reports back within
`bash_kill_grace_s` the session survives (`cd`, variables, functions, older jobs intact). If it
does not (the shell itself is stuck: `exec sleep`, a builtin loop, `read` from a FIFO), the whole
session tree is killed and a fresh shell started, with `session_restarted=True`. Background jobs
started by the timed-out call are killed with it.

Memory: output goes through `HeadTail` (head and tail kept, middle counted), the control line
buffer is capped, reads are 1 MiB at a time; a gigabyte of output costs the harness nothing."""

from __future__ import annotations

import hmac
import os
import re
import secrets
import selectors
import threading
import time
from dataclasses import dataclass

from pydantic import Field, field_validator

from ..sandbox import StudentProcess, StudentSandbox
from ..sandbox.capture import HeadTail
from .base import Arguments, Tool, ToolConfig, ToolContext, ToolResult, no_nul, render_output, utf8_len

CTL_FD, OUT_FD = 61, 62
_READ_CHUNK = 1 << 20
_CTL_LINE_CAP = 256
_MARKER = re.compile(rb"([0-9a-f]{32}) ([0-9]{1,3}) (ok|lost)")
_DRAIN_S = 0.05
_RESET = "variables, functions, the working directory and background jobs are reset"

# Sent once when a shell starts. Top-level stdout/stderr go to /dev/null: only the group of each
# call sees the output pipe, so shell noise (xtrace of the wrapper, job messages) stays out.
_BOOT = (
    f"exec {CTL_FD}>&2 {OUT_FD}>&1 1>/dev/null 2>/dev/null\n"
    "__proctor_begin() { return 0; }\n"
    "__proctor_done() { __proctor_status=$?; "
    f"if {{ builtin printf '' >&{OUT_FD}; }} 2>/dev/null; "
    f"then builtin printf '%s %s ok\\n' \"$1\" \"$__proctor_status\" >&{CTL_FD}; "
    f"else builtin printf '%s %s lost\\n' \"$1\" \"$__proctor_status\" >&{CTL_FD}; fi; }}\n"
    "declare -fr __proctor_begin __proctor_done\n"
)


def wrap(command: str, nonce: str) -> bytes:
    """The line that runs `command` in the persistent shell and then reports `nonce`."""
    quoted = "'" + command.replace("'", "'\\''") + "'"
    return (
        f"\\__proctor_begin; {{ \\eval {quoted}; }} </dev/null >&{OUT_FD} 2>&1 {CTL_FD}>&- {OUT_FD}>&-; "
        f"\\__proctor_done {nonce}\n"
    ).encode("utf-8")


@dataclass
class _Outcome:
    kind: str  # "done" | "died" | "ctl_closed" | "timeout"; "restart" once _run has decided to restart
    status: int | None = None
    lost: bool = False


class ShellUnavailable(Exception):
    """A fresh shell could not be started (e.g. the student exhausted its pids limit)."""


class ShellSession:
    """The persistent shell of one sandbox."""

    def __init__(self, sandbox: StudentSandbox, config: ToolConfig) -> None:
        self.sandbox = sandbox
        self.config = config
        self._proc: StudentProcess | None = None
        self._pidfd: int | None = None
        self._ctl = bytearray()
        self._lock = threading.Lock()
        self.last_nonce: str | None = None  # for tests and forensics; useless to the student afterwards

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def own_pids(self) -> set[int]:
        """The shell process itself, not anything the student started from it."""
        root = self._proc.root() if self._proc is not None else None
        return {root} if root is not None else set()

    def _start(self) -> None:
        proc = self.sandbox.spawn(["/bin/bash", "--norc", "--noprofile"], cwd=self.sandbox.spec.workdir)
        self._proc, self._ctl = proc, bytearray()
        self._pidfd = os.pidfd_open(proc.pid)
        for stream in (proc.popen.stdout, proc.popen.stderr, proc.popen.stdin):
            os.set_blocking(stream.fileno(), False)  # type: ignore[union-attr]
        try:
            import fcntl

            fcntl.fcntl(proc.popen.stdout.fileno(), fcntl.F_SETPIPE_SZ, _READ_CHUNK)  # type: ignore[union-attr]
        except OSError:
            pass  # a smaller pipe only costs more reads
        nonce = secrets.token_hex(16)
        sink = HeadTail(0, 2048)
        outcome, _ = self._exchange((_BOOT + f"\\__proctor_done {nonce}\n").encode(), nonce,
                                    time.monotonic() + self.config.bash_start_timeout_s, sink)
        if outcome.kind != "done" or outcome.lost:
            err = bytes(self._ctl[-500:]).decode("utf-8", errors="replace").strip()
            self._kill()
            raise ShellUnavailable(f"the shell did not start ({outcome.kind}{': ' + err if err else ''})")

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill_tree()
            for stream in (self._proc.popen.stdin, self._proc.popen.stdout, self._proc.popen.stderr):
                if stream and not stream.closed:
                    try:
                        stream.close()
                    except OSError:
                        pass
        if self._pidfd is not None:
            os.close(self._pidfd)
        self._proc, self._pidfd = None, None

    def close(self) -> None:
        with self._lock:
            self._kill()

    # -- one call ------------------------------------------------------------------------------------
    def run(self, command: str, timeout: float) -> ToolResult:
        with self._lock:
            return self._run(command, timeout)

    def _run(self, command: str, timeout: float) -> ToolResult:
        started = time.monotonic()
        notes: list[str] = []
        restarted = False
        if self._proc is None or not self._proc.alive():
            if self._proc is not None:
                restarted = True
                notes.append(f"[the previous shell had ended (e.g. every student process was killed); this command ran in a fresh shell: {_RESET}]")
                self._kill()
            try:
                self._start()
            except ShellUnavailable as exc:
                return ToolResult.failure(f"bash: {exc}", started=started, session_restarted=restarted)
        assert self._proc is not None
        before = self._proc.pids()
        nonce = secrets.token_hex(16)
        self.last_nonce = nonce
        cap = self.config.output_limit_bytes
        out = HeadTail(cap // 2, cap - cap // 2)
        outcome, written = self._exchange(wrap(command, nonce), nonce, started + timeout, out)
        timed_out = False
        exit_code: int | None = None
        error: str | None = None
        if outcome.kind == "timeout":
            timed_out = True
            self._kill_new(before)
            if written:
                outcome, _ = self._exchange(b"", nonce, time.monotonic() + self.config.bash_kill_grace_s, out)
            if outcome.kind == "done" and not outcome.lost:
                notes.append(f"[timed out after {timeout:g} s: the command's processes were killed; the shell session survives]")
            else:
                notes.append(f"[timed out after {timeout:g} s and the shell did not recover, so it was restarted: {_RESET}]")
                restarted = True
                outcome = _Outcome("restart")
        elif outcome.kind == "done":
            exit_code = outcome.status
            if outcome.lost:
                notes.append(f"[the command closed the shell's output channel; a fresh shell was started: {_RESET}]")
                restarted = True
                outcome = _Outcome("restart")
        elif outcome.kind == "died":
            exit_code = outcome.status
            notes.append(f"[the shell exited (status {exit_code}); a fresh shell was started: {_RESET}]")
            restarted = True
        else:  # ctl_closed: the shell lives but its control pipe has no writer left
            notes.append(f"[the command broke the shell's control channel; a fresh shell was started: {_RESET}]")
            restarted = True
        if outcome.kind == "done":
            self._drain(out, time.monotonic() + _DRAIN_S)
        else:
            self._drain(out, time.monotonic() + _DRAIN_S * 4)
        if restarted:
            self._kill()
            try:
                self._start()
            except ShellUnavailable as exc:
                error = f"bash: {exc}; the next call will try again"
        head, tail = out.parts()
        text = render_output(head, tail, out.dropped)
        if notes:
            text += ("" if not text or text.endswith("\n") else "\n") + "\n".join(notes)
        return ToolResult(
            output=text, exit_code=exit_code, truncated_bytes=out.dropped, timed_out=timed_out,
            duration_s=time.monotonic() - started, error=error, session_restarted=restarted,
        )

    # -- the channel ---------------------------------------------------------------------------------
    def _exchange(self, line: bytes, nonce: str, deadline: float, out: HeadTail) -> tuple[_Outcome, bool]:
        """Write `line` to the shell and collect output until the control line with `nonce`, the
        shell's death, the control channel's EOF or the deadline. Returns the outcome and whether
        the whole line was written.

        Not proctor.pump: the shell lives on between calls, so a call ends at its nonce-stamped
        control line, not at a process's exit, and the control channel is parsed as it arrives."""
        assert self._proc is not None and self._pidfd is not None
        popen = self._proc.popen
        out_fd, ctl_fd, in_fd = popen.stdout.fileno(), popen.stderr.fileno(), popen.stdin.fileno()  # type: ignore[union-attr]
        sel = selectors.DefaultSelector()
        sel.register(out_fd, selectors.EVENT_READ, "out")
        sel.register(ctl_fd, selectors.EVENT_READ, "ctl")
        sel.register(self._pidfd, selectors.EVENT_READ, "dead")
        pending = memoryview(line)
        if pending:
            sel.register(in_fd, selectors.EVENT_WRITE, "in")
        expected = nonce.encode()
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return _Outcome("timeout"), not pending
                for key, _ in sel.select(left):
                    if key.data == "out":
                        if not self._read_into(out_fd, out):
                            sel.unregister(out_fd)  # every holder closed it; the marker will say lost
                    elif key.data == "ctl":
                        chunk = _read(ctl_fd)
                        if chunk is None:
                            continue
                        if not chunk:
                            return self._settle_death(_Outcome("ctl_closed")), not pending
                        found = self._scan_ctl(chunk, expected)
                        if found is not None:
                            return found, True
                    elif key.data == "in":
                        try:
                            pending = pending[os.write(in_fd, pending[: 1 << 16]) :]
                        except BlockingIOError:
                            continue
                        except (BrokenPipeError, OSError):
                            pending = pending[:0]
                            sel.unregister(in_fd)
                            continue
                        if not pending:
                            sel.unregister(in_fd)
                    else:
                        return self._settle_death(_Outcome("died")), not pending
        finally:
            sel.close()

    def _settle_death(self, outcome: _Outcome) -> _Outcome:
        """The shell died or dropped its control channel: give its exit a moment to be final."""
        assert self._proc is not None
        try:
            self._proc.popen.wait(timeout=0.5)
        except Exception:  # still alive: the control channel alone is gone
            return outcome
        code = self._proc.popen.returncode
        return _Outcome("died", status=code if code >= 0 else 128 - code)

    def _scan_ctl(self, chunk: bytes, expected: bytes) -> _Outcome | None:
        """Find this call's control line. Lines with another nonce (stale, or forged without the
        nonce) are dropped; the buffer never holds more than one short partial line."""
        self._ctl += chunk
        *lines, rest = self._ctl.split(b"\n")
        self._ctl = bytearray(rest[-_CTL_LINE_CAP:])
        found = None
        for raw in lines:
            m = _MARKER.fullmatch(raw)
            if m and hmac.compare_digest(m.group(1), expected):
                found = _Outcome("done", status=int(m.group(2)), lost=m.group(3) == b"lost")
        return found

    def _read_into(self, fd: int, out: HeadTail) -> bool:
        chunk = _read(fd)
        if chunk is None:
            return True
        if not chunk:
            return False
        out.write(chunk)
        return True

    def _drain(self, out: HeadTail, until: float) -> None:
        """After the command: take what its processes left in the pipe. Background writers may go
        on for ever, so this is bounded by time as well as by EAGAIN."""
        if self._proc is None:
            return
        fd = self._proc.popen.stdout.fileno()  # type: ignore[union-attr]
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        try:
            while time.monotonic() < until:
                chunk = _read(fd)
                if chunk is None:
                    if not self.alive():
                        if not sel.select(max(0.0, until - time.monotonic())):
                            return
                        continue
                    return
                if not chunk:
                    return
                out.write(chunk)
        finally:
            sel.close()

    def _kill_new(self, before: set[int]) -> None:
        """Kill every process that appeared in the shell's tree during this call (daemons that
        re-parented included); `kill` skips ids that left the tree, so none recycled is hit."""
        assert self._proc is not None
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            new = list(self._proc.pids() - before)
            if not new:
                return
            self._proc.kill(new)
            time.sleep(0.002)


def _read(fd: int) -> bytes | None:
    """One non-blocking read: bytes, b'' at EOF, None when nothing is there yet."""
    try:
        return os.read(fd, _READ_CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


class BashArgs(Arguments):
    command: str = Field(description="Shell command(s) to run in a persistent bash session.")
    timeout: float | None = Field(None, gt=0, description="Seconds before the command is killed (default and maximum are configured).")

    @field_validator("command")
    @classmethod
    def _command_ok(cls, v: str) -> str:
        utf8_len("command", v)
        return no_nul("command", v)


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a command in a persistent bash shell inside your sandbox (cwd starts at your workdir, also $HOME). "
        "cd, variables, functions and background jobs carry over between calls. stdout and "
        "stderr are merged; long output keeps its head and tail. Interactive programs get no input."
    )
    Arguments = BashArgs

    def execute(self, args: BashArgs, ctx: ToolContext) -> ToolResult:
        size = utf8_len("command", args.command)
        if size > ctx.config.max_command_bytes:
            return ToolResult.over_limit("bash", "command", size, ctx.config.max_command_bytes,
                                         hint="write long scripts with write_file and run them")
        timeout = min(args.timeout or ctx.config.bash_timeout_s, ctx.config.bash_max_timeout_s)
        return session_of(ctx).run(args.command, timeout)


def session_of(ctx: ToolContext) -> ShellSession:
    """The bash session of this context, created on first use."""
    session = ctx.state.get("bash")
    if session is None:
        session = ctx.state["bash"] = ShellSession(ctx.sandbox, ctx.config)
    return session
