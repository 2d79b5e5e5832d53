"""Path mapping for the fake backend (fake.py): the student's /workdir, /tmp, /dev/shm and /data
are directories of a host temp dir, so the fake rewrites those paths in what goes into a command
(its argv, its stdin) and rewrites the host paths back in what comes out.

Standard library only: it also runs as a relay process (`python3 -I -S fake_paths.py MAP -- ARGV`)
between a long-running command's pipes and the caller's, rewriting as the bytes flow. The fake
confines nothing; this only lets tests written against the real sandbox's paths run on it."""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys

# A sandbox path is recognised only as a whole path component at the start of a path: not
# inside a longer word or path (`/x/workdir`, `/workdirs`).
_BEFORE = rb"(?<![\w./-])"
_AFTER = rb"(?![\w.-])"
_QUIET_S = 0.005  # bytes held back as a possible partial path go out after this much quiet


class Rewriter:
    """Rewrites `mapping` (from -> to, as bytes) in a stream fed in chunks. A chunk that ends in
    what may be the start of a path is held back until the next chunk (or `flush`)."""

    def __init__(self, mapping: dict[bytes, bytes]) -> None:
        keys = sorted(mapping, key=len, reverse=True)
        self._map = mapping
        self._re = re.compile(_BEFORE + b"(" + b"|".join(re.escape(k) for k in keys) + b")" + _AFTER)
        self._prefixes = {k[:n] for k in keys for n in range(1, len(k) + 1)}
        self._held = b""

    def all(self, data: bytes) -> bytes:
        return self._re.sub(lambda m: self._map[m.group(1)], data)

    def feed(self, chunk: bytes) -> bytes:
        data = self._held + chunk
        keep = 0
        for n in range(min(len(data), max(map(len, self._prefixes))), 0, -1):
            if data[-n:] in self._prefixes and (n == len(data) or not re.match(rb"[\w./-]", data[-n - 1 : -n])):
                keep = n
                break
        self._held = data[len(data) - keep :] if keep else b""
        return self.all(data[: len(data) - keep])

    def flush(self) -> bytes:
        data, self._held = self._held, b""
        return self.all(data)


def inward(places: dict[str, str]) -> Rewriter:
    """Sandbox paths -> host paths."""
    return Rewriter({k.encode(): v.encode() for k, v in places.items()})


def outward(places: dict[str, str]) -> Rewriter:
    """Host paths -> sandbox paths."""
    return Rewriter({v.encode(): k.encode() for k, v in places.items()})


def _relay(places: dict[str, str], argv: list[str]) -> int:
    """Run argv with its streams rewritten; exit as it exits."""
    into = inward(places)
    child = subprocess.Popen([into.all(a.encode()).decode() for a in argv], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sel = selectors.DefaultSelector()
    routes = {0: (child.stdin.fileno(), into), child.stdout.fileno(): (1, outward(places)),  # type: ignore[union-attr]
              child.stderr.fileno(): (2, outward(places))}  # type: ignore[union-attr]
    for fd in routes:
        sel.register(fd, selectors.EVENT_READ)
    while routes:
        ready = sel.select(_QUIET_S)
        if not ready:
            for _src, (dst, rw) in routes.items():
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
            if key.fd == 0:
                child.stdin.close()  # type: ignore[union-attr]
        if child.poll() is not None and 0 in routes and len(routes) == 1:
            break
    return child.wait()


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass


if __name__ == "__main__":
    sep = sys.argv.index("--")
    sys.exit(_relay(json.loads(sys.argv[1]), sys.argv[sep + 1 :]))
