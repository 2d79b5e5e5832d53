"""The student's own inodes for everything it reads: no host inode, no host filesystem counter.

Bind-mounting the host's /usr, /etc files, the runtime and /data gives every sandbox the *same*
inodes and the host filesystem's `statvfs`: an `flock` or an inotify watch on
/usr/lib/os-release in one sandbox is seen by another live one (a judge's sandbox included), and
`df -i /usr` moves when custody copies files onto the host. So each sandbox gets one small tmpfs
of its own (`view/`, made by the harness under its root-only state dir) holding:

- `ovl/0/`: /etc, an overlay of the allowlisted /etc (copied once per harness process into
  a root-only template) with the generated identity files in its upper layer;
- `proc/`: the masked /proc files (see procmask);
- `dev/`: its own null, zero, full, random, urandom and tty nodes (bubblewrap's --dev binds the
  host's, whose inodes every sandbox shares);
- `system/`: this sandbox's own mount of the system image (sysimage): /usr, the allowlisted /etc
  and the default runtime, with inodes, page cache and futex keys of its own;
- `copy/N/`: a tmpfs of its own holding a copy of small read-only task data (/data, read-only
  task mounts up to COPY_BYTES): nothing of it is a host inode, mappings and page cache included;
- `ovl/N/`: a read-only overlay per other read-only directory (larger data, a non-default
  runtime, and everything when no system image is built) whose upper layer is on
  this tmpfs. Overlay inodes belong to their own superblock, so locks, inotify watches and
  fanotify inode marks land on this sandbox's inodes, and `statvfs` answers with the upper
  tmpfs's counters, which nothing moves after creation.

What an overlay still shares is its lower files' mappings and page cache: see docs/sandbox.md."""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import stat
import subprocess
import threading
from pathlib import Path

from ..errors import SandboxError
from . import procmask, sysimage, tmpfs
from .host import binaries, state_dir
from .models import MiB, SandboxLimits

VIEW_BYTES = 64 * MiB  # a ceiling: pages are used only for what is written (tens of KiB)
VIEW_INODES = 65_536
# Read-only task data up to this size gets a copy of its own per sandbox; larger data an overlay
# (whose mappings still reach the host's files: docs/sandbox.md).
COPY_BYTES = 64 * MiB
COPY_FILES = 4096
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


_template: tuple[int, Path] | None = None  # (the pid that made it, its path)
_template_lock = threading.Lock()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_dead_templates() -> None:
    """Templates of harnesses that died (reclaim calls this after their sandboxes are gone)."""
    for old in state_dir("etc-templates").iterdir():
        pid = old.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


def etc_template(names: tuple[str, ...]) -> Path:
    """The allowlisted /etc, copied once per harness process (a copy per sandbox costs tens of
    milliseconds: /etc/alternatives alone holds hundreds of links); removed at exit, or by
    reclaim if the process dies."""
    global _template
    with _template_lock:
        if _template is not None and _template[0] == os.getpid():  # a forked child makes its own
            return _template[1]
        template = state_dir("etc-templates") / f"{os.getpid()}-{secrets.token_hex(4)}"
        template.mkdir(mode=0o755)
        present = [f"/etc/{n}" for n in names if os.path.lexists(f"/etc/{n}")]
        if present:
            # cp -a keeps symlinks as symlinks (/etc/os-release -> ../usr/lib/os-release).
            res = subprocess.run([binaries()["cp"], "-a", "--", *present, str(template)], capture_output=True, text=True)
            if res.returncode != 0:
                shutil.rmtree(template, ignore_errors=True)
                raise SandboxError(f"cannot copy /etc for the sandbox view: {res.stderr.strip()}")
        atexit.register(shutil.rmtree, template, True)
        _template = (os.getpid(), template)
        return template


def _escape(path: str) -> str:
    # overlayfs splits its options at ',' and lowerdir at ':'; a backslash escapes either.
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def _copy_cost(source: str) -> tuple[int | None, int]:
    """(bytes a tmpfs copy of `source` takes, files) or (None, _) when over the copy limits."""
    blocks, files = 0, 0
    for root, dirs, names in os.walk(source) if os.path.isdir(source) else [("", [], [source])]:
        files += 1 + len(names)
        for name in names:
            try:
                blocks += -(-os.lstat(os.path.join(root, name)).st_size // 4096) * 4096
            except OSError:
                pass
        blocks += 4096 * (1 + len(dirs))
        if blocks > COPY_BYTES or files > COPY_FILES:
            return None, files
    return blocks, files


class OwnView:
    """One sandbox's private filesystem under `root` (a host path only the harness can reach)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.etc = ""  # the merged /etc, once built
        self.proc = root / "proc"
        self.empty = root / "empty"
        self.dev = root / "dev"
        self.system_root: Path | None = None  # the system image's mount, when one is built
        self._overlays: dict[str, Path] = {}
        self._copies = 0

    def build(self, etc_names: tuple[str, ...], identity: dict[str, str], limits: SandboxLimits,
              root_image: str | None = None) -> None:
        """`root_image`: a task image's erofs file (proctor.images) to mount as the system tree
        instead of the host's: nothing of the host's system directories or /etc is then shown."""
        self.root.mkdir(mode=0o700, exist_ok=True)
        # Device nodes must work here, so no nodev; the directory above is root-only and the
        # student, without CAP_MKNOD, can make none of its own.
        tmpfs.mount_tmpfs(self.root, size=VIEW_BYTES, inodes=VIEW_INODES, uid=0, gid=0, mode=0o755, devices=True)
        self.empty.mkdir(mode=0o555)
        if root_image is not None:
            self.system_root = self.root / "system"
            self.system_root.mkdir(mode=0o755)
            if not os.path.isfile(root_image):
                raise SandboxError(f"the task image's root {root_image} is gone; prepare the image again (proctor.images.prepare)")
            # Its own loop device and superblock, as for the host's system image (sysimage).
            sysimage.mount(Path(root_image), self.system_root)
            etc = self.system_root / "etc"
            self.etc = self.overlay(str(etc) if etc.is_dir() and not etc.is_symlink() else str(self.empty), identity)
            self._write_proc(limits)
            self._make_devices()
            return
        content = sysimage.system_content()
        image, _ = sysimage.current(content)  # without one, the confinement grant says so
        if image is not None and etc_names == content.etc_names:
            self.system_root = self.root / "system"
            self.system_root.mkdir(mode=0o755)
            sysimage.mount(image, self.system_root)
            self.etc = self.overlay(str(self.system_root / "etc"), identity)
        else:
            self.etc = self.overlay(str(etc_template(etc_names)), identity)
        self._write_proc(limits)
        self._make_devices()

    def _write_proc(self, limits: SandboxLimits) -> None:
        for name, content in procmask.contents(limits).items():
            path = self.proc / name
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.write_text(content)
            os.chmod(path, 0o444)

    def _make_devices(self) -> None:
        self.dev.mkdir(mode=0o755)
        for name in DEVICES:
            try:
                st = os.stat(f"/dev/{name}")
            except FileNotFoundError:
                continue
            if stat.S_ISCHR(st.st_mode):
                os.mknod(self.dev / name, stat.S_IFCHR | 0o666, st.st_rdev)
                os.chmod(self.dev / name, 0o666)

    def devices(self) -> list[str]:
        return sorted(p.name for p in self.dev.iterdir())

    def image_entries(self) -> list[tuple[str, str | None]]:
        """The top-level entries of a task image's root: (name, link target or None for a directory)."""
        assert self.system_root is not None
        out: list[tuple[str, str | None]] = []
        for entry in sorted(os.scandir(self.system_root), key=lambda e: e.name):
            if entry.is_symlink():
                out.append((entry.name, os.readlink(entry.path)))
            elif entry.is_dir():
                out.append((entry.name, None))
        return out

    def system(self, path: str) -> str:
        """This sandbox's own copy of host directory `path` from the system image, or an overlay
        of it when the image does not hold it."""
        if self.system_root is not None:
            inside = self.system_root / path.lstrip("/")
            if inside.is_dir() and not inside.is_symlink():
                return str(inside)
        return self.overlay(path)

    def private(self, source: str) -> str:
        """This sandbox's own copy of read-only task data `source` (a file or directory) when it
        is small; else an overlay of a directory, or the host's file itself."""
        blocks, files = _copy_cost(source)
        if blocks is None:
            return self.overlay(source) if os.path.isdir(source) else source
        base = self.root / "copy" / str(self._copies)
        base.mkdir(mode=0o755, parents=True)
        self._copies += 1
        # tmpfs counts whole pages per file and per directory; the copy's pages are charged to the
        # harness, which writes them, and are capped by this size.
        tmpfs.mount_tmpfs(base, size=blocks + MiB, inodes=files + 16, uid=0, gid=0, mode=0o755)
        target = base / "d"
        res = subprocess.run([binaries()["cp"], "-a", "--", source, str(target)], capture_output=True, text=True)
        if res.returncode != 0:
            raise SandboxError(f"cannot copy {source} into the sandbox: {res.stderr.strip()}")
        return str(target)

    def overlay(self, lower: str, files: dict[str, str] | None = None) -> str:
        """A read-only view of host directory `lower` with this sandbox's own inodes; `files`
        (name: content) are laid over it."""
        if lower in self._overlays:
            return str(self._overlays[lower] / "merged")
        base = self.root / "ovl" / str(len(self._overlays))
        for part in ("upper", "work", "merged"):
            (base / part).mkdir(mode=0o755, parents=True)
        for name, content in (files or {}).items():
            (base / "upper" / name).write_text(content)
            os.chmod(base / "upper" / name, 0o644)
        options = f"lowerdir={_escape(lower)},upperdir={_escape(str(base / 'upper'))},workdir={_escape(str(base / 'work'))}"
        try:
            tmpfs.mount("overlay", base / "merged", "overlay", options, read_only=True)
        except SandboxError as exc:
            raise SandboxError(f"cannot give the sandbox its own view of {lower} (overlayfs): {exc}") from None
        self._overlays[lower] = base
        return str(base / "merged")
