"""Secret instance salts: hidden draws the public code and a public seed cannot reproduce.

Proctor is open source, so anything a family draws from `(seed, difficulty)` alone can be redrawn
by a student who runs the family's own generator over small seeds. Every hidden draw (ground
truth, hidden test sets, true labels, which rows are corrupted, hidden inputs) is therefore seeded
from a keyed hash of a harness-side secret with the family, seed, difficulty and the draw's role:

    rng = salted_rng("curate-data", seed, difficulty, "labels")

The key lives in a root-only file outside every sandbox view (`/var/lib/proctor/instance.key` by
default, or `$PROCTOR_INSTANCE_KEY`), made by `make setup` or on first use. Whoever holds the key
reproduces every instance from its public seed; results record the key's fingerprint (a hash of
it, never the key), so two runs can be compared only when their fingerprints match."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

DEFAULT_KEY_FILE = Path("/var/lib/proctor/instance.key")
_KEY_BYTES = 32
_lock = threading.Lock()
_cache: dict[Path, bytes] = {}


def key_file() -> Path:
    """Where the instance key lives: `$PROCTOR_INSTANCE_KEY` or the default root-only file."""
    return Path(os.environ.get("PROCTOR_INSTANCE_KEY") or DEFAULT_KEY_FILE)


def _create(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, secrets.token_hex(_KEY_BYTES).encode() + b"\n")
    finally:
        os.close(fd)


def _load(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"instance key {path}: cannot open it ({exc.strerror}); it must be a regular root-only file") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        # A key others can read is no secret; one others can write lets them choose every instance.
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077 or st.st_uid != os.geteuid():
            raise ConfigError(
                f"instance key {path} must be a regular file owned by the harness's user with mode 0600 "
                f"(it is mode {stat.S_IMODE(st.st_mode):o}, owner {st.st_uid}); fix it with `chmod 600 {path}`"
            )
        text = fh.read(4 * _KEY_BYTES).strip()
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) < 16:
        raise ConfigError(f"instance key {path} must hold at least 32 hex digits (e.g. from `openssl rand -hex 32`)")
    return key


def instance_key() -> bytes:
    """The harness's secret, created (0600, root-only directory) the first time it is needed."""
    path = key_file()
    with _lock:
        if path in _cache:
            return _cache[path]
        try:
            key = _load(path)
        except FileNotFoundError:
            try:
                _create(path)
            except FileExistsError:
                pass  # another process made it between our open and our create
            key = _load(path)
        _cache[path] = key
        return key


def key_fingerprint() -> str:
    """A short public name for the key (never the key): which secret made an instance."""
    return hashlib.sha256(b"proctor-instance-key-fingerprint\0" + instance_key()).hexdigest()[:16]


def salted_bytes(family: str, seed: int, difficulty: int, role: str, *extra: object) -> bytes:
    """32 bytes no one without the key can compute, distinct per family, seed, difficulty, role."""
    message = "\0".join(str(part) for part in (family, int(seed), int(difficulty), role, *extra)).encode()
    return hmac.new(instance_key(), message, hashlib.sha256).digest()


def salted_seed(family: str, seed: int, difficulty: int, role: str, *extra: object) -> int:
    """A 128-bit integer seed for one hidden draw (feed it to any RNG)."""
    return int.from_bytes(salted_bytes(family, seed, difficulty, role, *extra)[:16], "big")


def salted_rng(family: str, seed: int, difficulty: int, role: str, *extra: object) -> np.random.Generator:
    """A numpy Generator for one hidden draw. numpy is imported here, by the families that draw:
    every harness imports this module, and numpy's import (and its BLAS threads) cost a plain
    task's batch for nothing."""
    import numpy as np

    return np.random.default_rng(salted_seed(family, seed, difficulty, role, *extra))


def forget_cached_key() -> None:
    """Drop the in-memory copy (tests that switch `$PROCTOR_INSTANCE_KEY` call this)."""
    with _lock:
        _cache.clear()
