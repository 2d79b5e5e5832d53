"""The student's view of the filesystem, built from an allowlist.

Nothing of the host is visible unless named here: system directories read-only, a curated /etc
with generated passwd/group/hosts, the student runtime read-only, task data read-only at /data,
the capped writable places, a fresh /proc for the new PID namespace and a minimal /dev. /root,
/home, /opt, /srv, /var, /run, /sys, /tmp of the host and the harness's own environment are
simply never mounted."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .host import root_only
from .models import SandboxSpec

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# What programs need from /etc, and nothing that holds a secret (no shadow, no ssh keys, no
# machine-id, no ld.so.preload that the host might use for its own instrumentation).
ETC_ALLOWLIST = (
    "alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version",
    "environment", "gai.conf", "host.conf", "inputrc", "issue", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "locale.alias", "localtime", "magic", "mime.types", "nsswitch.conf",
    "os-release", "profile", "protocols", "python3", "python3.11", "python3.12", "rpc", "services",
    "ssl", "terminfo", "timezone", "matplotlibrc", "xdg",
)


@dataclass(frozen=True)
class Places:
    """Host paths of one sandbox's own places."""

    root: Path
    etc: Path
    workdir: Path
    tmp: Path
    shm: Path


def write_etc(places: Places, uid: int, gid: int, hostname: str) -> None:
    """Generate the identity files: the student is `student`, with no supplementary groups."""
    places.etc.mkdir(mode=0o755, exist_ok=True)
    files = {
        "passwd": f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nstudent:x:{uid}:{gid}:student:/workdir:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nstudent:x:{gid}:\nnogroup:x:65534:\n",
        "hostname": f"{hostname}\n",
        "hosts": f"127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost\n",
    }
    for name, content in files.items():
        (places.etc / name).write_text(content)
        os.chmod(places.etc / name, 0o644)


def _system_dir_args(path: str) -> list[str]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(st.st_mode):  # merged-/usr hosts: /bin -> usr/bin
        return ["--symlink", os.readlink(path), path]
    return ["--ro-bind", path, path]


def _existing_dir(path: str, what: str) -> str:
    if not os.path.isdir(path):
        raise ConfigError(f"{what} {path!r} does not exist or is not a directory")
    return path


def bwrap_args(spec: SandboxSpec, places: Places, runtime: str | None) -> list[str]:
    """Arguments to bubblewrap, before `--`, for a sandbox's namespaces and mounts."""
    args = [
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
        "--hostname", spec.hostname,
        "--die-with-parent",  # a killed harness takes the whole namespace with it
        "--new-session",  # no controlling terminal to push keystrokes into (TIOCSTI)
        "--cap-drop", "ALL",
        "--perms", "0755", "--dir", "/etc",
    ]
    for d in SYSTEM_DIRS:
        args += _system_dir_args(d)
    for name in ETC_ALLOWLIST:
        host = f"/etc/{name}"
        if os.path.lexists(host):
            if os.path.islink(host):
                args += ["--symlink", os.readlink(host), host]
            else:
                args += ["--ro-bind", host, host]
    for name in ("passwd", "group", "hostname", "hosts"):
        args += ["--ro-bind", str(places.etc / name), f"/etc/{name}"]
    args += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--bind", str(places.shm), "/dev/shm",
        "--bind", str(places.tmp), "/tmp",
        "--bind", str(places.workdir), "/workdir",
    ]
    if runtime:
        # bubblewrap makes missing parents 0700, which the student could not enter: the runtime
        # would be unreachable and `python3` would silently fall back to the system's.
        for parent in reversed(Path(runtime).parents):
            if str(parent) != "/":
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", runtime, runtime]
    if spec.data_dir:
        args += ["--ro-bind", _existing_dir(spec.data_dir, "data_dir"), "/data"]
    for m in spec.mounts:
        if not os.path.exists(m.source):
            raise ConfigError(f"mount source {m.source!r} does not exist")
        args += ["--bind" if m.writable else "--ro-bind", m.source, m.target]
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
