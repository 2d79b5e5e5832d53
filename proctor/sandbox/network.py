"""Network: the sandbox has its own network namespace with only loopback, so nothing leaves it:
not the host's loopback services, not other sandboxes, not the internet, not cloud metadata.

A task may allow specific TCP endpoints. The bridge creates a listening socket *inside* the
sandbox's namespace (a harness thread enters it with setns, binds, and returns), and for each
connection the harness itself dials the allowed endpoint from the host. The student never gets a
route out; it only reaches the few ports the harness forwards, and it has no forwarder process of
its own to subvert.

One way out of the routing table remains: a socket bound to `lo` (SO_BINDTODEVICE) sends to any
address, the kernel assuming it is on-link, so a packet to cloud metadata leaves through loopback
without moving a no-route counter. Each namespace gets a small nftables table that drops and
counts packets leaving `lo` for an address that is not loopback (`loopback_escapes`); where nft
is missing the guard is absent and `net_counters` says so (`Guard.Absent`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..errors import SandboxError
from .models import Endpoint

if TYPE_CHECKING:
    from .core import Sandbox

CLONE_NEWNET = 0x40000000
T = TypeVar("T")
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
MAX_CONNECTIONS = 64


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise SandboxError(f"setns into a network namespace failed: {os.strerror(ctypes.get_errno())}")


def in_netns(netns_path: str, work: Callable[[], T], timeout_s: float = 10.0) -> T:
    """Run `work` inside another network namespace, on a short-lived thread (setns changes only
    the calling thread's namespace; the thread goes back before it ends, and ends either way). A
    SandboxError if it has not finished within `timeout_s` (the thread is left to end by itself)."""
    result: dict[str, object] = {}

    def run() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            target = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(target)
                try:
                    result["value"] = work()
                finally:
                    _setns(own)
            finally:
                os.close(target)
        except BaseException as exc:  # reported to the caller below
            result["error"] = exc
        finally:
            os.close(own)

    t = threading.Thread(target=run, name="proctor-netns", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise SandboxError(f"work in the network namespace {netns_path} did not finish within {timeout_s:.0f}s")
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["value"]  # type: ignore[return-value]


def listen_in_netns(netns_path: str, port: int) -> socket.socket:
    """Bind 127.0.0.1:port inside another network namespace."""
    def bind() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(16)
        except BaseException:
            sock.close()
            raise
        return sock

    try:
        return in_netns(netns_path, bind)
    except (OSError, SandboxError) as exc:
        raise SandboxError(f"cannot listen on 127.0.0.1:{port} in the sandbox: {exc}") from None


NFT_CANDIDATES = ("/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft")
GUARD_TABLE = "proctor_loopback_guard"
# Honest loopback traffic goes to 127.0.0.0/8 or ::1 (multicast on lo reaches nothing and is left
# alone); anything else leaving lo was sent there on purpose by a socket bound to it.
_GUARD_RULES = f"""
table inet {GUARD_TABLE} {{
    chain output {{
        type filter hook output priority 0; policy accept;
        oifname "lo" ip daddr != {{ 127.0.0.0/8, 224.0.0.0/4, 255.255.255.255 }} counter drop
        oifname "lo" ip6 daddr != {{ ::1, ff00::/8 }} counter drop
    }}
}}
"""


def _nft() -> str | None:
    for candidate in NFT_CANDIDATES:
        try:
            st = os.stat(candidate)
        except FileNotFoundError:
            continue
        # Run as root: it must not be replaceable by anyone else.
        return candidate if st.st_uid == 0 and not st.st_mode & 0o022 else None
    return None


_LIBNFT_DIRS = (f"/usr/lib/{getattr(sys.implementation, '_multiarch', '')}", f"/lib/{getattr(sys.implementation, '_multiarch', '')}",
                "/usr/lib64", "/usr/lib")
_NFT_CTX_OUTPUT_JSON = 1 << 4
_libnft_lock = threading.Lock()
_libnft_cache: list[ctypes.CDLL | None] = []


def _root_only(path: str) -> bool:
    """Owned by root and writable by no one else, and so is the directory holding it."""
    try:
        return all(st.st_uid == 0 and not st.st_mode & 0o022 for st in (os.stat(path), os.stat(os.path.dirname(path))))
    except OSError:
        return False


def _libnftables() -> ctypes.CDLL | None:
    """nft's own library (the OS's libnftables1), loaded once into the harness: the guard is
    installed and its counters read without starting nsenter and nft for each (4 ms of CPU a
    rollout, issue 15). None where it is missing or not root's alone, or where PROCTOR_NFT_LIBRARY=0
    (then nft is run)."""
    if os.environ.get("PROCTOR_NFT_LIBRARY") == "0":
        return None
    with _libnft_lock:
        if not _libnft_cache:
            lib = None
            path = next((f"{d}/libnftables.so.1" for d in _LIBNFT_DIRS if os.path.isfile(f"{d}/libnftables.so.1")), None)
            if path is not None and _root_only(os.path.realpath(path)):
                try:
                    lib = ctypes.CDLL(os.path.realpath(path))
                    lib.nft_ctx_new.restype = ctypes.c_void_p
                    lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
                    for name in ("nft_ctx_buffer_output", "nft_ctx_buffer_error"):
                        getattr(lib, name).argtypes = [ctypes.c_void_p]
                    lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
                    lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
                    for name in ("nft_ctx_get_output_buffer", "nft_ctx_get_error_buffer"):
                        getattr(lib, name).argtypes = [ctypes.c_void_p]
                        getattr(lib, name).restype = ctypes.c_char_p
                    lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
                except (OSError, AttributeError):
                    lib = None
            _libnft_cache.append(lib)
        return _libnft_cache[0]


def nft_library_loaded() -> bool:
    """Whether the loopback guard is installed and read through libnftables (else nsenter and nft)."""
    return _libnftables() is not None


def _nft_in(netns_pid: int, command: str, json_out: bool = False) -> subprocess.CompletedProcess[str] | None:
    """Run nft `command` (rules, or `list ...`) in the network namespace of `netns_pid`: through
    libnftables on a thread inside the namespace, else through nsenter and nft; None when neither
    is there or the namespace is gone."""
    lib = _libnftables()
    netns = f"/proc/{netns_pid}/ns/net"
    if lib is not None:
        def run() -> subprocess.CompletedProcess[str]:
            with _libnft_lock:  # one context at a time: the library is not promised to be thread-safe
                ctx = lib.nft_ctx_new(0)
                if not ctx:
                    raise OSError("nft_ctx_new failed")
                try:
                    lib.nft_ctx_buffer_output(ctx)
                    lib.nft_ctx_buffer_error(ctx)
                    if json_out:
                        lib.nft_ctx_output_set_flags(ctx, _NFT_CTX_OUTPUT_JSON)
                    rc = lib.nft_run_cmd_from_buffer(ctx, command.encode())
                    out, err = lib.nft_ctx_get_output_buffer(ctx) or b"", lib.nft_ctx_get_error_buffer(ctx) or b""
                    return subprocess.CompletedProcess(["libnftables"], 0 if rc == 0 else 1, out.decode(errors="replace"),
                                                       err.decode(errors="replace"))
                finally:
                    lib.nft_ctx_free(ctx)

        try:
            return in_netns(netns, run)
        except (OSError, SandboxError):
            if not os.path.exists(netns):
                return None  # the namespace is gone: nothing to guard or count
            # Else the library failed where nft may not: never a guard silently left out.
    nft = _nft()
    if nft is None:
        return None
    from .host import binaries

    args = ["-j", *command.split()] if json_out else ["-f", "-"]
    try:
        return subprocess.run([binaries()["nsenter"], f"--net={netns}", "--", nft, *args],
                              input=None if json_out else command, capture_output=True, text=True, timeout=10, close_fds=True, cwd="/")
    except (OSError, subprocess.TimeoutExpired):
        return None


def guard_loopback(netns_pid: int) -> None:
    """Install the loopback guard in the namespace of `netns_pid`; a SandboxError if nft is there
    but refuses (a guard that silently failed would be a blind spot)."""
    res = _nft_in(netns_pid, _GUARD_RULES)
    if res is not None and res.returncode != 0:
        raise SandboxError(f"nft could not install the loopback guard: {res.stderr.strip()[:300]}")


def loopback_escapes(netns_pid: int) -> int | None:
    """Packets the loopback guard dropped (sent out of `lo` to a non-loopback address); None when
    the guard is not there to count."""
    res = _nft_in(netns_pid, f"list table inet {GUARD_TABLE}", json_out=True)
    if res is None or res.returncode != 0:
        return None
    try:
        items = json.loads(res.stdout).get("nftables", [])
    except ValueError:
        return None
    total = 0
    for item in items:
        for expr in (item.get("rule") or {}).get("expr", []):
            if isinstance(expr, dict) and isinstance(expr.get("counter"), dict):
                total += int(expr["counter"].get("packets", 0))
    return total


def net_counters(netns_pid: int) -> dict[str, int]:
    """SNMP counters of the sandbox's namespace; `Ip.OutNoRoutes` and `Ip6.OutNoRoutes` count
    connection attempts to addresses the namespace has no route to (the internet, metadata, other
    hosts), `Guard.LoopbackEscapes` packets sent out of lo to anything but loopback (or
    `Guard.Absent`: 1 when that guard is not installed)."""
    counters: dict[str, int] = {}
    escapes = loopback_escapes(netns_pid)
    if escapes is None:
        counters["Guard.Absent"] = 1
    else:
        counters["Guard.LoopbackEscapes"] = escapes
    try:
        lines = Path(f"/proc/{netns_pid}/net/snmp").read_text().splitlines()
    except OSError:
        return counters
    for header, values in zip(lines[::2], lines[1::2]):
        proto, names = header.split(":", 1)
        for name, value in zip(names.split(), values.split(":", 1)[1].split()):
            counters[f"{proto}.{name}"] = int(value)
    # IPv6 keeps its own counters, one `Ip6OutNoRoutes  N` per line: as `Ip6.OutNoRoutes`.
    try:
        for line in Path(f"/proc/{netns_pid}/net/snmp6").read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].startswith("Ip6") and parts[1].isdigit():
                counters[f"Ip6.{parts[0][3:]}"] = int(parts[1])
    except OSError:
        pass
    return counters


class NetworkBridge:
    """Forwards allowlisted endpoints into one sandbox."""

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self.endpoints = tuple(endpoints)
        self._listeners: list[socket.socket] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.connections = 0

    def start(self, sandbox: Sandbox) -> None:
        self._stop.clear()
        netns = f"/proc/{sandbox._anchor_pid}/ns/net"
        for ep in self.endpoints:
            sock = listen_in_netns(netns, ep.local_port)
            self._listeners.append(sock)
            t = threading.Thread(target=self._accept_loop, args=(sock, ep), daemon=True, name=f"proctor-bridge-{ep.local_port}")
            t.start()
            self._threads.append(t)

    def _accept_loop(self, listener: socket.socket, ep: Endpoint) -> None:
        listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.connections >= MAX_CONNECTIONS:
                client.close()
                continue
            self.connections += 1
            threading.Thread(target=self._relay, args=(client, ep), daemon=True).start()

    def _relay(self, client: socket.socket, ep: Endpoint) -> None:
        try:
            upstream = socket.create_connection((ep.host, ep.port), timeout=10)
        except OSError:
            client.close()
            return
        sel = selectors.DefaultSelector()
        peers = {client.fileno(): upstream, upstream.fileno(): client}
        for s in (client, upstream):
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(0.2):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    except BlockingIOError:
                        continue
                    if not data:
                        return
                    peers[key.fd].setblocking(True)
                    peers[key.fd].sendall(data)
                    peers[key.fd].setblocking(False)
        except OSError:
            return
        finally:
            sel.close()
            client.close()
            upstream.close()

    def stop(self) -> None:
        self._stop.set()
        for sock in self._listeners:
            sock.close()
        self._listeners.clear()
        for t in self._threads:
            t.join(timeout=1)
        self._threads.clear()
