"""What the host must offer before any sandbox can exist: Linux, root, and the helper binaries.

Never a silent fallback: without these there is no isolation, so we stop with an error that says
what is needed."""

from __future__ import annotations

import os
import stat
import sys
from functools import cache
from pathlib import Path

from ..errors import SandboxUnavailable

STATE_DIR = Path(os.environ.get("PROCTOR_STATE_DIR", "/run/proctor"))
SETUP_HINT = "run the README's setup command (`make setup`) as root on Debian/Ubuntu"


def root_only(st: os.stat_result) -> bool:
    """Owned by root and writable by nobody else: safe to trust from a root harness."""
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _trusted_binary(name: str, candidates: tuple[str, ...]) -> str:
    for candidate in candidates:
        try:
            st = os.stat(candidate)
        except FileNotFoundError:
            continue
        # A binary the harness runs as root must not be replaceable by anyone else.
        if not root_only(st):
            raise SandboxUnavailable(f"{candidate} is not owned by root or is writable by others; refusing to run it as root")
        return candidate
    raise SandboxUnavailable(f"{name} not found (looked in {', '.join(candidates)}); {SETUP_HINT}")


@cache
def binaries() -> dict[str, str]:
    """Absolute paths of the system binaries the sandbox drives, checked once."""
    require_host()
    return {
        "bwrap": _trusted_binary("bubblewrap (bwrap)", ("/usr/bin/bwrap", "/usr/local/bin/bwrap")),
        "nsenter": _trusted_binary("nsenter (util-linux)", ("/usr/bin/nsenter", "/bin/nsenter")),
        "setpriv": _trusted_binary("setpriv (util-linux)", ("/usr/bin/setpriv", "/bin/setpriv")),
        "sh": _trusted_binary("/bin/sh", ("/bin/sh", "/usr/bin/sh")),
        "bash": _trusted_binary("bash", ("/bin/bash", "/usr/bin/bash")),
        "cp": _trusted_binary("cp (coreutils)", ("/usr/bin/cp", "/bin/cp")),
    }


def require_host() -> None:
    """Raise SandboxUnavailable unless this is Linux and we are root."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(
            f"Proctor sandboxes need Linux (namespaces, cgroups); this is {sys.platform}. "
            "Run the harness on a Linux host or VM."
        )
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "Proctor sandboxes need root: the harness creates cgroups, mounts and a uid per student. "
            "Run as root (e.g. `sudo proctor ...`) or inside a root container with its own cgroup."
        )


def state_dir(*parts: str) -> Path:
    """A root-only directory under the harness state dir, created on demand."""
    path = STATE_DIR.joinpath(*parts)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path
