"""The two small C helpers of the syscall filter and the keyring cleanup, compiled once.

`seccomp-exec` runs inside every sandbox (it installs the filter before the student's command),
so it lives under /usr, which every sandbox shows read-only, in a root-owned directory nobody
else can write to. Each build's name carries a hash of its source, so harnesses of different
versions on one machine never run each other's helper. `make setup` builds them; a harness that
finds one missing builds it with gcc on first use."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

from ..errors import SandboxUnavailable
from .host import SETUP_HINT, root_only

NATIVE_DIR = Path("/usr/local/libexec/proctor")
_SOURCES = Path(__file__).with_name("native")
HELPERS = {"seccomp-exec": "seccomp_exec.c", "clear-keys": "clear_keys.c"}


def _built_path(name: str) -> tuple[Path, Path]:
    source = _SOURCES / HELPERS[name]
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    return source, NATIVE_DIR / f"{name}-{digest}"


def _compile(source: Path, target: Path) -> None:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise SandboxUnavailable(f"{target} is missing and there is no C compiler to build it; {SETUP_HINT}")
    NATIVE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    base = [gcc, "-O2", "-Wall", "-o", str(tmp), str(source)]
    # Static when libc.a is there: no dynamic loader to run on every student command.
    for argv in (base[:1] + ["-static"] + base[1:], base):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            break
    else:
        raise SandboxUnavailable(f"building {target.name} from {source} failed: {done.stderr.strip()[-500:]}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)  # atomic: a concurrent harness sees the old name missing or complete


@cache
def helper(name: str) -> str:
    """Absolute path of a built helper (building it if missing), checked to be root-only."""
    source, target = _built_path(name)
    if not target.exists():
        _compile(source, target)
    for path in (target, *target.parents):
        if not root_only(os.stat(path)):
            raise SandboxUnavailable(f"{path} is not owned by root or is writable by others; refusing to use {name}")
    return str(target)


def build_all() -> None:
    """For `make setup`: build every helper now."""
    for name in HELPERS:
        print(f"setup: {helper(name)}")
