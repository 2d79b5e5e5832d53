"""A cgroup per sandbox: memory (no swap), pids and a CPU quota, plus a freezer so that killing
cannot be outrun. Works on cgroup v1 (separate hierarchies per controller, as on hybrid hosts)
and cgroup v2 (one unified hierarchy).

Layout, in every hierarchy: `proctor/<sandbox id>` holds the limits; the long-lived anchor of the
sandbox's namespaces and each command live in child groups (`anchor`, `c<N>`), so a command's
whole process tree, double-forked daemons included, can be found and killed without touching
the rest. On v1 only the freezer hierarchy needs the child groups."""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..errors import SandboxError, SandboxUnavailable
from .models import SandboxLimits

ROOT_NAME = "proctor"
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")
V2_CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


def _write(path: Path, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as exc:
        raise SandboxError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _read_int(path: Path) -> int:
    text = _read(path).strip()
    return int(text) if text.isdigit() else 0


def _procs(directory: Path) -> list[int]:
    """PIDs in a cgroup and all its descendants (read with plain os calls: a custody proof reads
    every command's cgroup each round, and os.walk with pathlib cost more than the reads)."""
    found: list[int] = []
    stack = [os.fspath(directory)]
    while stack:
        d = stack.pop()
        try:
            fd = os.open(d + "/cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # gone (removed since it was listed), as os.walk skipped it
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        except OSError:
            chunks = []
        finally:
            os.close(fd)
        found.extend(int(x) for x in b"".join(chunks).split())
        try:
            with os.scandir(d) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            pass
    return found


def _host_memory_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise SandboxError("cannot read MemTotal from /proc/meminfo")


def harness_headroom() -> tuple[int, int]:
    """(memory bytes, CPU quota in microseconds per period) that all sandboxes together may use.
    The rest is the harness's: however many sandboxes run and whatever they do, it keeps at least
    a tenth of memory (512 MiB or more) and a quarter of a core."""
    total = _host_memory_bytes()
    memory = total - max(512 * 1024 * 1024, total // 10)
    cpus = os.cpu_count() or 1
    return memory, max(CPU_PERIOD_US // 2, int((cpus - 0.25) * CPU_PERIOD_US))


def _rmdir_tree(directory: Path, timeout_s: float = 2.0) -> None:
    """Remove a cgroup and its children, bottom-up. rmdir fails with EBUSY while the kernel
    still counts an exiting task, so retry briefly."""
    if not directory.exists():
        return
    dirs = [Path(d) for d, _, _ in os.walk(directory)]
    end = time.monotonic() + timeout_s
    for d in reversed(dirs):
        while True:
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > end:
                    raise SandboxError(f"cannot remove cgroup {d}: {exc.strerror}") from exc
                time.sleep(0.005)


@dataclass(frozen=True)
class CgroupLayout:
    version: int
    mounts: dict[str, Path]  # controller -> hierarchy root (v2: every controller maps to the same)

    def roots(self) -> list[Path]:
        """The proctor directory in each distinct hierarchy."""
        seen: dict[Path, None] = {}
        for mount in self.mounts.values():
            seen[mount / ROOT_NAME] = None
        return list(seen)


@cache
def layout() -> CgroupLayout:
    """Find the cgroup hierarchies this host offers; raise if memory, pids, cpu or freeze is absent."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(rfields) < 3:
            continue
        if rfields[0] == "cgroup":
            for opt in rfields[2].split(","):
                if opt in V1_CONTROLLERS:
                    v1[opt] = Path(fields[4])
        elif rfields[0] == "cgroup2":
            v2 = Path(fields[4])
    if all(c in v1 for c in V1_CONTROLLERS):
        return CgroupLayout(1, v1)
    if v2 is not None:
        available = _read(v2 / "cgroup.controllers").split()
        if all(c in available for c in V2_CONTROLLERS):
            return CgroupLayout(2, {c: v2 for c in V2_CONTROLLERS})
    missing = [c for c in V1_CONTROLLERS if c not in v1]
    raise SandboxUnavailable(
        "no usable cgroup hierarchy: need cgroup v2 with memory, pids and cpu controllers, or cgroup v1 "
        f"with {', '.join(V1_CONTROLLERS)} (missing on v1: {', '.join(missing)}). "
        "Mount them, or run in a container started with its own writable cgroup."
    )


class SandboxCgroup:
    """The cgroups of one sandbox."""

    def __init__(self, sandbox_id: str, layout_: CgroupLayout | None = None) -> None:
        self.id = sandbox_id
        self.layout = layout_ or layout()
        self._next_child = 0
        # Built once: a custody proof and every tool call ask for them again and again.
        self._dir = {c: mount / ROOT_NAME / sandbox_id for c, mount in self.layout.mounts.items()}
        self._dirs = [root / sandbox_id for root in self.layout.roots()]

    # -- paths ---------------------------------------------------------------------------------
    def dir(self, controller: str) -> Path:
        return self._dir[controller]

    def dirs(self) -> list[Path]:
        return list(self._dirs)

    def child_procs_files(self, child: str) -> list[str]:
        """The cgroup.procs files a process writes its pid to, to join child group `child`."""
        if self.layout.version == 2:
            return [str(self.dir("memory") / child / "cgroup.procs")]
        files = {str(self.dir(c) / "cgroup.procs") for c in V1_CONTROLLERS if c != "freezer"}
        files.add(str(self.dir("freezer") / child / "cgroup.procs"))
        return sorted(files)

    # -- lifecycle -----------------------------------------------------------------------------
    def create(self, limits: SandboxLimits) -> None:
        if self.layout.version == 2:
            self._create_v2(limits)
        else:
            self._create_v1(limits)

    def _create_v1(self, limits: SandboxLimits) -> None:
        for root in self.layout.roots():
            root.mkdir(mode=0o755, exist_ok=True)
        memory, cpu_quota = harness_headroom()
        top_mem, top_cpu = self.layout.mounts["memory"] / ROOT_NAME, self.layout.mounts["cpu"] / ROOT_NAME
        _write(top_mem / "memory.limit_in_bytes", str(memory))
        _write(top_cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(top_cpu / "cpu.cfs_quota_us", str(cpu_quota))
        for d in self.dirs():
            d.mkdir(mode=0o755)
        mem = self.dir("memory")
        _write(mem / "memory.limit_in_bytes", str(limits.memory_bytes))
        if (mem / "memory.memsw.limit_in_bytes").exists():
            # memory+swap equal to memory: not one byte may go to swap.
            _write(mem / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        if (mem / "memory.swappiness").exists():
            try:
                _write(mem / "memory.swappiness", "0")
            except SandboxError:
                pass  # some kernels refuse it on non-root groups; memsw still holds the line
        _write(self.dir("pids") / "pids.max", str(limits.pids))
        cpu = self.dir("cpu")
        _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(max(1000, int(limits.cpus * CPU_PERIOD_US))))
        # Below the harness's default weight: under contention the harness wins.
        _write(cpu / "cpu.shares", "256")

    def _create_v2(self, limits: SandboxLimits) -> None:
        root = self.layout.mounts["memory"]
        enable = " ".join(f"+{c}" for c in V2_CONTROLLERS)
        top = root / ROOT_NAME
        top.mkdir(mode=0o755, exist_ok=True)
        for parent in (root, top):
            if not set(V2_CONTROLLERS) <= set(_read(parent / "cgroup.subtree_control").split()):
                _write(parent / "cgroup.subtree_control", enable)
        memory, cpu_quota = harness_headroom()
        _write(top / "memory.max", str(memory))
        _write(top / "cpu.max", f"{cpu_quota} {CPU_PERIOD_US}")
        d = self.dir("memory")
        d.mkdir(mode=0o755)
        _write(d / "memory.max", str(limits.memory_bytes))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
        _write(d / "pids.max", str(limits.pids))
        _write(d / "cpu.max", f"{max(1000, int(limits.cpus * CPU_PERIOD_US))} {CPU_PERIOD_US}")
        if (d / "cpu.weight").exists():
            _write(d / "cpu.weight", "25")
        _write(d / "cgroup.subtree_control", enable)

    def new_child(self) -> str:
        """Create a child group for one command (or the anchor); return its name."""
        name = f"c{self._next_child}"
        self._next_child += 1
        self.make_child(name)
        return name

    def _children_dir(self) -> Path:
        """Where the per-command child groups live: the freezer hierarchy on v1, the one on v2."""
        return self.dir("memory" if self.layout.version == 2 else "freezer")

    def make_child(self, name: str) -> None:
        (self._children_dir() / name).mkdir(mode=0o755, exist_ok=True)

    def children(self) -> list[str]:
        d = self._children_dir()
        return [p.name for p in d.iterdir() if p.is_dir()] if d.exists() else []

    def child_pids(self, name: str) -> list[int]:
        return _procs(self._children_dir() / name)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs():
            found.update(_procs(d))
        return sorted(found)

    def remove_child(self, name: str) -> None:
        _rmdir_tree(self._children_dir() / name)

    # -- freezing ------------------------------------------------------------------------------
    def freeze(self, child: str | None = None, timeout_s: float = 1.0) -> None:
        self._set_frozen(True, child, timeout_s)

    def thaw(self, child: str | None = None) -> None:
        self._set_frozen(False, child, 1.0)

    def _set_frozen(self, frozen: bool, child: str | None, timeout_s: float) -> None:
        d = self._children_dir() / child if child else self._children_dir()
        if not d.exists():
            return
        if self.layout.version == 2:
            _write(d / "cgroup.freeze", "1" if frozen else "0")
            done = lambda: ("frozen 1" in _read(d / "cgroup.events")) == frozen  # noqa: E731
        else:
            _write(d / "freezer.state", "FROZEN" if frozen else "THAWED")
            done = lambda: _read(d / "freezer.state").strip() == ("FROZEN" if frozen else "THAWED")  # noqa: E731
        end = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > end:
                raise TimeoutError(f"cgroup {d} did not reach {'frozen' if frozen else 'thawed'} in {timeout_s}s")
            time.sleep(0.001)

    # -- accounting ----------------------------------------------------------------------------
    def usage(self) -> dict[str, int]:
        """Peak memory, CPU time and how often each limit was hit."""
        if self.layout.version == 2:
            d = self.dir("memory")
            events = dict(line.split() for line in _read(d / "memory.events").splitlines() if " " in line)
            pid_events = dict(line.split() for line in _read(d / "pids.events").splitlines() if " " in line)
            cpu = dict(line.split() for line in _read(d / "cpu.stat").splitlines() if " " in line)
            mem_stat = dict(line.split() for line in _read(d / "memory.stat").splitlines() if " " in line)
            return {
                "memory_peak_bytes": _read_int(d / "memory.peak"),
                "memory_bytes": _read_int(d / "memory.current"),
                "memory_file_cache_bytes": max(0, int(mem_stat.get("file", 0)) - int(mem_stat.get("shmem", 0))),
                "cpu_ns": int(cpu.get("usage_usec", 0)) * 1000,
                "oom_kills": int(events.get("oom_kill", 0)),
                "memory_limit_hits": int(events.get("max", 0)),
                "pids_limit_hits": int(pid_events.get("max", 0)),
            }
        mem = self.dir("memory")
        oom = dict(line.split() for line in _read(mem / "memory.oom_control").splitlines() if " " in line)
        pid_events = dict(line.split() for line in _read(self.dir("pids") / "pids.events").splitlines() if " " in line)
        mem_stat = dict(line.split() for line in _read(mem / "memory.stat").splitlines() if " " in line)
        return {
            "memory_peak_bytes": _read_int(mem / "memory.max_usage_in_bytes"),
            "memory_bytes": _read_int(mem / "memory.usage_in_bytes"),
            "memory_file_cache_bytes": max(0, int(mem_stat.get("total_cache", 0)) - int(mem_stat.get("total_shmem", 0))),
            "cpu_ns": _read_int(self.dir("cpuacct") / "cpuacct.usage"),
            "oom_kills": int(oom.get("oom_kill", 0)),
            "memory_limit_hits": _read_int(mem / "memory.failcnt") + _read_int(mem / "memory.memsw.failcnt"),
            "pids_limit_hits": int(pid_events.get("max", 0)),
        }

    def memory_now(self) -> int:
        """Bytes charged to the sandbox now (one small read: cheap enough to poll)."""
        mem = self.dir("memory")
        return _read_int(mem / ("memory.current" if self.layout.version == 2 else "memory.usage_in_bytes"))

    def memory_pressure(self) -> tuple[int, int]:
        """(bytes reclaim cannot free, file pages refaulted so far). Without swap, anonymous and
        tmpfs pages (both on the anon LRU) and locked pages stay whatever reclaim does; a refault
        is a file page read back soon after reclaim evicted it."""
        prefix = "" if self.layout.version == 2 else "total_"  # v1's own keys leave out the children
        stat = dict(line.split() for line in _read(self.dir("memory") / "memory.stat").splitlines() if " " in line)
        stuck = sum(int(stat.get(prefix + key, 0)) for key in ("inactive_anon", "active_anon", "unevictable"))
        return stuck, int(stat.get(prefix + "workingset_refault_file", 0))

    def remove(self) -> None:
        for d in self.dirs():
            _rmdir_tree(d)


def stale_sandbox_ids() -> set[str]:
    """Sandbox ids that have a cgroup in any hierarchy (live or left by a crash)."""
    ids: set[str] = set()
    try:
        lay = layout()
    except SandboxUnavailable:
        return ids
    for root in lay.roots():
        if root.is_dir():
            ids.update(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("sbx-"))
    return ids
