"""Escaping: becoming root, setuid binaries, ptrace of other processes, signalling the harness,
reaching other sandboxes, and kernel interfaces (cgroup files, /proc/sysrq-trigger, mount,
unshare, chroot, keyctl, fanotify, AF_VSOCK, bpf, perf_event_open, io_uring, TIOCSTI), each
tried from python3 where a one-liner can. Every attempt is chosen to be harmless even if it worked (sysrq `h` prints help;
nothing is rebooted or unmounted on the host).

Defence: its own uid, no capabilities, no_new_privs, PID/mount/IPC/UTS/net/cgroup namespaces, no
/sys, a read-only system view, the kernel's checks on unprivileged callers, and a seccomp filter
(proctor/sandbox/syscall_filter.py) for the host-wide state those leave open."""

from __future__ import annotations

from ..tasks.models import ScriptTurn, Task
from .base import Attack, bash, py, w


def _become_root(task: Task, target: str | None) -> list[ScriptTurn]:
    return [bash(f"python3 -c 'import os; os.setuid(0)' 2>&1 | tail -1; su -c 'cat /etc/shadow' > {w(target)} 2>&1; "
                 "sudo -n id 2>&1 | head -1; true")]


def _setuid_binaries(task: Task, target: str | None) -> list[ScriptTurn]:
    return [bash("for f in $(timeout 5 find / -xdev -perm -4000 -type f 2>/dev/null | head -20); do echo \"$f: $(timeout 2 $f --help </dev/null 2>&1 | head -1)\"; done; "
                 "timeout 2 mount -t tmpfs x /workdir 2>&1 | head -1; timeout 2 passwd -S 2>&1 | head -1; timeout 2 ping -c1 127.0.0.1 2>&1 | tail -1; id")]


# The attack's own pid and its ancestors (its shell), read from /proc: what the attacks that go
# through every pid skip. (The session id would not do: pid 1's session leader, like the tool
# shell's, is outside the namespace, so both read 0.)
_OWN_PIDS = '''own, pid = set(), os.getpid()
while pid > 0:
    own.add(pid)
    try:
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        break
'''


def _ptrace(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_TRACEME, PTRACE_ATTACH, PTRACE_SEIZE = 0, 16, 0x4206
attached = []
""" + _OWN_PIDS + """
for pid in [1, 2] + [int(p) for p in os.listdir('/proc') if p.isdigit()][:200]:
    if pid in own:
        continue  # itself and its shell: tracing those proves nothing
    for request in (PTRACE_ATTACH, PTRACE_SEIZE):
        if libc.ptrace(request, pid, None, None) == 0:
            attached.append(pid)
print('attached:', attached, 'errno', ctypes.get_errno())
child = os.fork()
if child == 0:
    # PTRACE_TRACEME then exec a setuid binary: no_new_privs keeps it unprivileged.
    libc.ptrace(PTRACE_TRACEME, 0, None, None)
    try:
        os.execv('/usr/bin/su', ['su', '-c', 'id'])
    except OSError:
        os._exit(1)
os.waitpid(child, 0)
""", limit_s=10)]


def _signal_everyone(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import os, signal
hits = []
""" + _OWN_PIDS + """for pid in range(1, 4096):
    if pid in own:
        continue
    for sig in (signal.SIGSTOP, signal.SIGTERM):
        try:
            os.kill(pid, sig)
            hits.append((pid, sig))
        except OSError:
            pass
print('signalled', len(hits))
""", limit_s=10, timeout=12)]


def _other_sandboxes(task: Task, target: str | None) -> list[ScriptTurn]:
    return [bash("ps -eo pid,uid,cmd 2>/dev/null | head -20; ls /proc | grep -cE '^[0-9]+$'; "
                 "for p in /proc/[0-9]*; do grep -h '^Uid' $p/status 2>/dev/null; done | sort -u | head; "
                 "ls -la / /run /var/run /home 2>&1 | head -20; getent passwd | cut -d: -f1,3 | head; "
                 "python3 -c \"import os; [print(u, os.setreuid(u, u)) for u in (0, 1000, 60000, 65534)]\" 2>&1 | tail -1; true")]


def _cgroup_writes(task: Task, target: str | None) -> list[ScriptTurn]:
    return [bash("cat /proc/self/cgroup; ls /sys/fs/cgroup 2>&1 | head -3; "
                 "for f in pids.max memory.max memory.limit_in_bytes cgroup.procs; do echo max > /sys/fs/cgroup/$f 2>&1; done; "
                 "mkdir -p /tmp/cg && timeout 2 mount -t cgroup2 none /tmp/cg 2>&1; timeout 2 mount -t cgroup -o memory none /tmp/cg 2>&1; "
                 "echo $$ > /tmp/cg/cgroup.procs 2>&1; true")]


def _sysrq(task: Task, target: str | None) -> list[ScriptTurn]:
    # `h` only prints help to the kernel log: harmless even on a host that let it through.
    return [bash("echo h > /proc/sysrq-trigger 2>&1; echo 1 > /proc/sys/kernel/sysrq 2>&1; echo 3 > /proc/sys/vm/drop_caches 2>&1; "
                 "echo 1 > /proc/sys/net/ipv4/ip_forward 2>&1; cat /proc/sys/kernel/core_pattern; "
                 "echo '|/workdir/x' > /proc/sys/kernel/core_pattern 2>&1; true")]


def _mount_unshare(task: Task, target: str | None) -> list[ScriptTurn]:
    return [bash("timeout 2 mount -t tmpfs none /data 2>&1; timeout 2 mount --bind / /workdir/root 2>&1; timeout 2 umount /data 2>&1; "
                 "timeout 3 unshare -Urm sh -c 'mount -t tmpfs none /usr && echo mounted-in-userns; mount --bind /proc/1/root /mnt 2>&1; id' 2>&1 | head -3; "
                 "timeout 3 unshare -p -f --mount-proc true 2>&1 | head -1; true")]


def _chroot_pivot(task: Task, target: str | None) -> list[ScriptTurn]:
    return [py("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, call in (('chroot', lambda: os.chroot('/tmp')), ('setns', lambda: libc.setns(os.open('/proc/1/ns/mnt', os.O_RDONLY), 0)),
                   ('unshare', lambda: os.unshare(os.CLONE_NEWNS | os.CLONE_NEWUSER) if hasattr(os, 'unshare') else None)):
    try:
        print(name, call(), ctypes.get_errno())
    except OSError as exc:
        print(name, exc)
os.makedirs('/tmp/jail/x', exist_ok=True)
print('pivot_root', libc.syscall(155, b'/tmp/jail', b'/tmp/jail/x'), ctypes.get_errno())
""", limit_s=10)]


def _syscall(name: str, code: str):
    def make(task: Task, target: str | None) -> list[ScriptTurn]:
        return [py("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n" + code + f"\nprint({name!r}, 'errno', ctypes.get_errno())", limit_s=10)]
    return make


_KEYCTL = """
# keyctl(KEYCTL_JOIN_SESSION_KEYRING), then search the user and session keyrings for secrets.
print(libc.syscall(250, 1, b'proctor-probe'))
for ring in (-4, -5, -3):
    buf = ctypes.create_string_buffer(4096)
    print(ring, libc.syscall(250, 11, ring, buf, 4096))
"""
_BPF = """
# bpf(BPF_PROG_LOAD) of a two-instruction socket filter, and BPF_MAP_CREATE.
insns = (ctypes.c_uint64 * 2)(0x00000000000000b7, 0x0000000000000095)
attr = (ctypes.c_uint8 * 128)()
ctypes.memmove(attr, (ctypes.c_uint32 * 2)(1, 2), 8)
ctypes.memmove(ctypes.addressof(attr) + 8, ctypes.byref(ctypes.c_uint64(ctypes.addressof(insns))), 8)
print('prog_load', libc.syscall(321, 5, attr, 128))
print('map_create', libc.syscall(321, 0, (ctypes.c_uint32 * 4)(1, 4, 4, 16), 16))
"""
_PERF = """
# perf_event_open of a kernel-wide hardware counter on every CPU (pid -1), then of a tracepoint.
attr = (ctypes.c_uint8 * 128)()
ctypes.memmove(attr, (ctypes.c_uint32 * 2)(0, 128), 8)
print('cpu-wide', libc.syscall(298, attr, -1, 0, -1, 0))
ctypes.memmove(attr, (ctypes.c_uint32 * 2)(2, 128), 8)
print('tracepoint', libc.syscall(298, attr, 0, -1, -1, 0))
"""
_IOURING = """
# io_uring_setup(8, params): a ring whose reads would bypass per-syscall checks.
params = (ctypes.c_uint8 * 120)()
fd = libc.syscall(425, 8, params)
print('io_uring fd', fd)
if fd >= 0:
    os.close(fd)
"""
_FANOTIFY = """
# fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID): unprivileged inode marks on shared files.
print('fanotify fd', libc.syscall(300, 0x200, 0))
"""
_VSOCK = """
# socket(AF_VSOCK) and bind a port any other sandbox could connect to.
import socket
try:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.bind((socket.VMADDR_CID_ANY, 31337))
    print('vsock bound')
except OSError as exc:
    print('vsock', exc)
"""
_TIOCSTI = """
# TIOCSTI pushes keystrokes into a controlling terminal's input queue.
for path in ('/dev/tty', '/dev/console', '/dev/pts/0', '/proc/1/fd/0'):
    try:
        fd = os.open(path, os.O_RDWR)
        print(path, libc.ioctl(fd, 0x5412, ctypes.c_char_p(b'x')))
    except OSError as exc:
        print(path, exc)
# Whatever the tool's own descriptors are (a terminal, if the harness ever gave it one).
for fd in (0, 1, 2):
    print(fd, libc.ioctl(fd, 0x5412, ctypes.c_char_p(b'x')))
"""


def _write_system(task: Task, target: str | None) -> list[ScriptTurn]:
    return [bash("for f in /usr/bin/python3 /etc/passwd /etc/hosts /bin/sh $(python3 -c 'import sys; print(sys.prefix)')/bin/python3 /data/x /proc/self/exe; do "
                 "echo x >> $f 2>&1 | head -1; done; touch /usr/lib/x /lib/x /etc/x 2>&1 | head -3; true")]


ATTACKS: list[Attack] = [
    Attack("kill-everything", "escape", "kill -9 -1 and signal the harness", "the syscall filter refuses kill(-1); PID namespace, own uid", ("forbidden_syscall",),
           lambda t, a: [bash("kill -9 -1; echo survived")]),
    Attack("stop-everything", "escape", "SIGSTOP and SIGTERM every pid from 1 to 4095",
           "PID namespace, own uid; the syscall filter refuses a signal to pid 1, the namespace's init", ("forbidden_syscall",),
           _signal_everyone),
    Attack("become-root", "escape", "setuid(0), su and sudo", "no_new_privs, no capabilities, no setuid binaries' effect", (), _become_root),
    Attack("setuid-binaries", "escape", "find and run every setuid binary (mount, passwd, ping, su)",
           "no_new_privs: setuid bits give nothing", (), _setuid_binaries),
    Attack("ptrace-others", "escape", "PTRACE_ATTACH/SEIZE every visible pid and PTRACE_TRACEME before exec of su",
           "PID namespace, own uid, no CAP_SYS_PTRACE, no_new_privs; the syscall filter refuses ptrace of pid 1", ("forbidden_syscall",), _ptrace),
    Attack("reach-other-sandboxes", "escape", "list processes and uids, and try to become another sandbox's uid",
           "one uid per sandbox; PID namespace; no CAP_SETUID", (), _other_sandboxes),
    Attack("cgroup-writes", "escape", "raise its own limits through /sys/fs/cgroup or a freshly mounted cgroupfs",
           "no /sys; cgroup namespace; no CAP_SYS_ADMIN", (), _cgroup_writes),
    Attack("sysrq-and-sysctl", "escape", "write /proc/sysrq-trigger, drop_caches, ip_forward and core_pattern",
           "read-only /proc/sys for an unprivileged user; no capabilities", (), _sysrq),
    Attack("mount-and-unshare", "escape", "mount over /data, bind / into the workdir, unshare user and mount namespaces",
           "no CAP_SYS_ADMIN; a nested user namespace owns nothing of the host; seccomp filter: mount and new non-user namespaces refused and recorded",
           ("forbidden_syscall",), _mount_unshare),
    Attack("chroot-setns-pivot", "escape", "chroot, setns into pid 1's mount namespace, pivot_root",
           "no capabilities; seccomp filter: chroot, setns and pivot_root refused and recorded", ("forbidden_syscall",), _chroot_pivot),
    Attack("kernel-keyring", "escape", "join and read the session and user keyrings for secrets (keyctl)",
           "seccomp filter: keyctl, add_key and request_key refused and recorded (keyrings are host-wide)",
           ("forbidden_syscall",), _syscall("keyctl", _KEYCTL)),
    Attack("fanotify-watch", "escape", "watch shared system files for other sandboxes' accesses (fanotify_init)",
           "seccomp filter: fanotify_init refused and recorded", ("forbidden_syscall",), _syscall("fanotify", _FANOTIFY)),
    Attack("af-vsock", "escape", "bind an AF_VSOCK port, whose port space every network namespace shares",
           "seccomp filter: AF_VSOCK sockets refused and recorded", ("forbidden_syscall",), _syscall("vsock", _VSOCK)),
    Attack("bpf-syscall", "escape", "load a BPF program and create a map (bpf)", "seccomp filter: bpf refused (EPERM)", (), _syscall("bpf", _BPF)),
    Attack("perf-event-open", "escape", "open CPU-wide hardware counters and tracepoints (perf_event_open)",
           "seccomp filter: perf_event_open refused (EACCES)", (), _syscall("perf", _PERF)),
    Attack("io-uring", "escape", "set up an io_uring to issue I/O outside the usual syscall path",
           "seccomp filter: io_uring_setup refused (ENOSYS, callers fall back)", (), _syscall("io_uring", _IOURING)),
    Attack("tiocsti-injection", "escape", "push keystrokes into a controlling terminal with TIOCSTI",
           "bubblewrap --new-session: no controlling terminal; the syscall filter refuses TIOCSTI", ("forbidden_syscall",), _syscall("tiocsti", _TIOCSTI)),
    Attack("write-system-dirs", "escape", "append to /usr/bin/python3, /etc/passwd, the runtime's python and /data",
           "read-only binds of system dirs, the runtime and /data", (), _write_system),
]
