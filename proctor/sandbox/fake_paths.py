"""Path mapping for the fake backend (fake.py): the student's /workdir, /tmp, /dev/shm and /data
are directories of a host temp dir, so the fake rewrites those paths in what goes into a command
(its argv, its stdin) and rewrites the host paths back in what comes out.

For a long-running command, `relay` (run in a thread) sits between its pipes and the caller's and
rewrites as the bytes flow. The fake confines nothing; this only lets tests written against the
real sandbox's paths run on it."""

from __future__ import annotations

import functools
import os
import re
import selectors

# A sandbox path is recognised only as a whole path component at the start of a path: not
# inside a longer word or path (`/x/workdir`, `/workdirs`).
_BEFORE = rb"(?<![\w./-])"
_AFTER = rb"(?![\w.-])"
_QUIET_S = 0.005  # bytes held back as a possible partial path go out after this much quiet


@functools.lru_cache(maxsize=64)  # a sandbox makes a rewriter per command and per stream
def _compiled(keys: tuple[bytes, ...]) -> tuple[re.Pattern[bytes], frozenset[bytes], int]:
    longest_first = sorted(keys, key=len, reverse=True)
    pattern = re.compile(_BEFORE + b"(" + b"|".join(re.escape(k) for k in longest_first) + b")" + _AFTER)
    return pattern, frozenset(k[:n] for k in keys for n in range(1, len(k) + 1)), max(map(len, keys), default=0)


class Rewriter:
    """Rewrites `mapping` (from -> to, as bytes) in a stream fed in chunks. A chunk that ends in
    what may be the start of a path is held back until the next chunk (or `flush`)."""

    def __init__(self, mapping: dict[bytes, bytes]) -> None:
        self._map = mapping
        self._re, self._prefixes, self._longest = _compiled(tuple(sorted(mapping)))
        self._held = b""

    def all(self, data: bytes) -> bytes:
        return self._re.sub(lambda m: self._map[m.group(1)], data)

    def feed(self, chunk: bytes) -> bytes:
        data = self._held + chunk
        keep = 0
        for n in range(min(len(data), self._longest), 0, -1):
            if data[-n:] in self._prefixes and (n == len(data) or not re.match(rb"[\w./-]", data[-n - 1 : -n])):
                keep = n
                break
        self._held = data[len(data) - keep :] if keep else b""
        return self.all(data[: len(data) - keep])

    @property
    def pending(self) -> bool:
        return bool(self._held)

    def flush(self) -> bytes:
        data, self._held = self._held, b""
        return self.all(data)


def inward(places: dict[str, str]) -> Rewriter:
    """Sandbox paths -> host paths."""
    return Rewriter({k.encode(): v.encode() for k, v in places.items()})


def outward(places: dict[str, str]) -> Rewriter:
    """Host paths -> sandbox paths."""
    return Rewriter({v.encode(): k.encode() for k, v in places.items()})


def relay(routes: dict[int, tuple[int, Rewriter]], on_eof) -> None:
    """Copy each source fd to its destination fd through its rewriter until every source is at
    EOF (a thread of the fake's spawned processes). `on_eof(src)` closes what depends on it."""
    sel = selectors.DefaultSelector()
    for fd in routes:
        sel.register(fd, selectors.EVENT_READ)
    try:
        while routes:
            ready = sel.select(_QUIET_S if any(rw.pending for _, rw in routes.values()) else None)
            if not ready:
                for dst, rw in routes.values():
                    _write(dst, rw.flush())
                continue
            for key, _ in ready:
                dst, rw = routes[key.fd]
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except OSError:
                    chunk = b""
                if chunk:
                    _write(dst, rw.feed(chunk))
                    continue
                _write(dst, rw.flush())
                sel.unregister(key.fd)
                del routes[key.fd]
                on_eof(key.fd)
    finally:
        sel.close()


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass  # the reader is gone: what it would have read has nowhere to go
