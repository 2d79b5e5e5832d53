"""Reading the host's process table, without trusting anything a student process wrote."""

from __future__ import annotations

import os
import time


def pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def own_children() -> list[int]:
    """This process's children (every thread's), from /proc/self/task/*/children: a few small
    reads instead of a scan of the whole process table."""
    found: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                found += [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue  # the thread ended since it was listed
    return found


def _status_field(pid: int, field: bytes) -> bytes | None:
    """The value of one line of /proc/PID/status (b"Uid:", b"PPid:"); None if it is gone. One
    os.read of the head of the file: the fields asked for are all in its first lines, and the only
    line before them a process controls (Name) is escaped by the kernel, so no newline in it can
    fake a field. The hottest read of a custody proof: every host process, every round."""
    try:
        fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    try:
        data = os.read(fd, 4096)
    except (ProcessLookupError, OSError):
        return None
    finally:
        os.close(fd)
    start = data.find(b"\n" + field)
    if start < 0:
        return None
    start += len(field) + 1
    end = data.find(b"\n", start)
    return data[start:end if end >= 0 else len(data)]


def uids_of(pid: int) -> tuple[int, ...] | None:
    """Real, effective, saved and fs uid of a process; None if it is gone."""
    value = _status_field(pid, b"Uid:")
    return tuple(int(x) for x in value.split()[:4]) if value is not None else None


def pids_of_uid(uid: int) -> list[int]:
    """Every live process any of whose uids is `uid` (zombies included: they still hold a pid)."""
    return pids_of_uid_or_pidns(uid, None)


def pidns_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def pids_of_uid_or_pidns(uid: int, ns_inode: int | None) -> list[int]:
    """Processes any of whose uids is `uid`, or whose PID namespace is `ns_inode` (a namespace
    holding none no longer exists), in one pass over the process table (the scan a custody proof
    makes every round): a process in the namespace is not read for its uids."""
    found = []
    for pid in pids():
        if ns_inode is not None and pidns_of(pid) == ns_inode:
            found.append(pid)
            continue
        ids = uids_of(pid)
        if ids is not None and uid in ids:
            found.append(pid)
    return found


def _state(stat_path: str) -> bytes | None:
    try:
        with open(stat_path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may hold spaces and parentheses: the state follows the last ')'.
    end = data.rfind(b")")
    return data[end + 2 : end + 3]


def is_zombie(pid: int) -> bool:
    """True when the whole thread group is dead (or gone). A leader thread that called the raw
    `exit` syscall shows state Z while its other threads run on: judging by the leader alone
    would call such a process dead and let it rewrite the submission unseen, so every thread in
    /proc/PID/task counts."""
    state = _state(f"/proc/{pid}/stat")
    if state is None:
        return True
    if state not in (b"Z", b"X"):
        return False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return True
    return not any(_state(f"/proc/{pid}/task/{tid}/stat") not in (None, b"Z", b"X") for tid in tids if tid.isdigit())


def ppid_of(pid: int) -> int | None:
    value = _status_field(pid, b"PPid:")
    return int(value.split()[0]) if value is not None and value.split() else None


def _read_cmdline(path: str, limit: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(limit + 1)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return b""


_EXEC_RETRIES = 5  # an empty read of a live process is the instant inside execve; it lasts microseconds


def cmdline_of(pid: int, limit: int = 200) -> str:
    """A process's command line for people to read: NULs as spaces, clipped, never trusted.
    Empty only for a process that is gone; a zombie (or one whose arguments cannot be read) shows
    its name in brackets, as ps does."""
    for attempt in range(_EXEC_RETRIES):
        raw = _group_cmdline(pid, limit)
        if raw or is_zombie(pid):
            break
        time.sleep(0.001 * (attempt + 1))  # caught mid-exec: the new image's arguments are a moment away
    if not raw:
        name = _comm(pid)
        return f"[{name}]" if name else ""
    text = raw[:limit].replace(b"\0", b" ").strip().decode("utf-8", errors="replace")
    return text + ("..." if len(raw) > limit else "")


def _group_cmdline(pid: int, limit: int) -> bytes:
    raw = _read_cmdline(f"/proc/{pid}/cmdline", limit)
    if not raw:  # a zombie leader has none; a thread still running has the group's
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            tids = []
        for tid in tids[:64]:
            raw = _read_cmdline(f"/proc/{pid}/task/{tid}/cmdline", limit)
            if raw:
                break
    return raw


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read(64).strip().decode("utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def rss_of(pid: int) -> int:
    """Resident pages of `pid` (0 if it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return 0
