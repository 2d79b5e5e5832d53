"""Build, find and export task images with the daemonless OS tools (podman, buildah).

- A Dockerfile build is keyed by a hash of the Dockerfile, every file of its context (path,
  mode, content) and the ids of its base images: the same content is built once, then found in
  the store by its tag (`localhost/proctor-build:<hash>`).
- A base image (each `FROM`) or a referenced image is used from the store when present, else
  pulled; offline, with neither, the error names the image.
- RUN steps run with `--isolation chroot` by default (PROCTOR_BUILD_ISOLATION overrides): the
  OCI runtime needs a cgroup layout that machines with a delegated cgroup tree refuse.
- The built image's filesystem is written once per image id into a read-only erofs file that
  every sandbox mounts through a loop device of its own (sysimage.mount): own inodes, own page
  cache. All files in it are owned by root; the student runs as its own uid, never the image's
  USER.

The store lives in PROCTOR_IMAGE_STORE (default /var/lib/proctor/containers, vfs driver), the
erofs roots in PROCTOR_IMAGE_ROOTS (default /var/lib/proctor/image-roots)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from ..errors import ImageError
from ..sandbox.models import ImageRoot
from .models import TaskImage

FORMAT = "1"  # bump when the export layout changes
_TIMEOUT_S = 1800.0
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)


class ImageStore:
    """One container store (podman/buildah --root) and the directory of exported roots."""

    def __init__(self, root: str | Path | None = None, roots: str | Path | None = None, *,
                 driver: str | None = None, isolation: str | None = None) -> None:
        self.root = Path(root or os.environ.get("PROCTOR_IMAGE_STORE", "/var/lib/proctor/containers"))
        self.roots = Path(roots or os.environ.get("PROCTOR_IMAGE_ROOTS", "/var/lib/proctor/image-roots"))
        self.driver = driver or os.environ.get("PROCTOR_IMAGE_DRIVER", "vfs")
        self.isolation = isolation or os.environ.get("PROCTOR_BUILD_ISOLATION", "chroot")

    def _global(self) -> list[str]:
        return ["--root", str(self.root / "storage"), "--runroot", str(self.root / "run"), "--storage-driver", self.driver]

    def _tool(self, tool: str) -> str:
        path = shutil.which(tool)
        if path is None:
            raise ImageError(f"{tool} not found: task images need podman and buildah (make setup installs them)")
        return path

    def run(self, tool: str, *args: str, timeout: float = _TIMEOUT_S) -> subprocess.CompletedProcess:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            return subprocess.run([self._tool(tool), *self._global(), *args], capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ImageError(f"{tool} {args[0]} did not finish in {timeout:.0f} s") from None

    # -- finding ---------------------------------------------------------------------------------
    def image_id(self, ref: str) -> str | None:
        res = self.run("podman", "image", "inspect", "--format", "{{.Id}}", ref, timeout=120)
        out = res.stdout.strip()
        return out if res.returncode == 0 and re.fullmatch(r"[0-9a-f]{64}", out) else None

    def ensure(self, ref: str, *, why: str = "") -> str:
        """The id of image `ref`: from the store when present, else pulled. Offline and absent:
        an ImageError naming `ref`."""
        found = self.image_id(ref)
        if found:
            return found
        pulled = self.run("podman", "pull", "--quiet", ref, timeout=600)
        found = self.image_id(ref) if pulled.returncode == 0 else None
        if found:
            return found
        detail = (pulled.stderr or pulled.stdout).strip().splitlines()
        raise ImageError(f"image {ref!r}{why} is not in the local store ({self.root}) and cannot be pulled: "
                         f"{detail[-1] if detail else 'pull failed'}; build or import it locally (podman import) or make a registry reachable")

    # -- building --------------------------------------------------------------------------------
    def build(self, image: TaskImage) -> str:
        """The id of `image` in the store, built if this content was never built."""
        if image.ref is not None:
            return self.ensure(image.ref)
        context = Path(image.context) if image.context is not None else Path(image.dockerfile).parent  # type: ignore[arg-type]
        dockerfile = Path(image.dockerfile) if image.dockerfile is not None else context / "Dockerfile"
        if not context.is_dir():
            raise ImageError(f"image build context {str(context)!r} does not exist or is not a directory")
        try:
            text = dockerfile.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ImageError(f"cannot read the Dockerfile {str(dockerfile)!r}: {exc}") from None
        bases = []
        for ref in base_images(text):
            bases.append(self.ensure(ref, why=f" (FROM in {dockerfile})"))
        tag = f"localhost/proctor-build:{_build_key(dockerfile, text, context, bases, image.exclude)[:32]}"
        found = self.image_id(tag)
        if found:
            return found
        with tempfile.NamedTemporaryFile("w", prefix="proctor-ignore-", suffix=".dockerignore") as ignore:
            # The context's own ignore file still applies; the excluded paths are added to it.
            own = next((context / n for n in (".containerignore", ".dockerignore") if (context / n).is_file()), None)
            ignore.write((own.read_text(errors="replace").rstrip("\n") + "\n" if own else "") + "".join(f"/{rel}\n" for rel in image.exclude))
            ignore.flush()
            res = self.run("buildah", "bud", "--isolation", self.isolation, "--pull=never", "--layers=false",
                           "--ignorefile", ignore.name, "-f", str(dockerfile), "-t", tag, str(context))
        if res.returncode != 0:
            lines = [line for line in (res.stderr or res.stdout).strip().splitlines() if line.strip()]
            raise ImageError(f"cannot build the image of {dockerfile}: {' | '.join(lines[-3:]) or 'buildah failed'}")
        found = self.image_id(tag)
        if not found:
            raise ImageError(f"building {dockerfile} left no image tagged {tag}")
        return found

    # -- exporting -------------------------------------------------------------------------------
    def export(self, image_id: str, name: str) -> ImageRoot:
        """The read-only root of image `image_id`, written once as an erofs file."""
        self.roots.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.roots, 0o700)
        base = self.roots / f"{image_id[:24]}-{FORMAT}"
        # One exporter per image at a time: another harness's unmount would pull the tree away.
        with open(base.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._export_locked(image_id, name, base)

    def _export_locked(self, image_id: str, name: str, base: Path) -> ImageRoot:
        erofs, meta = base.with_suffix(".erofs"), base.with_suffix(".json")
        if erofs.exists() and meta.exists():
            info = json.loads(meta.read_text())
            return ImageRoot(name=name, id=image_id, root=str(erofs), workdir=info["workdir"], env=info["env"])
        res = self.run("podman", "image", "inspect", "--format", "{{json .Config}}", image_id, timeout=120)
        if res.returncode != 0:
            raise ImageError(f"cannot inspect image {name!r}: {res.stderr.strip()}")
        config = json.loads(res.stdout or "{}") or {}
        env = dict(e.split("=", 1) for e in (config.get("Env") or []) if "=" in e)
        workdir = config.get("WorkingDir") or None
        mounted = self.run("podman", "image", "mount", image_id, timeout=300)
        if mounted.returncode != 0:
            raise ImageError(f"cannot mount image {name!r} to export it: {mounted.stderr.strip()}")
        partial = base.with_suffix(f".partial-{os.getpid()}")
        try:
            made = subprocess.run(["mkfs.erofs", "--quiet", "-x-1", "--all-root", str(partial), mounted.stdout.strip()],
                                  capture_output=True, text=True, timeout=_TIMEOUT_S)
            if made.returncode != 0:
                raise ImageError(f"cannot export image {name!r} as erofs: {(made.stderr or made.stdout).strip()[-300:]}")
            os.chmod(partial, 0o600)
            meta.write_text(json.dumps({"workdir": workdir, "env": env, "name": name}))
            os.rename(partial, erofs)
        except FileNotFoundError:
            raise ImageError("mkfs.erofs not found: install erofs-utils (make setup does)") from None
        finally:
            partial.unlink(missing_ok=True)
            self.run("podman", "image", "unmount", image_id, timeout=120)
        return ImageRoot(name=name, id=image_id, root=str(erofs), workdir=workdir, env=env)


def base_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile's FROM lines name, less earlier stages, scratch and ARG-made names."""
    stages: set[str] = set()
    out: list[str] = []
    for line in dockerfile.splitlines():
        m = _FROM.match(line)
        if not m:
            continue
        ref, stage = m.group(1), m.group(2)
        if ref.lower() not in stages and ref != "scratch" and "$" not in ref and ref not in out:
            out.append(ref)
        if stage:
            stages.add(stage.lower())
    return out


def _build_key(dockerfile: Path, text: str, context: Path, bases: list[str], exclude: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256(f"proctor-build {FORMAT}\n{text}\n{' '.join(bases)}\n{dockerfile.name}\n{' '.join(exclude)}\n".encode())
    left_out = {Path(rel) for rel in exclude}
    for root, dirs, files in os.walk(context):
        dirs[:] = sorted(d for d in dirs if (Path(root) / d).relative_to(context) not in left_out)
        for name in sorted(files):
            path = Path(root) / name
            rel = path.relative_to(context)
            if rel in left_out:
                continue
            st = path.lstat()
            h.update(f"{rel}\0{st.st_mode:o}\0".encode())
            if path.is_symlink():
                h.update(os.readlink(path).encode())
            elif path.is_file():
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
            h.update(b"\n")
    return h.hexdigest()


_prepared: dict[tuple[str, TaskImage], ImageRoot] = {}
_prepared_lock = threading.Lock()


def prepare(image: TaskImage, store: ImageStore | None = None) -> ImageRoot:
    """Build (or find) and export `image`: the root a SandboxSpec takes as `image`. Cached per
    process; across processes the store and the erofs roots are the cache."""
    store = store or ImageStore()
    key = (str(store.root), image)
    with _prepared_lock:
        if key in _prepared and os.path.exists(_prepared[key].root):
            return _prepared[key]
        root = store.export(store.build(image), image.describe())
        _prepared[key] = root
        return root


def image_support() -> tuple[bool, str]:
    """Whether this machine can build and run task images, and what it uses (for `proctor check confinement`)."""
    missing = [t for t in ("podman", "buildah", "mkfs.erofs") if shutil.which(t) is None]
    if missing:
        return False, f"missing {', '.join(missing)} (make setup installs podman buildah crun fuse-overlayfs uidmap mmdebstrap erofs-utils)"
    try:
        version = subprocess.run(["buildah", "--version"], capture_output=True, text=True, timeout=30).stdout.split()[2]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        version = "?"
    iso = os.environ.get("PROCTOR_BUILD_ISOLATION", "chroot")
    return True, f"buildah {version}, isolation {iso}, image root as a per-sandbox erofs mount"
