"""A read-only erofs image of the system tree the student sees, mounted once per sandbox.

Overlays give a sandbox its own inodes for locks and watches, but `mmap` and reads reach the
*lower* file: the host's. Two sandboxes mapping the same /usr file then share its page-cache
pages, so a futex on a MAP_SHARED mapping wakes across sandboxes (the kernel keys it on the real
inode), `/proc/self/pagemap`'s exclusively-mapped bit tells whether anyone else maps the page,
page-cache residency carries bits from one rollout to the next, and a read moves the host
file's atime. The root is one: the student's system files are the host's inodes.

So setup copies the tree (the system directories, the allowlisted /etc, the default runtime)
into one erofs image, and every sandbox mounts it through a loop device of its own:

- its own block device gives its own superblock (mounting the same device twice would share
  one), hence its own inodes, its own page cache and its own futex keys;
- the loop device reads the image with direct I/O, so the image file's host page cache is not
  a channel either (erofs's own file-backed mount reads its metadata through that cache);
- pages are charged to the memory cgroup of the student process that reads them, and die with
  the mount at teardown, so nothing carries over to a later rollout;
- erofs keeps no atime: the student sees the build's mtimes, never a host access time.

The loop device is configured with autoclear while the harness holds it open: once the mount
is gone (teardown, or reclaim after a crash unmounts it), or if the harness dies before
mounting, the kernel releases it. No loop device can leak.

The image is keyed by a hash of the tree's paths, modes, sizes and mtimes (computed once per
process). A stale image (the tree changed since it was built) is an error naming the fix, never
a silent fallback to the host's inodes; a machine where setup never built one reports the
protection missing (`proctor check confinement`)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import struct
import subprocess
import threading
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..errors import SandboxError
from . import tmpfs
from .runtime import default_runtime

IMAGE_DIR = Path(os.environ.get("PROCTOR_IMAGE_DIR", "/var/lib/proctor/images"))
FORMAT = "1"  # bump when the layout inside the image changes
# What no honest student needs and would cost build time and disk (about 400 MB here): manuals,
# documentation and message translations (the C.UTF-8 locale itself is in /usr/lib/locale).
LEFT_OUT = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")
EROFS_MAGIC = 0xE0F5E1E2

# <linux/loop.h>
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_CONFIGURE = 0x4C0A
_LO_FLAGS_READ_ONLY, _LO_FLAGS_AUTOCLEAR, _LO_FLAGS_DIRECT_IO = 1, 4, 16
# struct loop_config: fd, block_size, struct loop_info64 (5 u64, 4 u32, 64+64+32 bytes, 2 u64),
# 8 reserved u64.
_LOOP_CONFIG = struct.Struct("=II QQQQQ IIII 64s64s32s QQ 64x")


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


class ImageContent(BaseModel):
    """What goes into the image: host directories (kept at their own paths) and /etc names."""

    model_config = ConfigDict(frozen=True)
    dirs: tuple[str, ...]
    etc_names: tuple[str, ...]
    left_out: tuple[str, ...] = LEFT_OUT

    def entries(self) -> list[tuple[str, str]]:
        """(host path, path inside the image) of every top-level piece, /etc files included."""
        out = [(d, d.lstrip("/")) for d in self.dirs if os.path.isdir(d) and not os.path.islink(d)]
        out += [(f"/etc/{n}", f"etc/{n}") for n in self.etc_names if os.path.lexists(f"/etc/{n}")]
        return out


def system_content() -> ImageContent:
    """What every sandbox's view shows of the host: the system directories, the allowlisted
    /etc and the default student runtime."""
    runtime = default_runtime()
    return ImageContent(dirs=SYSTEM_DIRS + ((runtime,) if runtime else ()), etc_names=ETC_ALLOWLIST)


def _left_out(inside: str, left_out: tuple[str, ...]) -> bool:
    return any(inside == p or inside.startswith(p + "/") for p in left_out)


def manifest_hash(content: ImageContent) -> str:
    """A hash of every path, mode, size, mtime and link target the image would hold."""
    h = hashlib.sha256(f"proctor-image {FORMAT}\n{content.model_dump_json()}\n".encode())
    for host, inside in content.entries():
        _hash_tree(h, host, inside, content.left_out)
    return h.hexdigest()


def _hash_tree(h, host: str, inside: str, left_out: tuple[str, ...]) -> None:
    if _left_out(inside, left_out):
        return
    st = os.lstat(host)
    target = os.readlink(host) if os.path.islink(host) else ""
    if stat.S_ISDIR(st.st_mode):
        # A directory's mtime moves when a file comes and goes again (a scratch file under
        # /usr/local): its list of names, hashed below, is what says whether it changed.
        h.update(f"{inside}\0{st.st_mode:o}\0{st.st_uid}\n".encode())
    else:
        h.update(f"{inside}\0{st.st_mode:o}\0{st.st_uid}\0{st.st_size}\0{st.st_mtime_ns}\0{target}\n".encode())
    if stat.S_ISDIR(st.st_mode):
        for name in sorted(os.listdir(host)):
            _hash_tree(h, os.path.join(host, name), f"{inside}/{name}", left_out)


def image_path(digest: str) -> Path:
    return IMAGE_DIR / f"system-{digest[:24]}.erofs"


def built_images() -> list[Path]:
    try:
        return sorted(IMAGE_DIR.glob("system-*.erofs"))
    except OSError:
        return []


_current: dict[ImageContent, tuple[Path | None, str]] = {}
_current_lock = threading.Lock()


def current(content: ImageContent) -> tuple[Path | None, str]:
    """(the image for this content, "") when built and fresh; else (None, why not). The tree is
    hashed once per process: a tree changed while the harness runs is caught by the next one."""
    with _current_lock:
        if content not in _current:
            built = built_images()
            if not built:
                _current[content] = (None, f"no system image in {IMAGE_DIR}: build it with `proctor image build` (make setup)")
            else:
                path = image_path(manifest_hash(content))
                why = "" if path.exists() else (
                    f"the system image in {IMAGE_DIR} is stale (/usr, /etc or the runtime changed since it was built): "
                    "rebuild it with `proctor image build` (make setup)"
                )
                _current[content] = (path if path.exists() else None, why)
        return _current[content]


def forget_current() -> None:
    with _current_lock:
        _current.clear()


def build(content: ImageContent, *, mkfs: str = "mkfs.erofs") -> tuple[Path, float]:
    """Build the image for `content` (if not built already) and remove older ones; returns its
    path and the seconds the build took (0 when it was up to date)."""
    if shutil.which(mkfs) is None:
        raise SandboxError(f"{mkfs} not found: install erofs-utils (make setup does)")
    IMAGE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(IMAGE_DIR, 0o700)
    _remove_dead_builds()
    digest = manifest_hash(content)
    path = image_path(digest)
    took = 0.0
    if not path.exists():
        start = time.monotonic()
        stage = IMAGE_DIR / f".stage-{os.getpid()}"
        partial = IMAGE_DIR / f".partial-{os.getpid()}.erofs"
        _remove_stage(stage)
        stage.mkdir(mode=0o755)
        try:
            script = _stage_script(content, stage)
            regex = "^(" + "|".join(p.replace(".", r"\.") for p in content.left_out) + ")(/|$)"
            # A private mount namespace: the binds that assemble the tree vanish with the build.
            res = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "sh", "-ec",
                 script + ' exec "$0" --quiet -x-1 --preserve-mtime --exclude-regex="$1" "$2" "$3"',
                 mkfs, regex, str(partial), str(stage)],
                capture_output=True, text=True,
            )
            if res.returncode != 0:
                raise SandboxError(f"cannot build the system image: {(res.stderr or res.stdout).strip()[-500:]}")
            os.chmod(partial, 0o600)
            os.rename(partial, path)
        finally:
            partial.unlink(missing_ok=True)
            _remove_stage(stage)
        took = time.monotonic() - start
    _check_mountable(path)
    for old in built_images():
        if old != path:
            old.unlink(missing_ok=True)  # a sandbox still using it holds it open through its loop device
    forget_current()
    return path, took


def _remove_dead_builds() -> None:
    """What a build killed half-way left: its staging directory and its partial image (gigabytes)."""
    for leftover in IMAGE_DIR.glob(".*-*"):
        pid = leftover.name.split("-", 1)[1].split(".", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            if leftover.is_dir():
                _remove_stage(leftover)
            else:
                leftover.unlink(missing_ok=True)


def _remove_stage(directory: Path) -> None:
    # Never delete through a mount: a bind of /usr left here would take the host's /usr with it.
    for point in tmpfs.mounts_under(directory):
        tmpfs.unmount(point)
    if tmpfs.mounts_under(directory):
        raise SandboxError(f"{directory} still has mounts under it; not removing it")
    shutil.rmtree(directory, ignore_errors=True)


def _check_mountable(image: Path) -> None:
    """Mount the image once as a sandbox would: an image this machine cannot mount (no loop
    devices in a container, no erofs in the kernel) must not make every sandbox creation fail."""
    probe = IMAGE_DIR / f".probe-{os.getpid()}"
    probe.mkdir(mode=0o700, exist_ok=True)
    try:
        mount(image, probe)
        tmpfs.unmount(probe)
    except (SandboxError, OSError) as exc:
        image.unlink(missing_ok=True)
        raise SandboxError(f"this machine cannot mount the system image, so sandboxes will read the host's files through overlays: {exc}") from None
    finally:
        probe.rmdir()


def _stage_script(content: ImageContent, stage: Path) -> str:
    lines = []
    for host, inside in content.entries():
        dest = stage / inside
        if inside.startswith("etc/"):
            dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            # Copied, not bound: they are small, and /etc/os-release is a link to keep as a link.
            subprocess.run(["cp", "-a", "--", host, str(dest)], check=True)
        else:
            dest.mkdir(mode=0o755, parents=True, exist_ok=True)
            lines.append(f"mount --bind -o ro {_q(host)} {_q(str(dest))};")
    if (stage / "etc").is_dir():
        os.chmod(stage / "etc", 0o755)  # the lower layer of the student's /etc
    return " ".join(lines)


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def mount(image: Path, target: Path) -> None:
    """Mount `image` read-only at `target` through a loop device of its own (see the module doc)."""
    image_fd = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for _ in range(20):
            try:
                with open("/dev/loop-control", "rb", buffering=0) as ctl:
                    number = fcntl.ioctl(ctl.fileno(), _LOOP_CTL_GET_FREE)
            except OSError as exc:
                raise SandboxError(f"no loop device for the system image (/dev/loop-control: {exc.strerror})") from None
            device = f"/dev/loop{number}"
            try:
                loop_fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                config = _LOOP_CONFIG.pack(image_fd, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                           _LO_FLAGS_READ_ONLY | _LO_FLAGS_AUTOCLEAR | _LO_FLAGS_DIRECT_IO,
                                           image.name.encode()[:63], b"", b"", 0, 0)
                try:
                    fcntl.ioctl(loop_fd, _LOOP_CONFIGURE, config)
                except OSError as exc:
                    if exc.errno == 16:  # EBUSY: another harness took this one first
                        continue
                    raise SandboxError(f"cannot attach the system image to {device}: {exc.strerror}") from None
                # The mount holds the device from here; closing our fd below lets autoclear free it
                # when the mount goes (or now, if the mount failed).
                tmpfs.mount(device, target, "erofs", "", read_only=True)
                return
            finally:
                os.close(loop_fd)
        raise SandboxError("cannot find a free loop device for the system image")
    finally:
        os.close(image_fd)
