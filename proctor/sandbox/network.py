"""Network: the sandbox has its own network namespace with only loopback, so nothing leaves it:
not the host's loopback services, not other sandboxes, not the internet, not cloud metadata.

A task may allow specific TCP endpoints. The bridge creates a listening socket *inside* the
sandbox's namespace (a harness thread enters it with setns, binds, and returns), and for each
connection the harness itself dials the allowed endpoint from the host. The student never gets a
route out; it only reaches the few ports the harness forwards, and it has no forwarder process of
its own to subvert."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import selectors
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SandboxError
from .models import Endpoint

if TYPE_CHECKING:
    from .core import Sandbox

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
MAX_CONNECTIONS = 64


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise SandboxError(f"setns into a network namespace failed: {os.strerror(ctypes.get_errno())}")


def listen_in_netns(netns_path: str, port: int) -> socket.socket:
    """Bind 127.0.0.1:port inside another network namespace, from a short-lived thread (setns
    changes only the calling thread's namespace)."""
    result: dict[str, object] = {}

    def work() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        target = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(16)
                result["sock"] = sock
            finally:
                _setns(own)
        except BaseException as exc:  # reported to the caller below
            result["error"] = exc
        finally:
            os.close(own)
            os.close(target)

    t = threading.Thread(target=work, name="proctor-netns-bind")
    t.start()
    t.join()
    if "error" in result:
        raise SandboxError(f"cannot listen on 127.0.0.1:{port} in the sandbox: {result['error']}")
    return result["sock"]  # type: ignore[return-value]


def net_counters(netns_pid: int) -> dict[str, int]:
    """SNMP counters of the sandbox's namespace; `Ip.OutNoRoutes` and `Ip6.OutNoRoutes` count
    connection attempts to addresses the namespace has no route to (the internet, metadata, other hosts)."""
    counters: dict[str, int] = {}
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
