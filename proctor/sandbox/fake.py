"""The fake backend: a working `StudentSandbox` that confines NOTHING, for fast unit tests of the
layers above the sandbox (tools, custody logic, detectors, judges, the episode, the harness).

What it is: a private temp directory per sandbox holding workdir/, tmp/ and shm/; commands run as
ordinary host subprocesses of the harness's own uid, with cwd in that directory, the student's
fixed environment (HOME and TMPDIR pointing into it), and the paths /workdir, /tmp, /dev/shm and
/data rewritten to the host directories in argv and stdin and back in stdout and stderr
(fake_paths.py). `processes()`, `kill_all()` and a spawned process's `kill_tree()` find what a
command started by walking the process tree down from the harness (a subreaper, so a
double-forked daemon reparents to it) from the children that carry the sandbox's environment
marker.

What it is not: no uid drop, no namespaces, no cgroups, no limits, no syscall filter, no network
isolation, no custody guarantee. A program that builds a sandbox path at run time (a Python script
that opens "/workdir/x" itself) sees the host's filesystem; a daemon that double-forks with a cleared
environment escapes `kill_all`. Its confinement report marks every protection `absent`.

It cannot be reached by accident: `get_backend("fake")` raises unless the caller passes
`allow_fake=True`, RolloutConfig and the CLI cannot name it, and only a test hands it to an
Episode (`Episode(..., backend=...)`)."""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import SandboxError
from . import procfs
from .backend import ProcessInfo, RuntimeName, SandboxUsage
from .capture import HeadTail
from .copyin import copy_tree_in
from .confinement import DEFAULT_REQUIRED
from ..pump import pump
from .core import _DRAIN_GRACE_S, DEFAULT_OUTPUT_CAP, _wait4
from .environment import student_env
from .reaper import become_subreaper, kill_members
from .models import ConfinementReport, ExecResult, KillReport, Protection, ResourceUsage, SandboxSpec
from .runtime import default_runtime
from .syscall_attempts import SyscallAttempt
from .fake_paths import inward, outward, relay

_MARK = "PROCTOR_FAKE_SANDBOX"
_GROUP = "PROCTOR_FAKE_GROUP"
# Host pids of the commands the fake started itself (their Popen reaps them); any other marked
# child of the harness is an orphan that reparented to it, which the fake reaps after killing.
_STARTED: set[int] = set()
# tmpfs when there is one: the fake's directories are made and removed for every test.
_BASE = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _report() -> ConfinementReport:
    return ConfinementReport(protections=tuple(
        Protection(name=name, status="absent", mechanism="none: the fake backend (unit tests only)",
                   detail="the fake runs student commands as the harness's own uid on the host")
        for name in DEFAULT_REQUIRED
    ))


def _read(path: str) -> bytes:
    """The whole of a /proc file, or b"" if it cannot be read. Read to the end: a seq_file such
    as task/*/children gives one page per read, and a harness with a thousand children would
    otherwise never see its newest."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    parts = []
    try:
        while chunk := os.read(fd, 1 << 16):
            parts.append(chunk)
    except OSError:
        pass
    finally:
        os.close(fd)
    return b"".join(parts)


def _children(pid: int) -> list[int]:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [int(kid) for tid in tids for kid in _read(f"/proc/{pid}/task/{tid}/children").split()]


def _marked(marker: bytes) -> list[int]:
    """The processes of a fake sandbox (or of one command, by its group marker): the harness's
    children whose environment carries `marker` (the commands the fake started, and orphans
    reparented to the harness, a subreaper) and every process below them. Walking the tree from
    the harness reads a few /proc files, not the environment of every process on the machine."""
    found: list[int] = []
    todo = [pid for pid in _children(os.getpid()) if b"\0" + marker + b"\0" in b"\0" + _read(f"/proc/{pid}/environ")]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.append(pid)
            todo += _children(pid)
    return found


def _infos(pids: list[int]) -> list[ProcessInfo]:
    inside = set(pids)
    found = []
    for pid in pids:
        ids = procfs.uids_of(pid)
        if ids is None:
            continue
        parent = procfs.ppid_of(pid) or 0
        found.append(ProcessInfo(pid=pid, ppid=parent if parent in inside else 0, uid=ids[0],
                                 command=procfs.cmdline_of(pid), zombie=procfs.is_zombie(pid)))
    return found


def _exit_watch(pids: list[int]) -> list[int]:
    """pidfds for `pids` (a pidfd polls readable once its process has exited)."""
    fds = []
    for pid in pids:
        with contextlib.suppress(OSError):
            fds.append(os.pidfd_open(pid))
    return fds


def _await_exits(fds: list[int], timeout_s: float) -> None:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    end = time.monotonic() + timeout_s
    left = set(fds)
    try:
        while left and (wait := end - time.monotonic()) > 0:
            for fd, _ in poller.poll(wait * 1000):
                poller.unregister(fd)
                left.discard(fd)
    finally:
        for fd in fds:
            os.close(fd)


def _kill_marked(marker: bytes, deadline_s: float) -> KillReport:
    """Kill every process carrying `marker`, round after round (a process forking while it is
    killed leaves a child the previous look missed), until none is left or the deadline passes."""
    start = time.monotonic()
    killed = rounds = 0
    while True:
        rounds += 1
        left = [p for p in _marked(marker) if not procfs.is_zombie(p)]
        if not left:
            return KillReport(empty=True, killed=killed, rounds=rounds, duration_s=time.monotonic() - start)
        if time.monotonic() - start > deadline_s:
            return KillReport(empty=False, killed=killed, rounds=rounds, duration_s=time.monotonic() - start,
                              remaining=tuple(left), detail=f"{len(left)} process(es) still alive after {deadline_s}s")
        orphans = [p for p in left if p not in _STARTED and procfs.ppid_of(p) == os.getpid()]
        exits = _exit_watch(left)
        killed += kill_members(left, lambda: _marked(marker))
        _await_exits(exits, 0.05)  # returns as soon as they are dead: no fixed sleep per kill
        for pid in orphans:  # reparented to the harness: no one else will reap them
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


class FakeProcess:
    """A long-running command whose pipes pass through a path-rewriting relay thread."""

    def __init__(self, popen: subprocess.Popen, group: bytes) -> None:
        self.popen = popen
        self._group = group

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def _pids(self) -> list[int]:
        return _marked(self._group)

    def root(self) -> int | None:
        return self.popen.pid if self.alive() else None

    def processes(self) -> list[ProcessInfo]:
        return _infos(self._pids())

    def pids(self) -> set[int]:
        return set(self._pids())

    def kill(self, pids: Iterable[int]) -> None:
        kill_members(pids, self._pids)

    def kill_tree(self) -> None:
        _kill_marked(self._group, 5.0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        _STARTED.discard(self.popen.pid)


def _relayed(child: subprocess.Popen, places: dict[str, str]) -> subprocess.Popen:
    """Put a rewriting relay between `child`'s pipes and the ones its caller sees."""
    assert child.stdin and child.stdout and child.stderr
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    inner = {in_r: child.stdin, child.stdout.fileno(): child.stdout, child.stderr.fileno(): child.stderr}
    routes = {in_r: (child.stdin.fileno(), inward(places)), child.stdout.fileno(): (out_w, outward(places)),
              child.stderr.fileno(): (err_w, outward(places))}
    ends = {in_r: in_r, child.stdout.fileno(): out_w, child.stderr.fileno(): err_w}

    def on_eof(src: int) -> None:
        stream, end = inner[src], ends[src]
        with contextlib.suppress(OSError):
            stream.close()
        with contextlib.suppress(OSError):
            os.close(end)

    threading.Thread(target=relay, args=(routes, on_eof), name="proctor-fake-relay", daemon=True).start()
    child.stdin, child.stdout, child.stderr = open(in_w, "wb", buffering=0), open(out_r, "rb"), open(err_r, "rb")
    return child


class FakeSandbox:
    """A directory and some marked host processes; see the module docstring for all it is not."""

    backend: RuntimeName = "fake"
    degraded_ok = True

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.confinement = _report()
        self.id = f"fake-{secrets.token_hex(6)}"
        self.python_runtime = spec.runtime or default_runtime()
        self._root = Path(tempfile.mkdtemp(prefix=f"proctor-{self.id}-", dir=_BASE))
        self._places = {spec.workdir: str(self._root / "workdir"), "/tmp": str(self._root / "tmp"),
                        "/dev/shm": str(self._root / "shm")}
        for path in self._places.values():
            os.mkdir(path, 0o700)
        if spec.data_dir:
            self._places[spec.data_at] = str(Path(spec.data_dir).resolve())
        for mount in spec.mounts:
            self._places[mount.target] = str(Path(mount.source).resolve())
        self._marker = f"{_MARK}={self.id}".encode()
        self._groups = 0
        self._cpu_ns = 0
        self._peak = 0
        self._closed = False
        env = student_env(self.python_runtime, spec.env, spec.workdir)
        into = inward(self._places)
        self._env = {k: into.all(v.encode()).decode() for k, v in env.items()}

    @property
    def uid(self) -> int:
        return os.getuid()

    @property
    def workdir(self) -> Path:
        return Path(self._places[self.spec.workdir])

    def _host_cwd(self, cwd: str | None) -> str:
        return inward(self._places).all((cwd or self.spec.workdir).encode()).decode()

    def _group_env(self) -> tuple[dict[str, str], bytes]:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        self._groups += 1
        group = f"{_GROUP}={self.id}-{self._groups}"
        return {**self._env, _MARK: self.id, _GROUP: group.split("=", 1)[1]}, group.encode()

    def run(self, argv: Sequence[str] | str, *, input: bytes | None = None, timeout: float = 60.0,
            output_cap: int = DEFAULT_OUTPUT_CAP, cwd: str | None = None) -> ExecResult:
        argv = ["/bin/sh", "-c", argv] if isinstance(argv, str) else list(argv)
        if not argv:
            raise ValueError("empty command")
        env, group = self._group_env()
        into = inward(self._places)
        start = time.monotonic()
        try:
            proc = subprocess.Popen([into.all(a.encode()).decode() for a in argv], env=env, cwd=self._host_cwd(cwd),
                                    stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return ExecResult(argv=tuple(argv), exit_code=127, stderr=f"{argv[0]}: {exc.strerror}\n".encode())
        _STARTED.add(proc.pid)
        half = output_cap // 2
        out, err = HeadTail(half, output_cap - half), HeadTail(half, output_cap - half)
        timed_out = pump(proc, out.write, err.write, deadline=start + timeout,
                         input=into.all(input) if input is not None else None, grace_s=_DRAIN_GRACE_S)
        if timed_out:
            _kill_marked(group, 5.0)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the wait below is bounded whatever the marker found
        status, rusage = _wait4(proc)
        _STARTED.discard(proc.pid)
        code = os.waitstatus_to_exitcode(status)
        self._cpu_ns += int((rusage.ru_utime + rusage.ru_stime) * 1e9)
        self._peak = max(self._peak, rusage.ru_maxrss * 1024)
        back = outward(self._places)
        return ExecResult(
            argv=tuple(argv), exit_code=code if code >= 0 else None, signal=-code if code < 0 else None,
            timed_out=timed_out, stdout=back.all(out.getvalue()), stderr=back.all(err.getvalue()),
            stdout_dropped=out.dropped, stderr_dropped=err.dropped, duration_s=time.monotonic() - start,
            usage=ResourceUsage(cpu_user_s=rusage.ru_utime, cpu_system_s=rusage.ru_stime, max_rss_bytes=rusage.ru_maxrss * 1024),
        )

    def spawn(self, argv: Sequence[str], *, cwd: str | None = None) -> FakeProcess:
        env, group = self._group_env()
        into = inward(self._places)
        try:
            child = subprocess.Popen([into.all(a.encode()).decode() for a in argv], env=env, cwd=self._host_cwd(cwd),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise SandboxError(f"sandbox {self.id}: could not start {argv[0]}: {exc.strerror}") from None
        _STARTED.add(child.pid)
        return FakeProcess(_relayed(child, self._places), group)

    def kill_all(self, deadline_s: float = 5.0) -> KillReport:
        return _kill_marked(self._marker, deadline_s)

    def processes(self) -> list[ProcessInfo]:
        return _infos(_marked(self._marker))

    def usage(self) -> SandboxUsage:
        return SandboxUsage(cpu_ns=self._cpu_ns, memory_peak_bytes=self._peak)

    def full_places(self) -> dict[str, str]:
        return {}  # no capped filesystems: nothing fills but the host's disk

    def network_counters(self) -> dict[str, int]:
        return {}

    def syscall_attempts(self) -> list[SyscallAttempt]:
        return []

    def copy_in(self, source: str | Path, target: str = "", *, read_only: bool = False) -> int:
        return copy_tree_in(source, self.workdir / target if target else self.workdir, None, read_only=read_only)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        report = self.kill_all()
        shutil.rmtree(self._root, ignore_errors=True)
        if not report.empty:
            raise SandboxError(f"teardown of {self.id} incomplete: {report.detail}")

    def __enter__(self) -> FakeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeBackend:
    """Makes FakeSandboxes. Reached only through `get_backend("fake", allow_fake=True)`."""

    name: RuntimeName = "fake"
    _subreaper = False

    def machine_confinement(self) -> ConfinementReport:
        return _report()

    def create(self, spec: SandboxSpec | None = None, *, require: Iterable[str] | None = None,
               allow_degraded: bool = False) -> FakeSandbox:
        # No refusal for `require`: the caller opted out of every protection by asking for the
        # fake at all (allow_fake), and the report it carries says `absent` for each.
        if not self._subreaper:
            become_subreaper()  # a daemon that double-forks reparents to us, where _marked finds it
            self._subreaper = True
        return FakeSandbox(spec or SandboxSpec())

    def reclaim_stale(self) -> list[str]:
        return []
