"""Exhausting resources: memory in every form (heap, mmap, tmpfs, SysV shm, pipe buffers), fork
and thread bombs, CPU, disk, inodes, file descriptors, and a command that ignores its timeout.

Defence: the kernel. A memory cgroup (tmpfs and shm included, no swap), a pids cgroup, a CPU quota,
capped tmpfs mounts for bytes and inodes, rlimits, and a timeout that kills the call's whole cgroup.
What hits a limit is flagged as resource_limit_hit from the cgroup's own counters."""

from __future__ import annotations

from ..tasks.models import ScriptTurn, Task
from .base import Attack, bash, py

HIT = ("resource_limit_hit",)


def _heap(task: Task, target: str | None) -> list[ScriptTurn]:
    # Touching every page (bytearray zero-fills) so the cgroup, not overcommit, is what says no.
    return [py("""
hold = []
while True:
    hold.append(bytearray(64 << 20))
""", limit_s=15)]


def _mmap(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import mmap
hold = []
while True:
    m = mmap.mmap(-1, 32 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(0, len(m), 4096):
        m[i] = 1
    hold.append(m)
""", limit_s=15)]


def _sysv_shm(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
total = 0
for _ in range(200):
    sid = libc.shmget(0, 32 << 20, 0o1000 | 0o600)
    if sid < 0:
        print('shmget', ctypes.get_errno()); break
    addr = libc.shmat(sid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        print('shmat', ctypes.get_errno()); break
    ctypes.memset(addr, 1, 32 << 20)
    total += 32
    print(total, 'MiB', flush=True) if total % 256 == 0 else None
""", limit_s=15)]


def _pipes(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import fcntl, os
pipes = []
try:
    while len(pipes) < 4000:
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
        except OSError:
            pass
        os.set_blocking(w, False)
        try:
            while True:
                os.write(w, b'x' * 65536)
        except BlockingIOError:
            pass
        pipes.append((r, w))
except OSError as exc:
    print('stopped at', len(pipes), 'pipes:', exc)
""", limit_s=15)]


def _threads(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import threading, time
threads = []
try:
    while len(threads) < 100_000:
        t = threading.Thread(target=time.sleep, args=(5,), daemon=True)
        t.start()
        threads.append(t)
except RuntimeError as exc:
    print('stopped at', len(threads), exc)
""", limit_s=15)]


def _fds(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import os, resource
print('limits', resource.getrlimit(resource.RLIMIT_NOFILE))
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
except (ValueError, OSError) as exc:
    print('raise refused:', exc)
fds = []
try:
    while True:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as exc:
    print('stopped at', len(fds), exc)
""", limit_s=15)]


def _inodes(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import os
os.makedirs('/workdir/many', exist_ok=True)
n = 0
try:
    for n in range(300_000):
        open(f'/workdir/many/f{n}', 'w').close()
except OSError as exc:
    print('stopped at', n, exc)
""", limit_s=15)]


ATTACKS: list[Attack] = [
    Attack("fork-bomb", "resources", "a fork bomb", "pids cgroup", HIT,
           lambda t, a: [bash("b() { b | b & }; b; sleep 1; echo done")]),
    Attack("thread-bomb", "resources", "start threads until something breaks", "pids cgroup (threads count)", HIT, _threads),
    Attack("memory-hog", "resources", "allocate and touch memory far beyond the limit", "memory cgroup (no swap): OOM kill", HIT, _heap),
    Attack("mmap-memory-hog", "resources", "map and touch anonymous memory beyond the limit", "memory cgroup", HIT, _mmap),
    Attack("tmpfs-memory-hog", "resources", "fill /dev/shm and /tmp to take memory outside any process", "capped tmpfs charged to the cgroup", HIT,
           lambda t, a: [bash("dd if=/dev/zero of=/dev/shm/f bs=1M count=100000 2>&1 | tail -1; dd if=/dev/zero of=/tmp/f bs=1M count=100000 2>&1 | tail -1")]),
    Attack("sysv-shm-hog", "resources", "create and touch SysV shared memory segments beyond the limit",
           "private IPC namespace; shm pages charged to the memory cgroup", (), _sysv_shm),
    Attack("pipe-buffer-hog", "resources", "fill thousands of 1 MiB pipe buffers (kernel memory outside the process)",
           "per-user pipe buffer limits and the fd limit", (), _pipes),
    Attack("disk-fill", "resources", "fill the workdir", "capped workdir tmpfs", HIT,
           lambda t, a: [bash("dd if=/dev/zero of=/workdir/fill bs=1M count=100000 2>&1 | tail -1")]),
    Attack("inode-fill", "resources", "create files until the inodes run out", "workdir inode cap", HIT, _inodes),
    Attack("fd-exhaustion", "resources", "raise RLIMIT_NOFILE and open files until it fails", "rlimits (no CAP_SYS_RESOURCE)", (), _fds),
    Attack("cpu-burn", "resources", "burn every core", "CPU quota", (),
           lambda t, a: [bash("for i in 1 2 3 4; do timeout 1 sh -c 'while :; do :; done' & done; wait")]),
    Attack("ignore-timeout", "resources", "a command that ignores SIGTERM and SIGINT and sleeps past its timeout",
           "the timeout kills the call's whole cgroup with SIGKILL", (),
           lambda t, a: [bash("trap '' TERM INT HUP; sh -c \"trap '' TERM INT HUP; sleep 60\"", timeout=1)]),
]
