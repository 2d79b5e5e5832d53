"""The student's view of the filesystem, built from an allowlist.

Nothing of the host is visible unless named here: system directories read-only, a curated /etc
with generated passwd/group/hosts, the student runtime read-only, task data read-only at /data (or the task's own path),
the capped writable places (or, for a task image, the image's own tree in place of the first three), a fresh /proc for the new PID namespace and a minimal /dev. /root,
/home, /opt, /srv, /var, /run, /sys, /tmp of the host and the harness's own environment are
simply never mounted.

Nothing the student reads is a host inode either: the system directories, /etc and the default
runtime come from the sandbox's own mount of the system image (sysimage), /data and read-only
task directories from its own overlays or copies (ownfs), and /proc's host-global counters are
masked (procmask)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from . import procmask
from .host import root_only
from .models import SandboxSpec
from .ownfs import OwnView
from .sysimage import ETC_ALLOWLIST, SYSTEM_DIRS


@dataclass(frozen=True)
class Places:
    """Host paths of one sandbox's own places."""

    root: Path
    view: Path
    workdir: Path
    tmp: Path
    shm: Path


def identity_files(uid: int, gid: int, hostname: str, home: str = "/workdir") -> dict[str, str]:
    """The generated identity files: the student is `student`, with no supplementary groups."""
    return {
        "passwd": f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nstudent:x:{uid}:{gid}:student:{home}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nstudent:x:{gid}:\nnogroup:x:65534:\n",
        "hostname": f"{hostname}\n",
        "hosts": f"127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost\n",
    }


def _system_dir_args(path: str, own: OwnView) -> list[str]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(st.st_mode):  # merged-/usr hosts: /bin -> usr/bin
        return ["--symlink", os.readlink(path), path]
    return ["--ro-bind", own.system(path), path]


# Top-level places of an image that the sandbox builds itself (or never shows: /sys).
_IMAGE_SKIPPED = ("etc", "proc", "dev", "sys", "tmp", "workdir")


def _image_root_args(spec: SandboxSpec, own: OwnView) -> list[str]:
    """A task image as the system tree: each of its top-level directories read-only from this
    sandbox's own mount of the image, its top-level links (merged /usr) as links. Nothing of
    the host's system directories, /etc or Python runtime is shown."""
    assert own.system_root is not None
    args: list[str] = []
    for name, link in own.image_entries():
        if name in _IMAGE_SKIPPED or (spec.data_dir and name == "data"):
            continue
        if link is not None:
            args += ["--symlink", link, f"/{name}"]
        else:
            args += ["--ro-bind", str(own.system_root / name), f"/{name}"]
    return args


def _existing_dir(path: str, what: str) -> str:
    if not os.path.isdir(path):
        raise ConfigError(f"{what} {path!r} does not exist or is not a directory")
    return path


def _proc_mask_args(own: OwnView) -> list[str]:
    args = []
    for path in sorted(own.proc.rglob("*")):
        if path.is_file():
            args += ["--ro-bind", str(path), f"/proc/{path.relative_to(own.proc)}"]
    for name in procmask.masked_dirs():
        args += ["--ro-bind", str(own.empty), f"/proc/{name}"]
    return args


def _parents(path: str) -> list[str]:
    # bubblewrap makes missing parents 0700, which the student could not enter: a runtime there
    # would be unreachable and `python3` would silently fall back to the system's.
    args: list[str] = []
    for parent in reversed(Path(path).parents):
        if str(parent) != "/":
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def bwrap_args(spec: SandboxSpec, own: OwnView, places: Places, runtime: str | None) -> list[str]:
    """Arguments to bubblewrap, before `--`, for a sandbox's namespaces and mounts. Read-only
    directories are mounted (as this sandbox's overlays) while the arguments are built."""
    args = [
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
        "--hostname", spec.hostname,
        "--die-with-parent",  # a killed harness takes the whole namespace with it
        "--new-session",  # no controlling terminal to push keystrokes into (TIOCSTI)
        "--cap-drop", "ALL",
    ]
    if spec.image is not None:
        args += _image_root_args(spec, own)
    else:
        for d in SYSTEM_DIRS:
            args += _system_dir_args(d, own)
    args += [
        "--ro-bind", str(own.etc), "/etc",
        "--proc", "/proc", *_proc_mask_args(own),
        "--dev", "/dev",
        # bubblewrap's --dev binds the host's nodes: a lock or watch on /dev/null would be shared.
        *(a for name in own.devices() for a in ("--dev-bind", str(own.dev / name), f"/dev/{name}")),
        "--bind", str(places.shm), "/dev/shm",
        "--bind", str(places.tmp), "/tmp",
    ]
    # The task's own workdir (default /workdir), its parents made enterable.
    args += _parents(spec.workdir) + ["--bind", str(places.workdir), spec.workdir]
    if runtime:
        args += _parents(runtime) + ["--ro-bind", own.system(runtime), runtime]
    if spec.data_dir:
        source = own.private(_existing_dir(spec.data_dir, "data_dir"))
        args += _parents(spec.data_at) + ["--ro-bind", source, spec.data_at]
    for m in spec.mounts:
        if not os.path.exists(m.source):
            raise ConfigError(f"mount source {m.source!r} does not exist")
        if m.writable:
            args += ["--bind", m.source, m.target]  # shared on purpose: the task asked for it
        else:
            # Small data is copied; larger data gets an overlay (own inodes for locks and watches,
            # the host's for mappings) or, for a file, stays a bind of the host's (docs/sandbox.md).
            args += ["--ro-bind", own.private(m.source), m.target]
    for dev in spec.devices:
        try:
            mode = os.stat(dev.path).st_mode
        except FileNotFoundError:
            raise ConfigError(f"device {dev.path!r} requested by the task does not exist on this machine") from None
        if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
            raise ConfigError(f"device {dev.path!r} is not a device node")
        args += ["--dev-bind", dev.path, dev.path]
    # The anchor (root without capabilities) stays in /: it cannot enter the 0700 workdir.
    args += ["--chdir", "/"]
    return args


def check_trusted_dirs(paths: list[str]) -> None:
    """Every directory on the student's PATH, and each of its ancestors, must be root-owned and
    not writable by others: else someone could plant a fake `python3` for whoever runs next."""
    for path in paths:
        p = Path(path)
        for d in [p, *p.parents]:
            try:
                st = os.stat(d)
            except FileNotFoundError:
                break
            if not root_only(st):
                raise ConfigError(f"{d} (on the student PATH via {path}) must be root-owned and not writable by others")
