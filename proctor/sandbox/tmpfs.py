"""Capped filesystems for the writable places (/workdir, /tmp, /dev/shm).

Each is a tmpfs mounted by the harness under its root-only state directory: `size=` caps the
bytes and `nr_inodes=` the files, so a disk fill or an inode fill stops at the quota; its pages
are charged to the memory cgroup of the process that writes them, so they also count against the
student's memory limit. The mount lives on the host, not in the sandbox's namespace, so the
workdir survives between steps and custody can read it after every student process is gone."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from pathlib import Path

from ..errors import SandboxError
from .models import SandboxLimits

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def mount(source: str, target: Path, fstype: str, options: str, *, devices: bool = False, read_only: bool = False) -> None:
    flags = MS_NOSUID | (0 if devices else MS_NODEV) | (MS_RDONLY if read_only else 0)
    if _libc.mount(source.encode(), os.fsencode(target), fstype.encode(), flags, os.fsencode(options)) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"cannot mount {fstype} on {target}: {os.strerror(err)}")


def mount_tmpfs(target: Path, *, size: int, inodes: int, uid: int, gid: int, mode: int, devices: bool = False) -> None:
    mount("tmpfs", target, "tmpfs", f"size={size},nr_inodes={inodes},mode={mode:o},uid={uid},gid={gid}", devices=devices)


def mount_places(workdir: Path, tmp: Path, shm: Path, limits: SandboxLimits, uid: int) -> None:
    """A sandbox's three writable places, each capped: /workdir the student's own (0700), /tmp
    and /dev/shm sticky and shared by its processes."""
    for path in (workdir, tmp, shm):
        path.mkdir(mode=0o700, exist_ok=True)
    mount_tmpfs(workdir, size=limits.workdir_bytes, inodes=limits.workdir_inodes, uid=uid, gid=uid, mode=0o700)
    mount_tmpfs(tmp, size=limits.tmp_bytes, inodes=limits.tmp_inodes, uid=0, gid=0, mode=0o1777)
    mount_tmpfs(shm, size=limits.shm_bytes, inodes=limits.tmp_inodes, uid=0, gid=0, mode=0o1777)


def unmount(target: Path) -> None:
    """Lazily detach `target`; quiet when nothing is mounted there."""
    if _libc.umount2(os.fsencode(target), MNT_DETACH | UMOUNT_NOFOLLOW) != 0:
        err = ctypes.get_errno()
        if err not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
            raise SandboxError(f"cannot unmount {target}: {os.strerror(err)}")


def mounts_under(directory: Path) -> list[Path]:
    """Mount points at or below `directory`, deepest first (the order to unmount them)."""
    prefix = str(directory).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(directory) or point.startswith(prefix):
            found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def remove_tree(directory: Path) -> None:
    """Unmount everything at or below `directory` (a sandbox's state dir), then delete it."""
    for point in mounts_under(directory):
        unmount(point)
    if directory.exists():
        shutil.rmtree(directory)
