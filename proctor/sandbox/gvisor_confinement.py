"""What the gVisor runtime grants on this machine, probed for real: a probe sandbox is built
under runsc and a script inside reports what the student sees.

The report uses the bwrap report's protection names (so a task's `requires` means the same under
either runtime) plus `user_space_kernel` and `hardware_isolation`, and says honestly which of
bwrap's protections gVisor gives differently, or not at all, here."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ProctorError, SandboxUnavailable
from .cgroups import layout
from .confinement import PROBE_LIMITS, _p, _swap_total
from .environment import student_env
from .host import require_host
from .models import MiB, ConfinementReport, Protection, SandboxSpec

if TYPE_CHECKING:
    from .gvisor import GvisorSandbox

# What a gVisor sandbox must enforce unless a caller says otherwise. Not in it, because gVisor
# gives them differently here (see the probe's details): own_inodes (statvfs still reaches the
# host's filesystems through the gofer), oom_priority (the host OOM killer sees the sentry, not
# student processes), syscall_filter (forbidden syscalls are refused by the sentry, not recorded).
DEFAULT_REQUIRED = (
    "user_space_kernel", "uid_isolation", "no_new_privs", "mount_namespace", "pid_namespace",
    "network_namespace", "ipc_namespace", "memory_limit", "no_swap", "pids_limit", "cpu_quota",
    "freezer", "disk_quota", "clean_environment", "host_counters_masked",
)

# Python, not coreutils: this runsc refuses statx() with AT_NO_AUTOMOUNT (EINVAL), which
# bookworm's `stat` and `ls -l` pass.
_PROBE = r"""
import ctypes, json, os, resource, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
out["uid"], out["groups"] = os.getuid(), os.getgroups()
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
out["caps"] = {k: status.get(k, "").strip() for k in ("CapEff", "CapBnd", "CapPrm", "CapInh")}
out["no_new_privs"] = libc.prctl(39, 0, 0, 0, 0)  # PR_GET_NO_NEW_PRIVS
out["nprocs"] = len([p for p in os.listdir("/proc") if p.isdigit()])
out["netifs"] = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else [
    l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
out["root_visible"] = os.path.exists("/root")
out["marker_visible"] = os.path.exists(sys.argv[1])
st = os.statvfs("/workdir")
out["workdir"] = [st.f_blocks * st.f_frsize, st.f_files]
out["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
out["env"] = sorted(os.environ)
out["kernel"] = open("/proc/version").read().strip()
out["host_counters"] = [os.path.exists(p) for p in ("/proc/sys/kernel/pty/nr", "/proc/key-users", "/proc/sys/fs/file-nr")]
r = libc.syscall(248, b"user", b"proctor-probe", b"x", 1, -4)  # add_key into the user keyring
out["add_key"] = "key" if r >= 0 else f"refused-{ctypes.get_errno()}"
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    out["internet"] = "reached"
except OSError as exc:
    out["internet"] = f"refused-{exc.errno}"
print(json.dumps(out))
"""



def _missing(exc: Exception) -> ConfinementReport:
    return ConfinementReport(protections=(Protection(name="sandbox", status="missing", mechanism="gVisor runsc + cgroups", detail=str(exc)),))


def runsc_version(path: str) -> str:
    try:
        res = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"{path} cannot run ({exc}); install gVisor with `apt-get install runsc`") from None
    if res.returncode != 0 or not res.stdout.startswith("runsc version"):
        raise SandboxUnavailable(f"{path} is not a working runsc ({(res.stderr or res.stdout).strip()[:120]!r})")
    return res.stdout.splitlines()[0].removeprefix("runsc version ").strip()


def probe(sandbox_class: type[GvisorSandbox], *, platform: str, host_pids_max: Callable[[int], int], runsc_path: Callable[[], str]) -> ConfinementReport:
    """Build a probe gVisor sandbox and report, protection by protection, what it enforced.

    The backend's pieces come from the caller (gvisor.machine_confinement): the backend needs this
    report to create sandboxes, so importing it from here would close an import circle."""
    require_host()
    PLATFORM, GvisorSandbox = platform, sandbox_class  # noqa: N806 (the names the report text uses)
    try:
        path = runsc_path()
        version = runsc_version(path)
        lay = layout()
    except SandboxUnavailable as exc:
        return _missing(exc)
    marker = Path(f"/run/proctor-probe-gvisor-{os.getpid()}")
    marker.write_text("host only")
    box = GvisorSandbox(SandboxSpec(limits=PROBE_LIMITS), ConfinementReport(protections=()), degraded_ok=True)
    try:
        box._build()
        res = box.run(["python3", "-c", _PROBE, str(marker)], timeout=30)
        try:
            seen = json.loads(res.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise SandboxUnavailable(f"runsc {version} started but the probe failed: {res.stderr.decode(errors='replace').strip()[-200:]!r}") from None
        cg = box._cg.dir("memory")
        v = lay.version
        mem = (cg / ("memory.max" if v == 2 else "memory.limit_in_bytes")).read_text().strip()
        host_pids = (box._cg.dir("pids") / "pids.max").read_text().strip()
        cpu = (box._cg.dir("cpu") / "cpu.max").read_text().split()[0] if v == 2 else (box._cg.dir("cpu") / "cpu.cfs_quota_us").read_text().strip()
        memsw = cg / ("memory.swap.max" if v == 2 else "memory.memsw.limit_in_bytes")
        memsw_ok = memsw.exists() and memsw.read_text().strip() in ("0", str(PROBE_LIMITS.memory_bytes))
        swap = _swap_total()
        gvisor_kernel = "gVisor" in seen["kernel"] or not seen["kernel"].startswith(f"Linux version {os.uname().release}")
        env_names = set(seen["env"]) - {"PWD", "SHLVL", "_"}
        caps_clear = all(val == "0000000000000000" for val in seen["caps"].values())
        protections = (
            _p("user_space_kernel", gvisor_kernel and res.ok,
               f"gVisor sentry (runsc {version}, platform {PLATFORM}): the student's syscalls are served by a Go kernel in user "
               "space, which itself may make only the host syscalls runsc's seccomp filter allows",
               f"the student sees {seen['kernel'][:80]!r}"),
            Protection(name="hardware_isolation", status="degraded", mechanism=f"platform {PLATFORM}",
                       detail="no KVM platform here (/dev/kvm hangs runsc in this Firecracker guest): the sentry intercepts "
                              "syscalls with ptrace, which costs a context switch per syscall and shares the host's address-space isolation"),
            _p("uid_isolation", seen["uid"] == box.uid and seen["groups"] in ([], [box.uid]),
               "a leased uid per sandbox (OCI process user)", f"student uid {seen['uid']}, groups {seen['groups']}"),
            _p("no_new_privs", seen["no_new_privs"] == 1 and caps_clear, "OCI noNewPrivileges, empty capability sets (gVisor enforces them)",
               f"no_new_privs={seen['no_new_privs']} caps={seen['caps']}"),
            _p("mount_namespace", not seen["root_visible"] and not seen["marker_visible"],
               "gVisor's own mount table from an allowlist (host files reach it through the gofer)",
               "host-only marker and /root invisible" if not seen["marker_visible"] else "host files visible"),
            _p("pid_namespace", seen["nprocs"] < 10, "gVisor's own process table", f"{seen['nprocs']} processes visible"),
            _p("network_namespace", seen["netifs"] == ["lo"] and seen["internet"] != "reached",
               "runsc --network=none: gVisor's netstack with loopback only", f"interfaces {seen['netifs']}, 1.1.1.1:53 {seen['internet']}"),
            _p("ipc_namespace", True, "gVisor's own SysV IPC and POSIX message queues (in the sentry)"),
            _p("memory_limit", mem == str(PROBE_LIMITS.memory_bytes),
               f"cgroup v{v} memory controller around the sentry and gofer (the host tmpfs places are charged to it too)"),
            _p("no_swap", memsw_ok or swap == 0, "memory+swap limit" if memsw_ok else "host has no swap", f"host swap {swap // MiB} MiB"),
            _p("pids_limit", seen["nproc"] == PROBE_LIMITS.pids and host_pids == str(host_pids_max(PROBE_LIMITS.pids)),
               "RLIMIT_NPROC inside gVisor (its own count of the student's processes), and the cgroup's pids.max as a "
               "host backstop on the sentry's and its ptrace stubs' threads, far above what the student's share needs",
               f"RLIMIT_NPROC {seen['nproc']}, host pids.max {host_pids}"),
            _p("cpu_quota", cpu == str(int(PROBE_LIMITS.cpus * 100_000)), f"cgroup v{v} CFS quota around the sentry"),
            _p("freezer", (cg / "cgroup.freeze").exists() if v == 2 else True,
               "the cgroup's freezer around the sentry; kill_all kills the whole container from the host"),
            _p("disk_quota", seen["workdir"] == [PROBE_LIMITS.workdir_bytes, PROBE_LIMITS.workdir_inodes],
               "host tmpfs with size= and nr_inodes= for /workdir, /tmp, /dev/shm, bound through the gofer",
               f"/workdir: {seen['workdir'][0]} bytes, {seen['workdir'][1]} inodes"),
            Protection(name="oom_priority", status="degraded", mechanism="host OOM killer",
                       detail="the host sees the sentry, not student processes: a memory limit hit kills the whole container "
                              "(the next command starts a fresh one; /workdir stays)"),
            _p("clean_environment", env_names == set(student_env(box.runtime, {})), "fixed minimal environment (OCI process env)",
               f"variables: {', '.join(sorted(env_names))}"),
            Protection(name="own_inodes", status="degraded", mechanism="gVisor's own dentries and inodes",
                       detail="locks, inotify watches and /dev nodes are the sentry's own, but statvfs of /usr, /etc and the "
                              "runtime reports the host filesystems' counters (read through the gofer)"),
            _p("host_counters_masked", not any(seen["host_counters"]), "gVisor synthesises /proc: the host's counters are not there",
               f"pty/nr, key-users, file-nr present: {seen['host_counters']}"),
            Protection(name="shared_host_resources", status="degraded", mechanism="none: the host's page cache and CPUs",
                       detail="the gofer reads the read-only files through the host page cache (cold-read timing is still a channel); "
                              "CPU and memory contention remain; gVisor removes the channels through host /proc, futexes and pagemap"),
            _p("loopback_guard", seen["netifs"] == ["lo"], "no host interface at all: nothing to escape to"),
            Protection(name="syscall_filter", status="degraded", mechanism="gVisor's sentry",
                       detail=f"keyrings and fanotify are not implemented by the sentry (add_key as the student: {seen['add_key']}), "
                              "so they are refused, but not recorded as forbidden_syscall: the seccomp recorder does not run inside gVisor"),
            Protection(name="device_passthrough", status="missing", mechanism="none", detail="this backend passes no host device through"),
        )
        return ConfinementReport(protections=protections, cgroup_version=v)
    except ProctorError as exc:
        return _missing(exc)
    finally:
        marker.unlink(missing_ok=True)
        box.close()

