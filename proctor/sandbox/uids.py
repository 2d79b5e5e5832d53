"""One unprivileged uid per live sandbox, leased with a lock file so that two harness processes
never hand out the same uid, and a crashed harness's lease frees itself (the kernel drops flocks)."""

from __future__ import annotations

import os
import pwd
import random
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SandboxError
from .host import state_dir
from .locks import try_lock

# Far above login uids and typical /etc/subuid ranges (100000 + 65536 per user).
UID_BASE = 1_500_000_000
UID_COUNT = 65_536


def _subid_ranges() -> list[tuple[int, int]]:
    ranges = []
    for name in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(name).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                start = int(parts[1])
                ranges.append((start, start + int(parts[2])))
    return ranges


def _uid_is_foreign(uid: int, subids: list[tuple[int, int]]) -> bool:
    """A uid someone else may use: a passwd entry or inside a subordinate id range."""
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    return any(lo <= uid < hi for lo, hi in subids)


@dataclass
class UidLease:
    uid: int
    _fd: int = field(repr=False)
    _path: Path = field(repr=False)

    @property
    def gid(self) -> int:
        return self.uid

    def release(self, clean: bool = True) -> None:
        """Give the uid back. `clean`: no process and no kernel key of it is left (the sandbox's
        teardown proved it), so the lock file goes and the next lease need not look; else the
        file stays, and whoever leases the uid next kills and invalidates what is left first."""
        if self._fd < 0:
            return
        try:
            if clean:
                self._path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = -1


def lease_uid() -> UidLease:
    """Lease a uid no other live sandbox holds. Leftover processes and kernel keys of that uid
    (from a crashed harness) are killed and invalidated before it is handed out. A uid whose lock
    file this lease creates was never used or was given back clean (`release`), so it cannot
    have a process left: the process table is read only for a uid whose file was there."""
    from .keyrings import clear_keys
    from .reaper import kill_uid  # late import: reaper depends on models only

    directory = state_dir("uids")
    subids = _subid_ranges()
    start = random.randrange(UID_COUNT)
    for offset in range(UID_COUNT):
        uid = UID_BASE + (start + offset) % UID_COUNT
        if _uid_is_foreign(uid, subids):
            continue
        path = directory / str(uid)
        fresh = _create(path)
        fd = try_lock(path)
        if fd is None:
            continue
        # Nor any kernel key of it: whoever gets the uid next could read them.
        if not (fresh or kill_uid(uid, deadline_s=2.0)) or clear_keys(uid):
            os.close(fd)
            continue
        return UidLease(uid, fd, path)
    raise SandboxError(f"no free sandbox uid in [{UID_BASE}, {UID_BASE + UID_COUNT}); too many live sandboxes")


def _create(path: Path) -> bool:
    """Create `path` if nobody has; True when this call did."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600))
        return True
    except FileExistsError:
        return False


def uid_in_range(uid: int) -> bool:
    return UID_BASE <= uid < UID_BASE + UID_COUNT
