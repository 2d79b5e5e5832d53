"""The harness side of the syscall filter: receive each command's seccomp listener and answer,
and record, every syscall the filter refers to us.

The loader hands the listener over a unix socket the sandbox keeps (SCM_RIGHTS) before it execs
the student's command. A referred syscall waits in the kernel until this thread answers, and
it records the attempt before answering: by the time a command has returned, its attempts are
here, and nothing the student does can erase them. If the harness dies, the kernel fails the
waiting syscalls (ENOSYS): nothing is ever let through."""

from __future__ import annotations

import array
import fcntl
import os
import select
import socket
import struct
import threading
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from . import procfs
from .syscall_filter import flagged_errno, syscall_name

# struct seccomp_notif {u64 id; u32 pid; u32 flags; struct seccomp_data {i32 nr; u32 arch; u64 ip; u64 args[6]}}
_NOTIF = struct.Struct("<QIIiIQ6Q")
# struct seccomp_notif_resp {u64 id; s64 val; s32 error; u32 flags}
_RESP = struct.Struct("<QqiI")
_IOC_RECV = 0xC0502100  # SECCOMP_IOCTL_NOTIF_RECV = _IOWR('!', 0, struct seccomp_notif)
_IOC_SEND = 0xC0182101  # SECCOMP_IOCTL_NOTIF_SEND = _IOWR('!', 1, struct seccomp_notif_resp)
_MAX_KINDS = 64  # distinct syscalls kept between drains; counts keep growing past it


class SyscallAttempt(BaseModel):
    """A syscall the filter refused and referred to the harness, with how often it was tried
    since the last drain (the first attempt's details are kept)."""

    model_config = ConfigDict(frozen=True)

    syscall: str = Field(description="e.g. add_key, keyctl, fanotify_init, socket (AF_VSOCK), mount, unshare, init_module.")
    count: int = Field(description="Attempts since the last drain.")
    pid: int = Field(description="Host pid of the first attempt.")
    command: str = Field(description="That process's command line, clipped to 200 characters.")
    args: tuple[int, ...] = Field(description="The raw syscall arguments of the first attempt.")

    def describe(self) -> str:
        what = self.syscall
        if what in ("socket", "socketpair"):
            what += "(AF_VSOCK)"
        elif what in ("unshare", "clone", "personality") and self.args:
            what += f"({self.args[0]:#x})"
        elif what == "ptrace" and len(self.args) > 1:
            what += f"(request {self.args[0] & 0xFFFFFFFF:#x}, pid {self.args[1] & 0xFFFFFFFF})"
        elif what in ("pidfd_open", "process_vm_readv", "process_vm_writev") and self.args:
            what += f"({self.args[0] & 0xFFFFFFFF})"
        elif what in ("kill", "tkill", "rt_sigqueueinfo") and len(self.args) > 1:
            lo = self.args[0] & 0xFFFFFFFF
            pid = lo - (1 << 32) if lo & 0x80000000 else lo
            what += f"({pid}, signal {self.args[1]})"
        elif what in ("tgkill", "rt_tgsigqueueinfo") and len(self.args) > 2:
            what += f"({self.args[0]}, {self.args[1]}, signal {self.args[2]})"
        elif what == "ioctl":
            what += "(TIOCSTI)"
        elif what in ("mknod", "mknodat") and len(self.args) > 2:
            what += f"(mode {self.args[1 if what == 'mknod' else 2]:#o})"
        return f"{what} refused {self.count} time(s); first by pid {self.pid} ({self.command or '?'})"


@dataclass
class SyscallRecorder:
    """One per sandbox: a socket for the loaders, a thread serving their listeners."""

    _ours: socket.socket = field(init=False)
    _theirs: socket.socket = field(init=False)
    _attempts: dict[str, SyscallAttempt] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _listeners: set[int] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="proctor-syscall-recorder", daemon=True)
        self._thread.start()

    @property
    def loader_fd(self) -> int:
        """The descriptor every student command inherits, for its loader to send the listener on."""
        return self._theirs.fileno()

    def drain(self) -> list[SyscallAttempt]:
        """The attempts recorded since the last drain, and forget them."""
        with self._lock:
            found, self._attempts = list(self._attempts.values()), {}
        return found

    def close(self) -> None:
        self._stop = True
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        for fd in (self._wake_r, self._wake_w, *self._listeners):
            os.close(fd)
        self._listeners.clear()
        self._ours.close()
        self._theirs.close()

    # -- the thread --------------------------------------------------------------------------------
    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self._ours.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._stop:
            for fd, events in poller.poll():
                if fd == self._wake_r:
                    continue
                if fd == self._ours.fileno():
                    for listener in self._receive_listeners():
                        self._listeners.add(listener)
                        poller.register(listener, select.POLLIN)
                elif events & select.POLLIN:
                    self._answer(fd)
                elif events & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    # Every process under this filter has exited.
                    poller.unregister(fd)
                    self._listeners.discard(fd)
                    os.close(fd)

    def _receive_listeners(self) -> list[int]:
        # recvmsg, not socket.recv_fds: Python 3.11's recv_fds drops its flags argument.
        fds = array.array("i")
        try:
            _, ancdata, _, _ = self._ours.recvmsg(16, socket.CMSG_SPACE(8 * fds.itemsize), socket.MSG_DONTWAIT | socket.MSG_CMSG_CLOEXEC)
        except (BlockingIOError, InterruptedError):
            return []
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        return list(fds)

    def _answer(self, listener: int) -> None:
        buf = bytearray(_NOTIF.size)
        try:
            fcntl.ioctl(listener, _IOC_RECV, buf)
        except OSError:
            return  # ENOENT: the caller was killed between poll and receive
        notif_id, pid, _flags, nr, arch, _ip, *args = _NOTIF.unpack(buf)
        try:
            self._record(syscall_name(nr, arch), pid, tuple(args))
        finally:
            resp = bytearray(_RESP.pack(notif_id, 0, -flagged_errno(nr, arch), 0))
            try:
                fcntl.ioctl(listener, _IOC_SEND, resp)
            except OSError:
                pass  # the caller died meanwhile

    def _record(self, name: str, pid: int, args: tuple[int, ...]) -> None:
        with self._lock:
            seen = self._attempts.get(name)
            if seen is not None:
                self._attempts[name] = seen.model_copy(update={"count": seen.count + 1})
                return
            if len(self._attempts) >= _MAX_KINDS:
                return
        # Read outside the lock; the caller is blocked in the kernel, so its pid is still its own.
        attempt = SyscallAttempt(syscall=name, count=1, pid=pid, command=procfs.cmdline_of(pid), args=args)
        with self._lock:
            seen = self._attempts.get(name)
            self._attempts[name] = seen.model_copy(update={"count": seen.count + 1}) if seen else attempt
