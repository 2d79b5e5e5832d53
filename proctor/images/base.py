"""A minimal local Debian base image made with mmdebstrap and `podman import`: no registry needed
(the tests and bench build their task images on it)."""

from __future__ import annotations

import glob
import os
import re
import subprocess
from pathlib import Path

from ..errors import ImageError
from .build import ImageStore


def apt_mirror() -> str:
    """The Debian mirror this machine's apt is configured with."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*")) + ["/etc/apt/sources.list"]:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or re.search(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)\s", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def ensure_debian_base(store: ImageStore, name: str, *, suite: str = "bookworm", include: str = "python3",
                       cache_dir: str | Path | None = None) -> str:
    """The id of local image `name`: Debian `suite` (the essential set plus `include`), built with
    mmdebstrap once (its tarball kept in `cache_dir`) and imported into `store`."""
    found = store.image_id(name)
    if found:
        return found
    cache = Path(cache_dir or store.root)
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    tar = cache / f"base-{suite}-{include.replace(',', '_')}.tar"
    if not tar.exists():
        part = tar.with_suffix(f".part-{os.getpid()}")
        res = subprocess.run(["mmdebstrap", "--quiet", "--variant=essential", f"--include={include}", "--format=tar",
                              "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
                              "--dpkgopt=path-exclude=/usr/share/locale/*", suite, str(part), apt_mirror()],
                             capture_output=True, text=True, timeout=1800)
        if res.returncode != 0:
            part.unlink(missing_ok=True)
            raise ImageError(f"mmdebstrap of Debian {suite} failed: {res.stderr.strip()[-500:]}")
        os.rename(part, tar)
    res = store.run("podman", "import", str(tar), name)
    found = store.image_id(name)
    if res.returncode != 0 or not found:
        raise ImageError(f"podman import of {tar} as {name!r} failed: {res.stderr.strip()[-500:]}")
    return found
