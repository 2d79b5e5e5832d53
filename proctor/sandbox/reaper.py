"""Kill every student process and prove none is left.

The proof has three independent witnesses: the sandbox's cgroups are empty, its PID namespace
holds no process, and no process on the host runs as its uid. A fork storm cannot outrun it
because the cgroup is frozen before anything is killed."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable

from . import procfs
from .models import KillReport


def kill_pids(pids: Iterable[int]) -> int:
    """SIGKILL each pid; the number that were still there."""
    n = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except ProcessLookupError:
            pass
    return n


def kill_members(pids: Iterable[int], members: Callable[[], Iterable[int]]) -> int:
    """SIGKILL each pid that `members()` still lists once it is pinned by a pidfd: a pid that
    ended and was recycled by an unrelated process between the caller's look and now is no
    longer a member, and is never signalled. Returns how many were signalled."""
    pinned = []
    for pid in pids:
        try:
            pinned.append((pid, os.pidfd_open(pid)))
        except OSError:
            pass
    inside = set(members())
    killed = 0
    for pid, fd in pinned:
        try:
            if pid in inside:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                killed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return killed


PR_SET_CHILD_SUBREAPER = 36


_subreaper_of: list[int] = []  # the pid that became subreaper (a forked child does not inherit it)


def become_subreaper() -> None:
    """Make the harness the reaper of its orphaned descendants. A command entered with nsenter has
    its nsenter parent on the host side; once that is killed, the command's corpse would go to
    host PID 1, which may reap late (or never, in a container without an init), and the sandbox's
    PID namespace cannot end until it does. As subreaper the harness reaps them itself. Once per
    process: through the C library already loaded (ctypes' find_library would run ldconfig)."""
    import ctypes

    if _subreaper_of != [os.getpid()]:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
            _subreaper_of[:] = [os.getpid()]


def reap_orphans(uid: int) -> None:
    """Reap zombies of the student's uid that were reparented to us (never anyone else's child):
    among this process's own children, not the whole process table."""
    if os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        candidates = procfs.own_children()
    else:  # a kernel without CONFIG_PROC_CHILDREN: the whole table
        candidates = [p for p in procfs.pids_of_uid(uid) if procfs.ppid_of(p) == os.getpid()]
    for pid in candidates:
        if procfs.is_zombie(pid) and uid in (procfs.uids_of(pid) or ()):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def reap_own_in_pidns(pidns: int) -> None:
    """Reap corpses in the PID namespace `pidns` that were reparented to us. A command killed
    half-way through its start leaves nsenter's child there, still root (the drop to the
    student's uid comes last), reparented to the harness (a subreaper) once nsenter is gone: the
    namespace's init cannot finish exiting until that corpse is reaped, and reap_orphans, which
    looks at the student's uid, never sees it. Only this process's own children are touched,
    and only those inside `pidns`: never a Popen of the harness (those live in its namespace)."""
    for pid in procfs.own_children():
        if procfs.is_zombie(pid) and procfs.pidns_of(pid) == pidns:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def kill_uid(uid: int, deadline_s: float = 5.0) -> bool:
    """SIGKILL every process running as `uid`; True once none is left (zombies aside)."""
    end = time.monotonic() + deadline_s
    while True:
        live = [p for p in procfs.pids_of_uid(uid) if not procfs.is_zombie(p)]
        if not live:
            return True
        if time.monotonic() > end:
            return False
        kill_pids(live)
        time.sleep(0.005)


def reap_until_empty(
    *,
    freeze: Callable[[], None],
    thaw: Callable[[], None],
    cgroup_pids: Callable[[], list[int]],
    uid: int,
    pidns: int | None,
    reap_children: Callable[[], None],
    deadline_s: float,
) -> KillReport:
    """Freeze, kill, thaw, repeat until all three witnesses agree the sandbox is empty.

    The first round kills the cgroup's members (frozen, so none can fork or exit meanwhile); the
    process table is read once the cgroup is empty, as the witness that no process of the uid or
    the PID namespace is left anywhere else. A process that witness finds which no round has
    killed yet (one that left the cgroup: unprivileged it cannot, but nothing relies on that) makes
    every later round kill by the process table too, at once. An empty sandbox is so proven with
    one read of the process table."""
    start = time.monotonic()
    end = start + deadline_s
    killed = rounds = 0
    remaining: list[int] = []
    by_scan = False
    signalled: set[int] = set()
    while True:
        rounds += 1
        try:
            freeze()
        except TimeoutError:
            pass  # killing still works on a partly frozen group; the witnesses decide
        targets = set(cgroup_pids())
        if by_scan:
            targets |= set(procfs.pids_of_uid_or_pidns(uid, pidns))
        targets.discard(os.getpid())
        killed += kill_pids(targets)
        signalled |= targets
        thaw()  # frozen tasks only die once thawed
        wait_end = min(end, time.monotonic() + 0.5)
        # The witnesses are asked at least once per round, even when the freeze and the kill
        # took the whole deadline (a loaded machine): else a sandbox already empty is reported
        # unreapable, and an honest student is flagged for the harness's slowness.
        while True:
            reap_children()
            remaining, unsignalled = _witnesses(cgroup_pids, uid, pidns, signalled)
            if not remaining:
                return KillReport(empty=True, killed=killed, rounds=rounds, duration_s=time.monotonic() - start)
            if unsignalled:
                by_scan = True
                break  # alive and never signalled: waiting cannot end it, the next round kills it
            if time.monotonic() >= wait_end:
                break
            time.sleep(0.002)
        if time.monotonic() >= end:
            return KillReport(
                empty=False,
                killed=killed,
                rounds=rounds,
                duration_s=time.monotonic() - start,
                remaining=tuple(sorted(remaining)),
                detail=f"{len(remaining)} process(es) still alive after {deadline_s:.1f}s",
            )


def _witnesses(cgroup_pids: Callable[[], list[int]], uid: int, pidns: int | None,
               signalled: set[int]) -> tuple[list[int], bool]:
    """The processes still alive, and whether the process table holds one never signalled."""
    alive = set(cgroup_pids())
    if alive:
        # The cheap witness already says no; the process table is read only to confirm empty.
        # A member not yet signalled (started between the kill and this look) waits for the next round.
        return sorted(alive), False
    scanned = {p for p in procfs.pids_of_uid_or_pidns(uid, pidns) if not procfs.is_zombie(p)}
    return sorted(scanned), bool(scanned - signalled)
