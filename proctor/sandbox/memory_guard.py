"""Kill what thrashes at its memory limit, as the kernel's OOM killer would have.

Each sandbox reads its system from a private image (sysimage.py), so the code pages of the
programs it runs are page cache charged to its own memory cgroup. A student that fills its limit
with anonymous memory then never meets the kernel's OOM killer: reclaim keeps finding those code
pages to evict, the program reads them straight back, and it crawls at the limit for as long as
it is let. Measured on a loaded 2-core machine: a 512 MiB hog sat at 508 MiB for 15 s, refaulting
80,000 file pages a second, and was never OOM-killed (bench-free: `tests/test_memory_guard.py`).

The guard watches every live sandbox (one thread for all, a small read per sandbox per tick) and
acts only when both hold at every tick for `WINDOW_S`: the memory reclaim cannot free (anonymous and tmpfs
pages, there being no swap, and locked pages) is within `margin(limit)` of the limit, and file
pages are being read back at `REFAULTS_PER_S` or more. It then kills the student's biggest
process and counts an OOM kill, which the detectors report as `resource_limit_hit` as they do the
kernel's. An honest program that keeps its anonymous memory further from the limit than the
margin, or that sits at the limit without thrashing, is never touched."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from . import procfs
from .cgroups import SandboxCgroup
from .reaper import kill_members

MiB = 1 << 20
TICK_S = 0.2
WINDOW_S = 1.0
REFAULTS_PER_S = 1000


def margin(limit_bytes: int) -> int:
    """How close to the limit memory reclaim cannot free must come before thrashing is suspected:
    room for the code a program runs, no more."""
    return max(8 * MiB, limit_bytes // 64)


@dataclass(eq=False)
class Watched:
    """One sandbox under the guard; `kills` is how many processes the guard has OOM-killed in it."""

    cgroup: SandboxCgroup
    limit_bytes: int
    uid: int
    kills: int = 0
    _since: float | None = field(default=None, repr=False)
    _tick: float = field(default=0.0, repr=False)
    _refaults_then: int = field(default=0, repr=False)

    def check(self, now: float) -> None:
        """One tick: note whether the sandbox is thrashing at its limit, and end it if long enough."""
        edge = self.limit_bytes - margin(self.limit_bytes)
        if self.cgroup.memory_now() < edge:
            self._since = None  # the common case: one small read and done
            return
        stuck, refaults = self.cgroup.memory_pressure()
        if stuck < edge:
            self._since = None
            return
        if self._since is None or (refaults - self._refaults_then) < REFAULTS_PER_S * (now - self._tick):
            # Not thrashing since the last tick (a burst of refaults while a program first fills
            # its memory is not thrashing): the window starts again.
            self._since, self._tick, self._refaults_then = now, now, refaults
            return
        self._tick, self._refaults_then = now, refaults
        if now - self._since >= WINDOW_S:
            if self._kill_biggest():
                self.kills += 1
            self._since = None

    def _kill_biggest(self) -> bool:
        sizes = [(procfs.rss_of(pid), pid) for pid in self.cgroup.pids() if (procfs.uids_of(pid) or (None,))[0] == self.uid]
        sizes = [(rss, pid) for rss, pid in sizes if rss]
        if not sizes:
            return False
        _, biggest = max(sizes)
        return kill_members([biggest], self.cgroup.pids) > 0


class _Guard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: set[Watched] = set()
        self._thread: threading.Thread | None = None

    def add(self, watched: Watched) -> None:
        with self._lock:
            self._watched.add(watched)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="proctor-memory-guard", daemon=True)
                self._thread.start()

    def remove(self, watched: Watched) -> None:
        with self._lock:
            self._watched.discard(watched)

    def _run(self) -> None:
        while True:
            time.sleep(TICK_S)
            with self._lock:
                watched = list(self._watched)
            now = time.monotonic()
            for one in watched:
                try:
                    one.check(now)
                except (OSError, ValueError):
                    pass  # a sandbox torn down under the guard: its cgroup files are gone


_GUARD = _Guard()


def watch(cgroup: SandboxCgroup, limit_bytes: int, uid: int) -> Watched:
    """Put a live sandbox under the guard until `unwatch`."""
    watched = Watched(cgroup, limit_bytes, uid)
    _GUARD.add(watched)
    return watched


def unwatch(watched: Watched) -> None:
    _GUARD.remove(watched)
