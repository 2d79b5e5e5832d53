"""One student's world: create it, run commands in it as the student, kill everything in it
and prove it, tear it down.

A sandbox owns persistent places (a leased uid, cgroups, capped tmpfs mounts for /workdir, /tmp
and /dev/shm) and, while the student is active, a *session*: a bubblewrap process that holds the
namespaces, anchored by a root process the student cannot signal. Every command enters that
session with nsenter, joins a child cgroup of its own (so its whole tree can be killed on timeout),
installs the syscall filter (syscall_filter.py), then drops to the student's uid with setpriv.
`kill_all()` ends the session; the next command starts a fresh one, so no student process
survives a custody point but the workdir does."""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import secrets
import stat
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import ConfigError, SandboxError
from ..pump import pump, read_until_eof
from . import keyrings, memory_guard, procfs, reclaim, syscall_filter, tmpfs
from .capture import HeadTail
from .copyin import copy_tree_in
from .cgroups import SandboxCgroup
from .confinement import DEFAULT_REQUIRED, grant, probe
from .environment import student_env, student_path
from .host import binaries, require_host, state_dir
from .backend import ProcessInfo, RuntimeName, SandboxUsage
from .models import ConfinementReport, ExecResult, KillReport, ResourceUsage, SandboxSpec
from .native import helper
from .network import NetworkBridge, guard_loopback, net_counters
from .reaper import become_subreaper, kill_members, kill_pids, reap_orphans, reap_own_in_pidns, reap_until_empty
from .runtime import default_runtime
from .syscall_attempts import SyscallAttempt, SyscallRecorder
from .uids import UidLease, lease_uid
from .ownfs import OwnView
from .view import ETC_ALLOWLIST, Places, bwrap_args, check_trusted_dirs, identity_files

# Runs as root on the host, before the command: raise the OOM score (the student dies first),
# join the command's cgroups, then become the command. The "ok" it writes to stderr is the first
# byte there, before anything of the student's could be: the harness reads and strips it, and
# without it knows the command never started.
_ENTER = (
    'echo 1000 > /proc/self/oom_score_adj || exit 125; '
    'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
    'echo ok >&2; exec "$@"'
)
# The same under bash, whose `exec -a` names the process: the namespace's init shows students
# `sandbox-init --args N -- sh -s` (see _ensure_session).
_ENTER_AS_INIT = _ENTER.replace('exec "$@"', 'exec -a sandbox-init "$@"')
DEFAULT_OUTPUT_CAP = 1024 * 1024
# After the command exits, background processes may still hold its pipes: drain this long, no more.
_DRAIN_GRACE_S = 0.05


# Where a task image's sandbox sees the syscall filter's loader (bubblewrap's root tmpfs, not the image).
IMAGE_LOADER = "/.proctor-exec/seccomp-exec"


def _memfd(name: str, data: bytes) -> int:
    """An anonymous file holding `data`, positioned at its start: arguments or a script kept off
    a command line."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _check_place_in_image(name: str, own: OwnView, place: str, field: str) -> None:
    """The sandbox mounts the workdir and data over the image's read-only tree: a top-level path
    is made in bubblewrap's own root, but one under an image directory must exist in the image."""
    assert own.system_root is not None
    parts = Path(place).parts[1:]
    here = own.system_root
    for depth, part in enumerate(parts):
        here = here / part
        if not os.path.lexists(here):
            if depth == 0:
                return
            missing = "/" + "/".join(parts[:depth + 1])
            raise ConfigError(f"task image {name!r} has no directory {missing} for the task's {field} {place}; "
                              f"make it in the Dockerfile (RUN mkdir -p {place}) or choose a path that exists in the image")
        if not here.is_dir() or here.is_symlink():
            raise ConfigError(f"task image {name!r}: {'/' + '/'.join(parts[:depth + 1])} is not a directory in the image, "
                              f"so the task's {field} {place} cannot be placed there")


def _seed_workdir(name: str, own: OwnView, workdir: str, dest: Path, uid: int) -> None:
    """The image's files at `workdir` (what its Dockerfile put there), copied into the student's
    fresh writable workdir, owned by the student, before any student process exists. Links and
    special files are refused, naming the image: a link there would make a whole-workdir
    submission refused for every student, honest ones included."""
    assert own.system_root is not None
    here = own.system_root
    for part in Path(workdir).parts[1:]:
        here = here / part
        if here.is_symlink():
            raise ConfigError(f"task image {name!r}: {workdir} is a symbolic link in the image; give the task's workdir a real directory")
        if not here.exists():
            return  # the image has nothing there: the workdir starts empty
    if not here.is_dir():
        raise ConfigError(f"task image {name!r}: {workdir} is a file in the image, not a directory; it cannot be the task's workdir")
    try:
        copy_tree_in(here, dest, uid)
    except SandboxError as exc:
        inside = str(exc).replace(str(here), workdir, 1)
        raise ConfigError(f"task image {name!r}: {inside} (the workdir starts as a copy of the image's {workdir})") from None
    except OSError as exc:
        raise ConfigError(f"task image {name!r}: its {workdir} does not fit the task's workdir ({exc.strerror}); "
                          "raise the task's workdir_bytes or make the image's files smaller") from None


SYSTEM_PYTHON = "/usr/bin/python3"


def _image_python(own: OwnView, path: str, writable: tuple[str, ...]) -> str | None:
    """The image's python3 as its PATH finds it (official python:* images have it only in
    /usr/local/bin), looked up in the mounted image from outside, links followed inside the
    image; PATH entries the student could write are skipped. None: the image has no python3."""
    assert own.system_root is not None
    root = own.system_root
    dirs = [d for d in path.split(":") if d.startswith("/") and not any(d == w or d.startswith(w.rstrip("/") + "/") for w in writable)]
    for d in [*dirs, "/usr/local/bin", "/usr/bin"]:
        inside = posixpath.join(d, "python3")
        for _ in range(16):  # follow links inside the image, never out of it
            host = root / inside.lstrip("/")
            try:
                st = os.lstat(host)
            except OSError:
                break
            if stat.S_ISLNK(st.st_mode):
                inside = posixpath.normpath(posixpath.join(posixpath.dirname(inside), os.readlink(host)))
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o001:
                return posixpath.join(d, "python3")
            break
    return None


def _check_image_tools(name: str, own: OwnView) -> None:
    """What every sandbox runs inside its namespace before the student's command: a shell and
    sleep (the anchor) and setpriv (the drop to the student's uid), from the image itself."""
    assert own.system_root is not None
    for tool in (binaries()["setpriv"], "/bin/sh", "/bin/sleep"):
        inside = own.system_root / tool.lstrip("/")
        parts = Path(tool).parts
        # a merged-/usr image links /bin to usr/bin: look through its top-level link
        top = own.system_root / parts[1]
        if top.is_symlink():
            inside = own.system_root / os.readlink(top).lstrip("/") / Path(*parts[2:])
        if not os.path.lexists(inside):
            raise ConfigError(f"task image {name!r} has no {tool}, which every sandbox needs (the sandbox runs setpriv "
                              "from util-linux, /bin/sh and sleep inside the image); install them in its Dockerfile")


def _setpriv(uid: int, gid: int) -> list[str]:
    return [
        binaries()["setpriv"], f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
    ]


class BwrapProcess:
    """A long-running process inside the sandbox (e.g. a shell session), with pipes."""

    def __init__(self, popen: subprocess.Popen, group: str, sandbox: Sandbox) -> None:
        self.popen = popen
        self.group = group
        self._sandbox = sandbox

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def root(self) -> int | None:
        """The student's process itself: nsenter's child in this command's cgroup."""
        for pid in self._sandbox._cg.child_pids(self.group):
            if procfs.ppid_of(pid) == self.popen.pid and not procfs.is_zombie(pid):
                return pid
        return None

    def processes(self) -> list[ProcessInfo]:
        return _process_infos(self._sandbox._cg.child_pids(self.group), self._sandbox._cg.pids())

    def pids(self) -> set[int]:
        return set(self._sandbox._cg.child_pids(self.group))

    def kill(self, pids: Iterable[int]) -> None:
        kill_members(pids, lambda: self._sandbox._cg.child_pids(self.group))

    def kill_tree(self) -> None:
        """Kill this process and every process it started, daemons included."""
        self._sandbox._kill_group(self.group)
        self.popen.wait()


class Sandbox:
    """An isolated, kernel-confined world for one student (the bwrap backend's `StudentSandbox`).
    Use as a context manager."""

    backend: RuntimeName = "bwrap"

    def __init__(self, spec: SandboxSpec, confinement: ConfinementReport, *, degraded_ok: bool) -> None:
        self.spec = spec
        self.confinement = confinement
        self.degraded_ok = degraded_ok
        self.id = f"sbx-{secrets.token_hex(6)}"
        self._lock_fd = reclaim.lock_new(self.id)
        self._lease: UidLease | None = None
        self._cg = SandboxCgroup(self.id)
        self._memory_guard: memory_guard.Watched | None = None
        self._session: subprocess.Popen | None = None
        self._anchor_pid: int | None = None
        self._pidns: int | None = None
        self._children: list[subprocess.Popen] = []
        self._bridge: NetworkBridge | None = None
        self._syscalls: SyscallRecorder | None = None
        self._closed = False
        # kill_all proved the sandbox empty and the harness has started nothing in it since: no
        # process can be there (one of the uid appears only through _enter_popen), so close need
        # not prove it again (custody's kill_all is the last one of a rollout).
        self._proven_empty = False
        root = state_dir("sandboxes") / self.id
        self._places = Places(root, root / "view", root / "workdir", root / "tmp", root / "shm")
        # A task image brings its own Python (the image's /usr/bin/python3): the host's student
        # runtime is not mounted into it unless the spec names one.
        self.python_runtime = spec.runtime if spec.image is not None else spec.runtime or default_runtime()
        # The interpreter trusted helpers run as `python3 -I -S` (file tools, judges): the host's, or the image's own.
        self.system_python: str | None = SYSTEM_PYTHON
        self._default_cwd = (spec.image.workdir if spec.image is not None and spec.image.workdir not in (None, "/") else None) or spec.workdir

    # -- creation --------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        spec: SandboxSpec | None = None,
        *,
        require: Iterable[str] | None = None,
        allow_degraded: bool = False,
    ) -> Sandbox:
        """Build a sandbox. Fails with ConfinementError naming the protection if this machine
        cannot give one that is required (all default protections unless `require` says
        otherwise), unless `allow_degraded` is set, in which case the grant records the gap."""
        require_host()
        become_subreaper()
        spec = spec or SandboxSpec()
        reclaim.reclaim_once()
        report = machine_confinement()
        degraded = grant(report, DEFAULT_REQUIRED if require is None else require, allow_degraded=allow_degraded)
        box = cls(spec, report, degraded_ok=degraded)
        try:
            box._build()
        except BaseException:
            box.close()
            raise
        return box

    def _build(self) -> None:
        self._lease = lease_uid()
        uid = gid = self._lease.uid
        reclaim.write_meta(self.id, uid)
        if self.python_runtime:
            check_trusted_dirs(student_path(self.python_runtime))
        self._places.root.mkdir(mode=0o700, exist_ok=True)
        limits = self.spec.limits
        own = OwnView(self._places.view)
        own.build(ETC_ALLOWLIST, identity_files(uid, gid, self.spec.hostname, self.spec.workdir), limits,
                  root_image=self.spec.image.root if self.spec.image is not None else None)
        tmpfs.mount_places(self._places.workdir, self._places.tmp, self._places.shm, limits, uid)
        self._cg.create(limits)
        self._memory_guard = memory_guard.watch(self._cg, limits.memory_bytes, uid)
        self._env = student_env(self.python_runtime, self.spec.env, self.spec.workdir, image_env=self.spec.image.env if self.spec.image else None)
        # Built (and validated: data dir, mounts, devices) once, so a bad spec fails at creation.
        self._bwrap_args = bwrap_args(self.spec, own, self._places, self.python_runtime)
        if self.spec.network.allow:
            self._bridge = NetworkBridge(self.spec.network.allow)
        if syscall_filter.supported():
            self._loader = helper("seccomp-exec")
            self._syscalls = SyscallRecorder()
            if self.spec.image is not None:
                # The loader (a static binary) is exec'd inside the mount namespace, where /usr is
                # the image's: it is shown at a path of the sandbox's own root instead.
                self._bwrap_args += ["--ro-bind", self._loader, IMAGE_LOADER]
                self._loader = IMAGE_LOADER
        if self.spec.image is not None:
            _check_image_tools(self.spec.image.name, own)
            _check_place_in_image(self.spec.image.name, own, self.spec.workdir, "workdir")
            if self.spec.data_dir:
                _check_place_in_image(self.spec.image.name, own, self.spec.data_at, "data_at")
            self.system_python = _image_python(own, self.spec.image.env.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
                                               (self.spec.workdir, "/tmp", "/var/tmp", "/dev/shm", self.spec.data_at))
            if self.spec.seed_workdir:
                _seed_workdir(self.spec.image.name, own, self.spec.workdir, self._places.workdir, self.uid)

    @property
    def uid(self) -> int:
        assert self._lease is not None
        return self._lease.uid

    @property
    def workdir(self) -> Path:
        """Host path of the student's /workdir (for custody only: never follow paths in it)."""
        return self._places.workdir

    def writable_places(self) -> dict[str, Path]:
        """The student's writable places, inside path -> host path (read by proctor/planted.py
        without following links)."""
        return {self.spec.workdir: self._places.workdir, "/tmp": self._places.tmp, "/dev/shm": self._places.shm}

    # -- the session -----------------------------------------------------------------------------
    def _ensure_session(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        if self._session is not None and self._session.poll() is None:
            return
        self._cg.make_child("anchor")
        info_r, info_w = os.pipe()
        # bubblewrap reads its options from a memfd, is named sandbox-init, and runs `sh` (found on
        # the sandbox's PATH) reading the anchor's script from stdin, so pid 1's command line, which
        # every student can read, is `sandbox-init --args N -- sh -s`: no host paths, and nothing an
        # honest `pkill -f python`, `pkill -f /bin/sh` or `pkill -f sleep` matches (a signal to pid 1
        # is recorded as an attempt, syscall_filter.py).
        args_fd = _memfd("bwrap-args", b"".join(a.encode() + b"\0" for a in [*self._bwrap_args, "--info-fd", str(info_w)]))
        # The anchor: root inside, no capabilities, so the student can neither signal it nor
        # end the namespace early. It says "ready" once bubblewrap has finished building the
        # view (the info fd is written before that), then sleeps until kill_all or teardown.
        script_fd = _memfd("anchor", b"echo ready; exec /bin/sleep infinity\n")
        argv = [binaries()["bwrap"], "--args", str(args_fd), "--", "sh", "-s"]
        try:
            proc = self._enter_popen(argv, "anchor", stdin=script_fd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, pass_fds=(info_w, args_fd), as_init=True)
        finally:
            os.close(args_fd)
            os.close(script_fd)
        os.close(info_w)
        try:
            self._check_entered(proc)
            ready = read_until_eof(proc.stdout.fileno(), timeout_s=10.0, limit=6)  # type: ignore[union-attr]
            info = read_until_eof(info_r, timeout_s=1.0)
            self._anchor_pid = int(json.loads(info)["child-pid"])
            if ready != b"ready\n":
                raise ValueError("anchor not ready")
        except (ValueError, KeyError, TypeError):
            proc.kill()
            _, err = proc.communicate(timeout=5)
            raise SandboxError(f"bubblewrap failed to start the sandbox: {err.decode(errors='replace').strip() or 'no namespace info'}") from None
        finally:
            os.close(info_r)
        for stream in (proc.stdout, proc.stderr):
            stream.close()  # type: ignore[union-attr]
        self._session = proc
        self._pidns = procfs.pidns_of(self._anchor_pid)
        guard_loopback(self._anchor_pid)
        if self._bridge:
            self._bridge.start(self)

    def _enter_popen(self, argv: Sequence[str], group: str, as_init: bool = False, **kwargs) -> subprocess.Popen:
        """Start argv as root on the host, already inside the sandbox's cgroup `group` (named
        sandbox-init when `as_init`)."""
        files = self._cg.child_procs_files(group)
        self._proven_empty = False
        shell, script = (binaries()["bash"], _ENTER_AS_INIT) if as_init else (binaries()["sh"], _ENTER)
        proc = subprocess.Popen(
            [shell, "-c", script, "proctor-enter", *files, "--", *argv],
            env=self._env, close_fds=True, start_new_session=True, cwd="/", **kwargs,
        )
        self._children.append(proc)
        return proc

    def _student_argv(self, argv: Sequence[str], cwd: str | None) -> list[str]:
        cwd = cwd or self._default_cwd
        assert self._anchor_pid is not None
        # The syscall filter (syscall_filter.py) is installed while still root, before the drop
        # to the student: a loader running as the student would be ptrace-able by the student's
        # other processes before its filter is in, and could be made to skip it. The loader then
        # drops to the student itself (uid, gid, groups, every capability set, no_new_privs) and
        # reads each back before the exec: setpriv as a further exec cost about 1.7 ms of CPU per
        # command. Without a filter, setpriv does the drop.
        if self._syscalls:
            drop = [self._loader, *map(str, self._loader_fds()), "--as", str(self.uid), "--"]
        else:
            drop = _setpriv(self.uid, self.uid)
        return [
            binaries()["nsenter"], "-t", str(self._anchor_pid), "-m", "-u", "-i", "-n", "-p", "-C",
            "-r", f"--wdns={cwd}", "--", *drop, *argv,
        ]

    def _loader_fds(self) -> tuple[int, ...]:
        return (syscall_filter.filter_fd(), self._syscalls.loader_fd) if self._syscalls else ()

    def syscall_attempts(self) -> list[SyscallAttempt]:
        """Syscalls the filter refused and recorded (keyrings, fanotify, AF_VSOCK) since the last
        call, in this sandbox's student and judge processes alike. Each call returns only new
        attempts; drain after each tool call or command and at custody, and record them as
        misbehaviour (kind `forbidden_syscall`)."""
        return self._syscalls.drain() if self._syscalls else []

    def prepare(self) -> None:
        """Start the session now (namespaces, view, the anchor waiting) instead of at the first
        command: what a warm pool (pool.py) does ahead of the rollout."""
        self._ensure_session()

    # -- running commands ------------------------------------------------------------------------
    def spawn(self, argv: Sequence[str], *, cwd: str | None = None) -> BwrapProcess:
        """Start a long-running student process with stdin/stdout/stderr pipes."""
        self._ensure_session()
        group = self._cg.new_child()
        proc = self._enter_popen(
            self._student_argv(argv, cwd), group, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=self._loader_fds(),
        )
        self._check_entered(proc)
        return BwrapProcess(proc, group, self)

    def run(
        self,
        argv: Sequence[str] | str,
        *,
        input: bytes | None = None,
        timeout: float = 60.0,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command as the student. A string is run by /bin/sh -c. On timeout the command's
        whole process tree is killed. Output beyond `output_cap` keeps its head and tail."""
        argv = ["/bin/sh", "-c", argv] if isinstance(argv, str) else list(argv)
        if not argv:
            raise ValueError("empty command")
        self._ensure_session()
        group = self._cg.new_child()
        start = time.monotonic()
        proc = self._enter_popen(
            self._student_argv(argv, cwd), group,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=self._loader_fds(),
        )
        self._check_entered(proc)
        out, err = HeadTail(output_cap // 2, output_cap - output_cap // 2), HeadTail(output_cap // 2, output_cap - output_cap // 2)
        timed_out = pump(proc, out.write, err.write, deadline=start + timeout, input=input, grace_s=_DRAIN_GRACE_S)
        if timed_out:
            self._kill_group(group)
        status, rusage = _wait4(proc)
        self._children.remove(proc)
        if not self._cg.child_pids(group):
            self._cg.remove_child(group)  # else its background jobs live on in it until kill_all
        code = os.waitstatus_to_exitcode(status)
        return ExecResult(
            argv=tuple(argv),
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            timed_out=timed_out,
            stdout=out.getvalue(), stderr=err.getvalue(),
            stdout_dropped=out.dropped, stderr_dropped=err.dropped,
            duration_s=time.monotonic() - start,
            usage=ResourceUsage(cpu_user_s=rusage.ru_utime, cpu_system_s=rusage.ru_stime, max_rss_bytes=rusage.ru_maxrss * 1024),
        )

    def _check_entered(self, proc: subprocess.Popen) -> None:
        """Consume the enter script's "ok" from stderr; without it nothing of the student ran."""
        assert proc.stderr is not None
        got = read_until_eof(proc.stderr.fileno(), timeout_s=10.0, limit=3)
        if got != b"ok\n":
            rest = got + (read_until_eof(proc.stderr.fileno(), timeout_s=1.0, limit=4096) if proc.poll() is not None else b"")
            proc.kill()
            proc.wait()
            self._children.remove(proc)
            raise SandboxError(f"sandbox {self.id}: could not start a command in its cgroup: {rest.decode(errors='replace').strip()!r}")

    def _kill_group(self, group: str) -> None:
        """Kill one command's cgroup until it is read empty.

        A group read empty is done for good: only the harness moves a process into it, and only a
        member can fork a new one. The first round kills without freezing (an idle shell, a
        command that exited leaving a sleeper: the usual case, and freezing is the slow part on
        cgroup v1); from the second round on each round freezes the group first, so members read
        while none can fork each get SIGKILL, and a fork bomb cannot outrun it. After each round
        the group is watched for a few ms while the killed members exit."""
        end = time.monotonic() + 5.0
        first = True
        while True:
            pids = self._cg.child_pids(group)
            if not pids or time.monotonic() > end:
                return
            frozen = False
            if not first:
                try:
                    self._cg.freeze(group)
                    frozen = True
                except TimeoutError:
                    pass
                pids = self._cg.child_pids(group)
            kill_pids(pids)
            if frozen:
                self._cg.thaw(group)
            first = False
            settle = time.monotonic() + 0.01
            while self._cg.child_pids(group) and time.monotonic() < settle:
                time.sleep(0.0002)

    # -- ending ------------------------------------------------------------------------------------
    def _reap_children(self) -> None:
        for proc in list(self._children):
            if proc.poll() is not None:
                self._children.remove(proc)
        reap_orphans(self.uid)
        if self._pidns is not None:
            reap_own_in_pidns(self._pidns)  # a command killed half-way through its start
        # The namespace's init (bubblewrap's child, the anchor) is reparented to the harness, a
        # subreaper, once the outer bubblewrap is killed: its corpse is ours to reap, or every
        # sandbox would leave one zombie behind in a long-lived harness.
        anchor = self._anchor_pid
        if anchor and procfs.ppid_of(anchor) == os.getpid() and procfs.is_zombie(anchor):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(anchor, os.WNOHANG)

    def _collect_session(self, deadline_s: float = 2.0) -> None:
        """Reap the killed session: its bubblewrap, then the anchor. The anchor dies before or
        after its bubblewrap; in the second case it is reparented to the harness (a subreaper) only
        once that bubblewrap is gone, after the kill was already proven, so it is waited for here or
        its corpse would stay for the life of the harness."""
        end = time.monotonic() + deadline_s
        if self._session is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._session.wait(timeout=deadline_s)
        anchor = self._anchor_pid
        while anchor:
            try:
                if os.waitpid(anchor, os.WNOHANG)[0] == anchor:
                    return
            except ChildProcessError:  # not ours: reaped by its bubblewrap, or not yet reparented
                if not os.path.exists(f"/proc/{anchor}") or procfs.ppid_of(anchor) not in (os.getpid(), None):
                    return
            if time.monotonic() > end:
                return
            time.sleep(0.002)

    def kill_all(self, deadline_s: float = 5.0) -> KillReport:
        """Kill every process of this sandbox and prove none is left: the cgroups, the PID
        namespace and the host's process table (by uid) must all be empty."""
        if self._lease is None:
            return KillReport(empty=True, killed=0, rounds=0, duration_s=0.0)
        report = reap_until_empty(
            freeze=lambda: self._cg.freeze(timeout_s=0.5),
            thaw=self._cg.thaw,
            cgroup_pids=self._cg.pids,
            uid=self.uid,
            pidns=self._pidns,
            reap_children=self._reap_children,
            deadline_s=deadline_s,
        )
        if report.empty:
            self._proven_empty = True
            if self._bridge:
                self._bridge.stop()
            self._collect_session()
            self._session = None
            self._anchor_pid = None
            self._pidns = None
            for child in self._cg.children():
                self._cg.remove_child(child)
        return report

    def usage(self) -> SandboxUsage:
        """The cgroup's accounting; OOM kills include the memory guard's (memory_guard.py)."""
        usage = SandboxUsage(**self._cg.usage())
        if self._memory_guard is not None and self._memory_guard.kills:
            usage = usage.model_copy(update={"oom_kills": usage.oom_kills + self._memory_guard.kills})
        return usage

    def full_places(self) -> dict[str, str]:
        full = {}
        for name, path in ((self.spec.workdir, self._places.workdir), ("/tmp", self._places.tmp), ("/dev/shm", self._places.shm)):
            try:
                st = os.statvfs(path)
            except OSError:
                continue
            if st.f_blocks and st.f_bavail == 0:
                full[name] = "bytes"
            elif st.f_files and st.f_favail == 0:
                full[name] = "inodes"
        return full

    def copy_in(self, source: str | Path, target: str = "", *, read_only: bool = False) -> int:
        """Copy a trusted host tree (task files, a custody copy) into /workdir/`target`, owned
        by the student (copyin.py), or by root where `read_only` (StudentSandbox.copy_in).
        Returns the number of files copied."""
        dest = self._places.workdir / target if target else self._places.workdir
        return copy_tree_in(source, dest, None, read_only=True) if read_only else copy_tree_in(source, dest, self.uid)

    def network_counters(self) -> dict[str, int]:
        """The SNMP counters of the sandbox's network namespace while its session is up (empty
        otherwise); `Ip.OutNoRoutes` counts packets to addresses it has no route to."""
        return net_counters(self._anchor_pid) if self._anchor_pid else {}

    def processes(self) -> list[ProcessInfo]:
        """Every process in the sandbox's cgroups now, zombies included (for watchers that judge
        what is left; `kill_all` is what ends them). A snapshot: a process that forks and exits
        while the list is read (a double fork's middle) would be seen dead and its child, born
        after the cgroup was read, not at all; so a list that changed under the reading (a pid
        gone, or new ones in the cgroup) is read again with the sandbox frozen."""
        pids = self._cg.pids()
        found = _process_infos(pids, pids)
        if len(found) == len(pids) and self._cg.pids() == pids:
            return found
        try:
            self._cg.freeze(timeout_s=0.5)
        except TimeoutError:
            pass  # a task that cannot be frozen now (in the kernel): the list is still the better for it
        try:
            pids = self._cg.pids()
            return _process_infos(pids, pids)
        finally:
            self._cg.thaw()

    def close(self) -> None:
        """Tear everything down: processes, mounts, cgroups, files, the uid. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        if self._memory_guard is not None:
            memory_guard.unwatch(self._memory_guard)
        if self._lease is not None and not self._proven_empty:
            report = self.kill_all()
            if not report.empty:
                errors.append(report.detail)
            for proc in self._children:  # killed, maybe not yet reaped: corpses are ours to collect
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)
            self._children.clear()
        if self._bridge:
            self._bridge.stop()
        if self._lease is not None:
            # Keys are host state that outlives every process of the uid (keyrings.py).
            left = keyrings.clear_keys(self.uid)
            if left:
                errors.append(left)
        if self._syscalls:
            self._syscalls.close()
        for step in (lambda: tmpfs.remove_tree(self._places.root), self._cg.remove):
            try:
                step()
            except (SandboxError, OSError) as exc:
                errors.append(str(exc))
        if self._lease is not None:
            self._lease.release(clean=not errors)
        if not errors:
            reclaim.unlock(self.id, self._lock_fd)
        if errors:
            raise SandboxError(f"teardown of {self.id} incomplete (reclaim will retry): {'; '.join(errors)}")

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BwrapBackend:
    """bubblewrap namespaces on the host kernel, cgroups, capped tmpfs places and a syscall filter."""

    name: RuntimeName = "bwrap"

    def machine_confinement(self) -> ConfinementReport:
        return machine_confinement()

    def create(self, spec: SandboxSpec | None = None, *, require: Iterable[str] | None = None, allow_degraded: bool = False) -> Sandbox:
        return Sandbox.create(spec, require=require, allow_degraded=allow_degraded)

    def reclaim_stale(self) -> list[str]:
        return reclaim.reclaim_stale()


def _process_infos(pids: list[int], sandbox_pids: Iterable[int]) -> list[ProcessInfo]:
    inside = set(sandbox_pids)
    found = []
    for pid in pids:
        ids = procfs.uids_of(pid)
        if ids is None:
            continue  # gone since the cgroup was read
        parent = procfs.ppid_of(pid) or 0
        found.append(ProcessInfo(pid=pid, ppid=parent if parent in inside else 0, uid=ids[0],
                                 command=procfs.cmdline_of(pid), zombie=procfs.is_zombie(pid)))
    return found


def _wait4(proc: subprocess.Popen) -> tuple[int, os.struct_rusage]:  # type: ignore[name-defined]
    _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, rusage


_machine_report: ConfinementReport | None = None
_machine_report_lock = threading.Lock()


def machine_confinement() -> ConfinementReport:
    """What this machine enforces, measured by one probe sandbox once per process."""
    global _machine_report
    with _machine_report_lock:
        if _machine_report is None:
            _machine_report = probe(Sandbox)
        return _machine_report
