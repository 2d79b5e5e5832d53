"""The gVisor runtime: the same student world as bubblewrap's, behind a user-space kernel.

A gVisor sandbox keeps the same persistent places as a bubblewrap one (a leased uid, the
sandbox's cgroup, capped host tmpfs mounts for /workdir, /tmp and /dev/shm, ownfs's /etc) and,
while the student is active, a *container*: `runsc run --detach` of an OCI bundle whose init is
an anchor (root inside gVisor with no capabilities, so the student can neither signal it nor end
the container; it reaps orphans). Every command is `runsc exec` of a process spec that names the
leased uid, no capabilities and no_new_privs; the container's RLIMIT_NPROC is `limits.pids`.
`kill_all()` kills the container's host processes through the cgroup (the sentry, its gofer and
ptrace stubs: every student task dies with its kernel), proves the cgroup empty, and removes the
container's runsc state; the next command starts a fresh container, and /workdir stays.

Between the student and the host kernel sits gVisor's sentry: the student's syscalls are served
by a Go kernel in user space, which itself may use only the host syscalls runsc's own seccomp
filter allows. Files reach the sentry through a gofer process; the host tmpfs mounts are bound
through it, so custody reads /workdir from the host after `kill_all()` exactly as for bwrap.

Limits: memory, CPU and a host backstop on threads are the sandbox's cgroup (cgroups.py), which
holds the sentry and gofer processes (runsc joins it; on v2 a child of it). Student processes
are counted inside gVisor by RLIMIT_NPROC, because the host pids counter sees the sentry's
threads, not the student's processes; a host `pids.max` equal to `limits.pids` would kill the
sentry long before the student reached its share. This runsc (20221219) offers only the `ptrace`
and `kvm` platforms; `kvm` hangs on this machine (a Firecracker guest), so `ptrace` is used."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

from ..errors import ConfigError, SandboxError, SandboxUnavailable
from . import keyrings, procfs, reclaim, tmpfs
from .backend import ProcessInfo, SandboxUsage
from .capture import HeadTail
from .cgroups import SandboxCgroup
from .gvisor_confinement import DEFAULT_REQUIRED, probe
from ..pump import pump
from .core import _DRAIN_GRACE_S, DEFAULT_OUTPUT_CAP
from .environment import student_env, student_path
from .host import _trusted_binary, require_host, state_dir
from .models import ConfinementReport, ExecResult, KillReport, ResourceUsage, SandboxSpec
from .ownfs import OwnView
from .reaper import become_subreaper, reap_until_empty
from .uids import UidLease, lease_uid
from .view import ETC_ALLOWLIST, SYSTEM_DIRS, Places, check_trusted_dirs, identity_files

RUNSC_ENV = "PROCTOR_RUNSC"  # a runsc to use instead of the one from the OS packages
RUNSC_CANDIDATES = ("/usr/bin/runsc", "/usr/local/bin/runsc", "/usr/sbin/runsc")
PLATFORM = "ptrace"
# The host's pids.max for a sandbox allowed `pids` student processes: a backstop that stops a
# runaway sentry, never the student's share. Under the ptrace platform each student process is a
# stub process on the host, and each sentry thread that runs a task traces its own thread in
# that stub: host threads grow faster than the student's processes (a 64-process fork bomb
# passed 576 host threads and the sentry, refused a thread, died).
HOST_THREADS_PER_PROCESS = 32
HOST_THREAD_HEADROOM = 512


def host_pids_max(pids: int) -> int:
    return min(4 * 1024 * 1024, pids * HOST_THREADS_PER_PROCESS + HOST_THREAD_HEADROOM)
_RUNSC_TIMEOUT_S = 30.0
# The container's init: root inside gVisor with no capabilities (the student cannot signal it),
# reaping every orphan re-parented to it, so a killed command's children leave no zombie that
# would count against the student's RLIMIT_NPROC.
_ANCHOR = """
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""


@cache
def runsc_path() -> str:
    """The runsc binary: $PROCTOR_RUNSC if set, else the OS package's. Root-owned, not writable
    by others (the harness runs it as root)."""
    override = os.environ.get(RUNSC_ENV)
    candidates = (override,) if override else RUNSC_CANDIDATES
    try:
        return _trusted_binary("gVisor runsc", candidates)
    except SandboxUnavailable as exc:
        raise SandboxUnavailable(f"{exc} (gVisor runtime: `apt-get install runsc`, or set {RUNSC_ENV})") from None


def runsc_argv(root: Path, *args: str) -> list[str]:
    return [runsc_path(), "--root", str(root), f"--platform={PLATFORM}", "--network=none", *args]


def runsc(root: Path, *args: str, timeout: float = _RUNSC_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
    """One runsc management command (never a student's), always bounded in time. `root` is the
    sandbox's own runsc state directory."""
    argv = runsc_argv(root, *args)
    # Files, not pipes: `runsc create` leaves the sentry and gofer running, and they would hold
    # a pipe open (and this call waiting) for the container's whole life.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            code = subprocess.run(argv, stdout=out, stderr=err, timeout=timeout, stdin=subprocess.DEVNULL).returncode
        except subprocess.TimeoutExpired:
            raise SandboxError(f"runsc {args[0]} did not finish within {timeout:.0f}s") from None
        out.seek(0)
        err.seek(0)
        res = subprocess.CompletedProcess(argv, code, out.read().decode(errors="replace"), err.read().decode(errors="replace"))
    if check and res.returncode != 0:
        raise SandboxError(f"runsc {args[0]} failed: {(res.stderr or res.stdout).strip().splitlines()[-1:] or ['exit ' + str(res.returncode)]}")
    return res


def _process_spec(argv: Sequence[str], uid: int, env: dict[str, str], cwd: str, nproc: int) -> dict:
    return {
        "user": {"uid": uid, "gid": uid, "additionalGids": []},
        "args": list(argv),
        "env": [f"{k}={v}" for k, v in env.items()],
        "cwd": cwd,
        # No capability in any set: gVisor enforces them itself for its tasks.
        "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []},
        "noNewPrivileges": True,
        # Counted by gVisor per uid inside this sandbox's own kernel: the student's process cap.
        "rlimits": [{"type": "RLIMIT_NPROC", "hard": nproc, "soft": nproc}],
    }


def _bind(source: str | Path, target: str, *, writable: bool) -> dict:
    return {"destination": target, "type": "bind", "source": str(source),
            "options": ["rbind", "rw" if writable else "ro", "nosuid", "nodev"]}


class GvisorProcess:
    """A long-running student process under gVisor (the bash tool's shell), with pipes."""

    def __init__(self, popen: subprocess.Popen, root_pid: int, sandbox: GvisorSandbox) -> None:
        self.popen = popen
        self._root = root_pid
        self._sandbox = sandbox

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def root(self) -> int | None:
        return self._root if self.alive() else None

    def processes(self) -> list[ProcessInfo]:
        return _tree(self._sandbox.processes(), self._root)

    def pids(self) -> set[int]:
        return {p.pid for p in self.processes()}

    def kill(self, pids: Iterable[int]) -> None:
        mine = self.pids()
        self._sandbox._kill_ids([p for p in pids if p in mine])

    def kill_tree(self) -> None:
        self._sandbox._kill_tree(self._root)
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


def _tree(procs: list[ProcessInfo], root: int) -> list[ProcessInfo]:
    """`root` and every descendant of it."""
    keep = {root}
    changed = True
    while changed:
        changed = False
        for p in procs:
            if p.ppid in keep and p.pid not in keep:
                keep.add(p.pid)
                changed = True
    return [p for p in procs if p.pid in keep]


class GvisorSandbox:
    """One student's world under gVisor. Use as a context manager; `close()` is safe twice."""

    backend = "gvisor"

    def __init__(self, spec: SandboxSpec, confinement: ConfinementReport, *, degraded_ok: bool) -> None:
        self.spec = spec
        self.confinement = confinement
        self.degraded_ok = degraded_ok
        self.id = f"sbx-{secrets.token_hex(6)}"
        self._lock_fd = reclaim.lock_new(self.id)
        self._lease: UidLease | None = None
        self._cg = SandboxCgroup(self.id)
        self._running = False
        self._seen_pids: set[int] = set()
        self._spawned: list[GvisorProcess] = []
        self._closed = False
        root = state_dir("sandboxes") / self.id
        self._places = Places(root, root / "view", root / "workdir", root / "tmp", root / "shm")
        self._root = root / "runsc"  # runsc's state for this sandbox's container alone
        from .runtime import default_runtime

        self.runtime = spec.runtime or default_runtime()

    # -- creation --------------------------------------------------------------------------------
    def _build(self) -> None:
        spec, limits = self.spec, self.spec.limits
        if spec.network.allow:
            raise ConfigError("the gvisor runtime has no network allowlist bridge yet; use --runtime bwrap for tasks with network.allow")
        if spec.devices:
            raise ConfigError("the gvisor runtime cannot pass host devices through; use --runtime bwrap for tasks with devices")
        self._lease = lease_uid()
        uid = self._lease.uid
        reclaim.write_meta(self.id, uid)
        if self.runtime:
            check_trusted_dirs(student_path(self.runtime))
        self._places.root.mkdir(mode=0o700, exist_ok=True)
        tmpfs.mount_places(self._places.workdir, self._places.tmp, self._places.shm, limits, uid)
        # The host backstop: memory and CPU exactly as asked; threads with the sentry's headroom.
        self._cg.create(limits.model_copy(update={"pids": host_pids_max(limits.pids)}))
        if self._cg.layout.version == 2:
            self._cg.make_child("runsc")  # v2: no process may sit in a group that has children
        self._env = student_env(self.runtime, spec.env, spec.workdir)
        self._write_bundle()

    def _write_bundle(self) -> None:
        """The OCI bundle: a read-only root of empty mount points, the same view as bwrap's."""
        uid = self.uid
        bundle = self._places.root / "bundle"
        rootfs = bundle / "rootfs"
        rootfs.mkdir(parents=True, mode=0o755)
        # The allowlisted /etc with this sandbox's identity files: the same overlay bwrap's
        # view uses (ownfs), cheap to make, where copying /etc's 700 entries took a second.
        own = OwnView(self._places.view)
        own.build(ETC_ALLOWLIST, identity_files(uid, uid, self.spec.hostname, self.spec.workdir), self.spec.limits)
        etc = own.etc
        mounts = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
        ]
        for d in SYSTEM_DIRS:
            if os.path.islink(d):  # merged-/usr hosts: /bin -> usr/bin
                (rootfs / d.lstrip("/")).symlink_to(os.readlink(d))
            elif os.path.isdir(d):
                mounts.append(_bind(d, d, writable=False))
        mounts.append(_bind(etc, "/etc", writable=False))
        if self.runtime:
            mounts.append(_bind(self.runtime, self.runtime, writable=False))
        if self.spec.data_dir:
            if not os.path.isdir(self.spec.data_dir):
                raise ConfigError(f"data_dir {self.spec.data_dir!r} does not exist or is not a directory")
            mounts.append(_bind(self.spec.data_dir, self.spec.data_at, writable=False))
        for m in self.spec.mounts:
            if not os.path.exists(m.source):
                raise ConfigError(f"mount source {m.source!r} does not exist")
            mounts.append(_bind(m.source, m.target, writable=m.writable))
        mounts += [
            _bind(self._places.workdir, self.spec.workdir, writable=True),
            _bind(self._places.tmp, "/tmp", writable=True),
            _bind(self._places.shm, "/dev/shm", writable=True),
        ]
        for m in mounts:  # runsc wants each mount point to exist in the read-only root
            point = rootfs / m["destination"].lstrip("/")
            if not os.path.lexists(point):
                if m["type"] == "bind" and not os.path.isdir(m["source"]):
                    point.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                    point.touch(mode=0o644)
                else:
                    point.mkdir(parents=True, exist_ok=True, mode=0o755)
        # The cgroup is ours: on v1 its own directories, whose counters (oom kills) are local;
        # on v2 a child of it, since v2 lets no process sit in a group that has children.
        cgroup = self._cg.dir("memory") / ("runsc" if self._cg.layout.version == 2 else "")
        config = {
            "ociVersion": "1.0.0",
            "process": {
                # runsc exec gives every process the container's rlimits, not its own spec's.
                **_process_spec(["/usr/bin/python3", "-c", _ANCHOR], 0, {"PATH": "/usr/bin:/bin"}, "/", self.spec.limits.pids),
            },
            "root": {"path": "rootfs", "readonly": True},
            "hostname": self.spec.hostname,
            "mounts": mounts,
            "linux": {
                "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
                # The cgroup is ours (cgroups.py sets its limits); runsc only joins it.
                "cgroupsPath": "/" + str(cgroup.relative_to(self._cg.layout.mounts["memory"])),
            },
        }
        (bundle / "config.json").write_text(json.dumps(config))
        self._bundle = bundle

    @property
    def uid(self) -> int:
        assert self._lease is not None
        return self._lease.uid

    @property
    def python_runtime(self) -> str:
        return self.runtime

    @property
    def workdir(self) -> Path:
        """Host path of the student's /workdir (for custody only: never follow paths in it)."""
        return self._places.workdir

    def writable_places(self) -> dict[str, Path]:
        """The student's writable places, inside path -> host path (read by proctor/planted.py
        without following links)."""
        return {self.spec.workdir: self._places.workdir, "/tmp": self._places.tmp, "/dev/shm": self._places.shm}

    # -- the container ---------------------------------------------------------------------------
    def _ensure_container(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        if self._running:
            return
        self._root.mkdir(mode=0o700, exist_ok=True)
        try:
            # One runsc process for create and start (`run --detach`): each costs tens of ms.
            runsc(self._root, "run", "--detach", "--bundle", str(self._bundle), self.id)
        except SandboxError:
            self.kill_all()
            raise
        self._running = True

    def _container_alive(self) -> bool:
        res = runsc(self._root, "state", self.id, check=False)
        try:
            return res.returncode == 0 and json.loads(res.stdout).get("status") == "running"
        except ValueError:
            return False

    def _exec_argv(self, argv: Sequence[str], cwd: str, pid_file: Path) -> list[str]:
        spec = _process_spec(argv, self.uid, self._env, cwd, self.spec.limits.pids)
        path = self._places.root / f"proc-{secrets.token_hex(4)}.json"
        path.write_text(json.dumps(spec))
        return runsc_argv(self._root, "exec", "--process", str(path), "--internal-pid-file", str(pid_file), self.id)

    def _start(self, argv: Sequence[str], cwd: str | None, *, stdin: int) -> tuple[subprocess.Popen, int]:
        """Start a student command with `runsc exec`; return it and its pid inside gVisor. A
        container that died since the last command (the memory limit kills the sentry, e.g. under
        the bash tool's long-lived shell) is cleared and replaced once."""
        cwd = cwd or self.spec.workdir
        for attempt in (1, 2):
            self._ensure_container()
            try:
                return self._exec(argv, cwd, stdin=stdin)
            except SandboxError:
                if attempt == 2 or self._container_alive():
                    raise
                self.kill_all()
        raise AssertionError("unreachable")

    def _exec(self, argv: Sequence[str], cwd: str, *, stdin: int) -> tuple[subprocess.Popen, int]:
        pid_file = self._places.root / f"pid-{secrets.token_hex(4)}"
        exec_argv = self._exec_argv(argv, cwd, pid_file)
        proc = subprocess.Popen(exec_argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                close_fds=True, start_new_session=True, cwd="/")
        end = time.monotonic() + _RUNSC_TIMEOUT_S
        try:
            while True:
                try:
                    return proc, int(pid_file.read_text())
                except (FileNotFoundError, ValueError):
                    pass
                if proc.poll() is not None or time.monotonic() > end:
                    err = proc.stderr.read().decode(errors="replace").strip() if proc.poll() is not None else "timed out"  # type: ignore[union-attr]
                    proc.kill()
                    proc.wait()
                    raise SandboxError(f"sandbox {self.id}: runsc exec could not start the command: {err!r}")
                time.sleep(0.002)
        finally:
            pid_file.unlink(missing_ok=True)
            os.unlink(exec_argv[-4])  # the process spec, read by runsc exec before the pid is written

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
        start = time.monotonic()
        proc, inner = self._start(argv, cwd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
        half = output_cap // 2
        out, err = HeadTail(half, output_cap - half), HeadTail(half, output_cap - half)
        timed_out = pump(proc, out.write, err.write, deadline=start + timeout, input=input, grace_s=_DRAIN_GRACE_S)
        if timed_out:
            self._kill_tree(inner, orphans=True)
        try:
            code = proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # runsc exec itself hung: the command is dead anyway
            proc.kill()
            code = proc.wait()
        # runsc exec reports a signal death as 128+n (its own exit status is never a signal).
        signal = code - 128 if 128 < code < 160 else (-code if code < 0 else None)
        if code == 128 and not self._container_alive():
            # The container died under the command: the host OOM killer took the sentry at the
            # memory limit (the only host process that grows with the student's memory). For
            # the student that is SIGKILL of everything it ran; the next command starts afresh.
            self.kill_all()
            signal = 9
        return ExecResult(
            argv=tuple(argv),
            exit_code=None if signal else code,
            signal=signal,
            timed_out=timed_out,
            stdout=out.getvalue(), stderr=err.getvalue(),
            stdout_dropped=out.dropped, stderr_dropped=err.dropped,
            duration_s=time.monotonic() - start,
            # runsc exec's rusage is its own (a host process), not the student's: none is given.
            usage=ResourceUsage(),
        )

    def spawn(self, argv: Sequence[str], *, cwd: str | None = None) -> GvisorProcess:
        """Start a long-running student process with stdin/stdout/stderr pipes."""
        proc, inner = self._start(list(argv), cwd, stdin=subprocess.PIPE)
        spawned = GvisorProcess(proc, inner, self)
        self._spawned = [s for s in self._spawned if s.alive()] + [spawned]
        return spawned

    # -- processes -------------------------------------------------------------------------------
    def processes(self) -> list[ProcessInfo]:
        """Every process in the container now (gVisor's pids), the anchor excluded."""
        if not self._running:
            return []
        res = runsc(self._root, "ps", self.id, check=False)
        if res.returncode != 0:
            return []
        found = []
        # The table (the json format gives bare pids): UID PID PPID C TTY STIME TIME CMD.
        for line in res.stdout.splitlines()[1:]:
            cols = line.split(None, 7)
            if len(cols) < 8 or not cols[1].isdigit() or cols[1] == "1":
                continue  # pid 1 is the anchor, ours
            found.append(ProcessInfo(pid=int(cols[1]), ppid=int(cols[2]), uid=int(cols[0]), command=cols[7][:200]))
        return found

    def host_pids(self) -> list[int]:
        """Host processes that carry this sandbox (the sentry, its gofer, the ptrace stubs), for
        proofs from outside such as which cgroup holds them; never ids of student processes."""
        return self._cg.pids()

    def _kill_ids(self, pids: Iterable[int]) -> None:
        """SIGKILL these gVisor pids in one exec: a root process inside with CAP_KILL alone.
        Not as the student, whose RLIMIT_NPROC a fork bomb has used up."""
        pids = [str(p) for p in pids]
        if not pids:
            return
        spec = _process_spec(["/bin/kill", "-KILL", *pids], 0, {"PATH": "/usr/bin:/bin"}, "/", 0)
        spec["capabilities"] = {k: ["CAP_KILL"] for k in ("bounding", "effective", "permitted")}
        del spec["rlimits"]
        path = self._places.root / f"kill-{secrets.token_hex(4)}.json"
        path.write_text(json.dumps(spec))
        try:
            runsc(self._root, "exec", "--process", str(path), self.id, check=False)
        finally:
            path.unlink()

    def _kill_tree(self, root: int, *, orphans: bool = False) -> None:
        """Kill `root` and every descendant until none is left. Every process ever seen in the
        tree stays a target, so a child re-parented to init when its parent died is still
        found (a fork loop races each round). With `orphans`, also every process re-parented to
        the anchor that was born after `root` (gVisor numbers processes in order) and is not in
        a live spawned process's tree: what `(sleep &)` or a double fork leaves, which bwrap
        catches in the command's own cgroup."""
        targets = {root}
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            procs = self.processes()
            targets |= {p.pid for p in _tree(procs, root)}
            if orphans:
                others = {q.pid for s in self._spawned if s.alive() and s._root != root for q in _tree(procs, s._root)}
                targets |= {p.pid for p in procs if p.ppid == 1 and p.pid > root and p.pid not in others}
            changed = True
            while changed:
                before = len(targets)
                targets |= {p.pid for p in procs if p.ppid in targets}
                changed = len(targets) != before
            live = [p.pid for p in procs if p.pid in targets]
            if not live:
                return
            self._kill_ids(live)

    def kill_all(self, deadline_s: float = 5.0) -> KillReport:
        """Kill the container's host processes (sentry, gofer, ptrace stubs: every student task
        dies with its kernel), prove the sandbox's cgroup and the student's uid hold no process,
        then delete the container's runsc state and prove runsc no longer knows it."""
        if self._lease is None:
            return KillReport(empty=True, killed=0, rounds=0, duration_s=0.0)
        start = time.monotonic()
        killed = len(self.processes())
        self._seen_pids.update(self._cg.pids())
        report = reap_until_empty(
            freeze=lambda: self._cg.freeze(timeout_s=0.5), thaw=self._cg.thaw, cgroup_pids=self._cg.pids,
            uid=self.uid, pidns=None, reap_children=self._reap_orphans, deadline_s=deadline_s,
        )
        # Not `runsc delete`: it waits five seconds for a sentry this process already reaped.
        # With every host process of the container dead, its state is only files in our root.
        shutil.rmtree(self._root, ignore_errors=True)
        gone = not self._root.exists()
        if report.empty and gone:
            self._running = False
        return report.model_copy(update={
            "killed": killed + report.killed,
            "duration_s": time.monotonic() - start,
            "empty": report.empty and gone,
            "detail": report.detail or ("" if gone else f"runsc still lists container {self.id}"),
        })

    def _reap_orphans(self) -> None:
        # The sentry and gofer were started by `runsc create`, which exited: they are re-parented
        # to the harness (a subreaper), and their corpses are ours to reap.
        # A corpse leaves the cgroup (cgroup v1 moves an exited task to the root), so the pids
        # seen there while alive are remembered until reaped.
        me = os.getpid()
        self._seen_pids.update(self._cg.pids())
        for pid in list(self._seen_pids):
            parent = procfs.ppid_of(pid)
            if parent is None:
                self._seen_pids.discard(pid)  # gone: reaped by its own parent
            elif parent == me and procfs.is_zombie(pid):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                self._seen_pids.discard(pid)

    def usage(self) -> SandboxUsage:
        raw = self._cg.usage()
        return SandboxUsage(**{k: v for k, v in raw.items() if k in SandboxUsage.model_fields})

    def full_places(self) -> dict[str, str]:
        full = {}
        for inside, host in ((self.spec.workdir, self._places.workdir), ("/tmp", self._places.tmp), ("/dev/shm", self._places.shm)):
            st = os.statvfs(host)
            if st.f_bavail == 0:
                full[inside] = "bytes"
            elif st.f_favail == 0:
                full[inside] = "inodes"
        return full

    def network_counters(self) -> dict[str, int]:
        return {}  # gVisor's netstack has no route off loopback with --network=none

    def syscall_attempts(self) -> list:
        return []  # the seccomp recorder is not installed under gVisor (see machine_confinement)

    def copy_in(self, source: str | Path, target: str = "", *, read_only: bool = False) -> int:
        from .core import Sandbox

        return Sandbox.copy_in(self, source, target, read_only=read_only)  # type: ignore[arg-type]

    # -- ending ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Tear everything down: container, processes, mounts, cgroups, files, the uid."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        if self._lease is not None:
            report = self.kill_all()
            if not report.empty:
                errors.append(report.detail)
            end = time.monotonic() + 1.0  # a killed sentry can leave the cgroup before it is a corpse
            while any(procfs.ppid_of(p) == os.getpid() for p in self._seen_pids) and time.monotonic() < end:
                self._reap_orphans()
                time.sleep(0.005)
            left = keyrings.clear_keys(self.uid)
            if left:
                errors.append(left)
        for step in (lambda: tmpfs.remove_tree(self._places.root), self._cg.remove):
            try:
                step()
            except (SandboxError, OSError) as exc:
                errors.append(str(exc))
        if self._lease is not None:
            self._lease.release(clean=not errors)
        if not errors:
            reclaim.unlock(self.id, self._lock_fd)
        else:
            raise SandboxError(f"teardown of {self.id} incomplete (reclaim will retry): {'; '.join(errors)}")

    def __enter__(self) -> GvisorSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GvisorBackend:
    """Makes gVisor sandboxes."""

    name = "gvisor"

    def machine_confinement(self) -> ConfinementReport:
        return machine_confinement()

    def create(
        self,
        spec: SandboxSpec | None = None,
        *,
        require: Iterable[str] | None = None,
        allow_degraded: bool = False,
    ) -> GvisorSandbox:
        from .confinement import grant

        require_host()
        runsc_path()
        become_subreaper()
        spec = spec or SandboxSpec()
        if spec.image is not None:
            raise ConfigError(f"task image {spec.image.name!r} runs under the bwrap runtime only; run it with --runtime bwrap")
        self.reclaim_stale_once()
        report = self.machine_confinement()
        broken = report.get("sandbox")
        if broken is not None:
            raise SandboxUnavailable(f"the gvisor runtime cannot start here: {broken.detail}")
        degraded = grant(report, DEFAULT_REQUIRED if require is None else require, allow_degraded=allow_degraded, runtime="gvisor")
        box = GvisorSandbox(spec, report, degraded_ok=degraded)
        try:
            box._build()
        except BaseException:
            box.close()
            raise
        return box

    _reclaimed = False

    def reclaim_stale_once(self) -> None:
        if not GvisorBackend._reclaimed:
            GvisorBackend._reclaimed = True
            self.reclaim_stale()

    def reclaim_stale(self) -> list[str]:
        """The common reclaim (reclaim.py) is complete for gVisor sandboxes: a dead harness's
        sentry, gofer and stubs are in the sandbox's cgroup, and runsc's state lives in the
        sandbox's own directory, removed with it."""
        return reclaim.reclaim_stale()


_machine_report: ConfinementReport | None = None
_machine_report_lock = threading.Lock()


def machine_confinement() -> ConfinementReport:
    """What gVisor enforces here, measured by one probe sandbox once per process."""
    global _machine_report
    with _machine_report_lock:
        if _machine_report is None:
            _machine_report = probe(GvisorSandbox, platform=PLATFORM, host_pids_max=host_pids_max, runsc_path=runsc_path)
        return _machine_report
