"""The one seam between Proctor and the runtimes that confine students.

Everything above `proctor.sandbox` (tools, custody, detectors, judges, the episode, the red team,
the CLI and the server) talks to a sandbox only through the two protocols here, and chooses a
runtime only by name through `get_backend()`. Nothing outside this package imports bubblewrap-,
gVisor-, cgroup- or namespace-specific code, and nothing touches a backend's private members.

Backends:
- `bwrap`: bubblewrap namespaces on the host kernel, cgroups, a seccomp filter (core.py).
- `gvisor`: the same view, uid drop, limits and kill-all proof under gVisor's `runsc`, whose
  user-space kernel stands between the student and the host's.
- `fake`: pure Python, no root, no confinement at all. For fast unit tests of the layers above;
  refused unless the caller (a test) opts in, because it confines nothing.

Process ids in `ProcessInfo` are the backend's own: host pids for bwrap and fake, the sandbox's
pids for gVisor. Use them only with the same sandbox's `kill`; never signal them from the host.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError
from .models import ConfinementReport, ExecResult, KillReport, SandboxSpec

if TYPE_CHECKING:
    import subprocess

    from .syscall_attempts import SyscallAttempt

RuntimeName = Literal["bwrap", "gvisor", "fake"]
RUNTIMES: tuple[RuntimeName, ...] = ("bwrap", "gvisor")  # what users may choose; fake is for tests


class ProcessInfo(BaseModel):
    """One process in a sandbox, as its backend sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    pid: int = Field(description="The backend's id for the process (see the module docstring).")
    ppid: int = Field(description="Its parent's id in the same numbering; 0 when the parent is outside the sandbox.")
    uid: int = Field(description="Real uid as the sandbox reports it.")
    command: str = Field("", description="Command line, NULs as spaces, clipped to 200 characters.")
    zombie: bool = Field(False, description="Every thread of its group has exited; it waits to be reaped.")


class SandboxUsage(BaseModel):
    """Resources used by a sandbox since creation, as its kernel (or user-space kernel) counts them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    memory_peak_bytes: int = 0
    # Charged now: the sandbox's processes, the kernel's memory for them, its tmpfs files, the page
    # cache it read in; and of that, the page cache of ordinary files (the system image's pages:
    # clean, reclaimable under pressure; tmpfs and shared memory, which are not, are left out).
    memory_bytes: int = 0
    memory_file_cache_bytes: int = 0
    cpu_ns: int = 0
    oom_kills: int = 0
    memory_limit_hits: int = 0
    pids_limit_hits: int = 0


@runtime_checkable
class StudentProcess(Protocol):
    """A long-running student process (e.g. the bash tool's shell) with pipes."""

    @property
    def popen(self) -> subprocess.Popen:
        """The host-side handle whose pipes carry the process's stdin, stdout and stderr and whose
        exit follows the student process's (nsenter for bwrap, `runsc exec` for gVisor)."""

    @property
    def pid(self) -> int:
        """Host pid of `popen` (for pidfd waits on its exit), not an id to signal."""

    def alive(self) -> bool: ...

    def root(self) -> int | None:
        """The student process's own id in `processes()` numbering (the shell itself, not its
        children), or None once it has exited."""

    def processes(self) -> list[ProcessInfo]:
        """Every process this one started and every one they started, itself included,
        zombies included, daemons that re-parented included."""

    def pids(self) -> set[int]:
        """The ids of `processes()`, without reading each process (what a tool call compares
        before and after: the bash tool asks at every call)."""

    def kill(self, pids: Iterable[int]) -> None:
        """SIGKILL these members of this process's tree. Ids not (or no longer) in the tree are
        skipped, so a recycled id is never signalled."""

    def kill_tree(self) -> None:
        """Kill this process and everything it started, and wait for `popen`."""


@runtime_checkable
class StudentSandbox(Protocol):
    """One student's world. Use as a context manager; `close()` is safe to call twice."""

    id: str
    backend: RuntimeName
    spec: SandboxSpec
    confinement: ConfinementReport
    degraded_ok: bool

    @property
    def uid(self) -> int:
        """The host uid the student runs as (leased for this sandbox alone)."""

    @property
    def python_runtime(self) -> str | None:
        """The student's Python runtime (a venv root), read-only at the same path inside; None
        when setup built none (the student then has only /usr/bin/python3)."""

    @property
    def workdir(self) -> Path:
        """Host path of /workdir. For custody only, after `kill_all()` reported empty, and never by
        following a path in it (custody.py opens everything with O_NOFOLLOW relative to it)."""

    def run(
        self,
        argv: Sequence[str] | str,
        *,
        input: bytes | None = None,
        timeout: float = 60.0,
        output_cap: int = 1024 * 1024,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command as the student; a string runs under /bin/sh -c. On timeout the command's
        whole tree is killed. Output past `output_cap` keeps its head and tail."""

    def spawn(self, argv: Sequence[str], *, cwd: str | None = None) -> StudentProcess:
        """Start a long-running student process with pipes."""

    def kill_all(self, deadline_s: float = 5.0) -> KillReport:
        """Kill every student process and prove none is left. The next command starts afresh;
        the files in /workdir stay."""

    def processes(self) -> list[ProcessInfo]:
        """Every process in the sandbox now, zombies included (for watchers and custody)."""

    def usage(self) -> SandboxUsage: ...

    def full_places(self) -> dict[str, str]:
        """Which of /workdir, /tmp and /dev/shm are full, each with what ran out ("bytes" or
        "inodes"); the detectors name both in the event."""

    def network_counters(self) -> dict[str, int]:
        """SNMP-style counters of the sandbox's network stack while it runs (empty otherwise);
        the names in `BLOCKED_COUNTERS` count packets kept from leaving (`blocked_packets`)."""

    def syscall_attempts(self) -> list[SyscallAttempt]:
        """Forbidden syscalls refused and recorded since the last call (drained on read)."""

    def copy_in(self, source: str | Path, target: str = "", *, read_only: bool = False) -> int:
        """Copy a trusted host tree into /workdir/`target`, owned by the student; `read_only`:
        owned by root instead (files 0644, directories 0755, `target` itself included), so the
        student's uid can read but not change, add, rename or remove anything in it."""

    def close(self) -> None: ...

    def __enter__(self) -> StudentSandbox: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class SandboxBackend(Protocol):
    """A runtime that makes sandboxes."""

    name: RuntimeName

    def machine_confinement(self) -> ConfinementReport:
        """What this runtime enforces on this machine, measured (cached per process)."""

    def create(
        self,
        spec: SandboxSpec | None = None,
        *,
        require: Iterable[str] | None = None,
        allow_degraded: bool = False,
    ) -> StudentSandbox:
        """Build a sandbox, or raise ConfinementError naming each required protection this
        runtime does not enforce here (unless `allow_degraded`, and then the grant says so)."""

    def reclaim_stale(self) -> list[str]:
        """Tear down what dead harness processes left of this runtime's sandboxes."""


# Every backend's network_counters() uses these names for what it kept from leaving: no route
# (the internet, metadata services, other hosts), or sent out of lo to a non-loopback address.
BLOCKED_COUNTERS = ("Ip.OutNoRoutes", "Ip6.OutNoRoutes", "Guard.LoopbackEscapes")


def blocked_packets(counters: dict[str, int]) -> int:
    """Packets the sandbox's network stack kept from leaving."""
    return sum(counters.get(name, 0) for name in BLOCKED_COUNTERS)


# name -> (module in this package, class): imported only when chosen, so a machine without gVisor
# never imports its backend and a test run never imports the fake by accident.
_BACKENDS: dict[str, tuple[str, str]] = {
    "bwrap": ("core", "BwrapBackend"),
    "gvisor": ("gvisor", "GvisorBackend"),
    "fake": ("fake", "FakeBackend"),
}
_made: dict[str, SandboxBackend] = {}


def get_backend(name: RuntimeName = "bwrap", *, allow_fake: bool = False) -> SandboxBackend:
    """The backend called `name` (one instance per process). `fake` confines nothing, so it is
    refused unless the caller (a unit test) passes `allow_fake=True`; nothing user-facing does."""
    if name not in _BACKENDS:
        raise ConfigError(f"unknown sandbox runtime {name!r}: choose one of {', '.join(RUNTIMES)}")
    if name == "fake" and not allow_fake:
        raise ConfigError("the fake sandbox runtime confines nothing and is for unit tests only; pass allow_fake=True in a test")
    if name not in _made:
        import importlib

        module, cls = _BACKENDS[name]
        path = f"{__package__}.{module}"
        try:
            found = getattr(importlib.import_module(path), cls)
        except ModuleNotFoundError as exc:
            if exc.name != path:
                raise  # the backend is there but broken: not the same as absent
            raise ConfigError(f"sandbox runtime {name!r} is not available in this Proctor install (no module {path}); use --runtime bwrap") from None
        _made[name] = found()
    return _made[name]


RUNTIME_STRENGTH: dict[str, int] = {"fake": 0, "bwrap": 1, "gvisor": 2}


def at_least(runtime: RuntimeName, required: RuntimeName | None) -> bool:
    """Whether `runtime` confines at least as strongly as `required` (gVisor > bwrap > fake)."""
    return required is None or RUNTIME_STRENGTH[runtime] >= RUNTIME_STRENGTH[required]
