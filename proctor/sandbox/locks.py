"""Lock files whose holder's death frees them: the kernel drops an flock when its process dies,
even by `kill -9`, so a lock held means a live owner."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def try_lock(path: Path) -> int | None:
    """Take an exclusive flock on `path` without waiting; the open fd, or None if it is held."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # The previous holder may have unlinked the file between our open and our lock: then we
        # would hold a lock on a dead inode while a third party locks a new file. Only the live
        # inode counts.
        if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            return fd
    except (BlockingIOError, FileNotFoundError):
        pass
    os.close(fd)
    return None
