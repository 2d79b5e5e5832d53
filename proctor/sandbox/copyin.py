"""Copying a trusted host tree (task files, a custody copy) into a sandbox's /workdir."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from ..errors import SandboxError


def copy_tree_in(source: str | Path, dest: Path, uid: int | None, *, read_only: bool = False) -> int:
    """Copy regular files and directories from `source` under `dest`, owned by `uid` (None: left
    as created); `read_only`: every directory (`dest` included) and file owned by root, 0755/0644. A link or special file in the source is an authoring error, refused before it is
    copied: followed, it could bring a host file into the student's world. Returns the number of
    files copied."""
    source = Path(source)
    files = 0
    for root, dirs, names in os.walk(source):
        here = dest / Path(root).relative_to(source)
        here.mkdir(mode=0o755, exist_ok=True)
        if uid is not None:
            os.chown(here, uid, uid)
        elif read_only:
            os.chown(here, 0, 0)
            os.chmod(here, 0o755)
        for name in [*dirs, *names]:
            st = os.lstat(Path(root) / name)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise SandboxError(f"{Path(root) / name}: only regular files and directories can be copied into a sandbox")
        for name in names:
            target = here / name
            shutil.copyfile(Path(root) / name, target, follow_symlinks=False)
            os.chmod(target, 0o755 if os.stat(Path(root) / name).st_mode & 0o111 else 0o644)
            if uid is not None:
                os.chown(target, uid, uid)
            elif read_only:
                os.chown(target, 0, 0)
            files += 1
    return files
