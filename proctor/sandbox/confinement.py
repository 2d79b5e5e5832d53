"""What this machine actually grants, probed for real: a probe sandbox is built and a script
inside it reports what it sees; the harness compares that with what it asked for."""

from __future__ import annotations

import errno
import os
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfinementError, ProctorError, SandboxUnavailable
from . import syscall_filter, sysimage
from .cgroups import layout
from .environment import student_env
from .host import binaries, require_host
from .models import MiB, ConfinementReport, Protection, SandboxLimits, SandboxSpec
from .ownfs import VIEW_INODES
from .network import loopback_escapes

if TYPE_CHECKING:
    from .core import Sandbox

DEFAULT_REQUIRED = (
    "uid_isolation", "no_new_privs", "mount_namespace", "pid_namespace", "network_namespace",
    "ipc_namespace", "memory_limit", "no_swap", "pids_limit", "cpu_quota", "freezer", "disk_quota",
    "oom_priority", "clean_environment", "own_inodes", "host_counters_masked", "syscall_filter",
    # Required where setup built the system image: a stale image then stops sandbox creation with
    # the rebuild command instead of silently showing the host's inodes.
) + (("private_system_inodes",) if sysimage.built_images() else ())
# What namespaces on one kernel cannot separate: measured by bench/covert.py on the CI machine
# (2 cores, kernel 6.18); docs/sandbox.md has the numbers and what gVisor changes.
RESIDUAL = (
    "CPU and memory contention and /proc/uptime's idle column (0.2-3 bit/s at 50 ms slots on a busy "
    "2-core machine, more on a quiet one); the host-wide TCP socket count and socket memory in "
    "/proc/net/sockstat (a per-process directory that cannot be bound over: 50-80 bit/s without "
    "error, above 250 bit/s with errors); the host-wide pipe/socket inode counter (about 5 bit/s), eventfd ids and "
    "pidfd inode numbers (not measured); sysinfo(2)'s host load and memory figures. "
    "Files that are still the host's inodes: task data over 64 MiB and a non-default runtime are "
    "overlays whose mappings and page cache are shared (page-cache timing 1,000-12,000 bit/s, futexes "
    "on a shared mapping 3,700-4,200 bit/s, the pagemap's exclusively-mapped bit hundreds of kbit/s), "
    "and so are /usr, /etc and the runtime when private_system_inodes is not enforced. "
    "bench/covert.py measures them; a gVisor runtime has its own /proc and file cache."
)
PROBE_LIMITS = SandboxLimits(memory_bytes=96 * MiB, pids=32, cpus=0.5, workdir_bytes=3 * MiB, workdir_inodes=333)
_PROBE = r"""
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
grep -E '^(NoNewPrivs|CapEff|CapBnd|CapPrm|CapAmb|Seccomp):' /proc/self/status | tr -d '\t' | sed 's/:/=/'
echo "nprocs=$(ls -d /proc/[0-9]* | wc -l)"
echo "netifs=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ,)"
for ns in ipc mnt pid net uts; do echo "ns_$ns=$(readlink /proc/self/ns/$ns)"; done
echo "root_visible=$(test -e /root && echo yes || echo no)"
echo "marker_visible=$(test -e "$1" && echo yes || echo no)"
echo "oom=$(cat /proc/self/oom_score_adj)"
echo "workdir=$(stat -f -c '%b %S %c' /workdir)"
echo "envnames=$(env | cut -d= -f1 | sort | tr '\n' ,)"
echo "view_inodes=$(stat -f -c '%c' / /etc /dev/null 2>&1 | tail -n 2 | tr '\n' ' ')"
echo "usr_inodes=$(stat -f -c '%c' /usr)"
echo "system_fs=$(stat -f -c '%t' /usr "$3" | tr '\n' ,)"
echo "null_dev=$(stat -c '%d' /dev/null)"
echo "counters=$(cat /proc/sys/kernel/pty/nr)$(wc -c < /proc/key-users)$(wc -c < /proc/sys/fs/file-nr)"
echo "add_key=$(python3 -c "$2" 2>&1 | tr -d '\n' | head -c 80)"
"""
# The keyring attack itself (add_key into the user keyring): the filter must refuse it (EPERM)
# and the harness must have recorded it.
_ADD_KEY = (
    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    "r = libc.syscall(248, b'user', b'proctor-probe', b'x', 1, -4); "
    "print(f'key-{r}' if r >= 0 else f'refused-{ctypes.get_errno()}')"
)



def _p(name: str, ok: bool, mechanism: str, detail: str = "") -> Protection:
    return Protection(name=name, status="enforced" if ok else "missing", mechanism=mechanism, detail=detail)


def _host_ns(name: str) -> str:
    return os.readlink(f"/proc/self/ns/{name}")


def _swap_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def probe(sandbox_class: type[Sandbox]) -> ConfinementReport:
    """Build a probe sandbox and report, protection by protection, what the kernel enforced.

    The class comes from the caller (core.machine_confinement): Sandbox.create needs this report, so
    importing core from here would close an import circle."""
    require_host()
    try:
        binaries()
        lay = layout()
    except SandboxUnavailable as exc:
        return ConfinementReport(protections=(Protection(name="sandbox", status="missing", mechanism="bubblewrap + cgroups", detail=str(exc)),))
    marker = Path(f"/run/proctor-probe-{os.getpid()}")
    marker.write_text("host only")
    box = sandbox_class(SandboxSpec(limits=PROBE_LIMITS), ConfinementReport(protections=()), degraded_ok=True)
    try:
        box._build()
        res = box.run(["/bin/sh", "-c", _PROBE, "probe", str(marker), _ADD_KEY, box.python_runtime or "/usr"], timeout=20)
        recorded = [a.syscall for a in box.syscall_attempts()]
        seen = dict(
            part.split("=", 1) for line in res.text.splitlines() for part in (line.split(" ") if line.startswith("uid=") else [line]) if "=" in part
        )
        cg = box._cg
        v = lay.version
        mem_file = cg.dir("memory") / ("memory.max" if v == 2 else "memory.limit_in_bytes")
        memsw = cg.dir("memory") / ("memory.swap.max" if v == 2 else "memory.memsw.limit_in_bytes")
        pids_file = cg.dir("pids") / "pids.max"
        cpu_ok = (
            (cg.dir("cpu") / "cpu.max").read_text().split()[0] == str(int(PROBE_LIMITS.cpus * 100_000))
            if v == 2 else (cg.dir("cpu") / "cpu.cfs_quota_us").read_text().strip() == str(int(PROBE_LIMITS.cpus * 100_000))
        )
        freezer_ok = (cg.dir("memory") / "cgroup.freeze").exists() if v == 2 else (cg.dir("freezer") / "freezer.state").exists()
        blocks, bsize, inodes = (int(x) for x in seen.get("workdir", "0 0 0").split())
        swap = _swap_total()
        memsw_ok = memsw.exists() and memsw.read_text().strip() in ("0", str(PROBE_LIMITS.memory_bytes))
        expected_env = set(student_env(box.python_runtime, {}))
        # The shell itself adds PWD, SHLVL and _; anything else came from outside.
        env_names = set(seen.get("envnames", "").strip(",").split(",")) - {"PWD", "SHLVL", "_"}
        image, why = sysimage.current(sysimage.system_content())
        system_fs_ok = image is not None and seen.get("system_fs") == f"{sysimage.EROFS_MAGIC:x},{sysimage.EROFS_MAGIC:x},"
        guarded = box._anchor_pid is not None and loopback_escapes(box._anchor_pid) is not None
        protections = (
            _p("uid_isolation", seen.get("uid") == str(box.uid) and seen.get("groups") == str(box.uid),
               "a leased uid per sandbox, no supplementary groups", f"student uid {seen.get('uid')}, groups {seen.get('groups')}"),
            _p("no_new_privs", seen.get("NoNewPrivs") == "1" and seen.get("CapEff") == "0000000000000000" and seen.get("CapBnd") == "0000000000000000",
               "no_new_privs, empty capability sets", f"NoNewPrivs={seen.get('NoNewPrivs')} CapEff={seen.get('CapEff')} CapBnd={seen.get('CapBnd')}"),
            _p("mount_namespace", seen.get("ns_mnt") != _host_ns("mnt") and seen.get("root_visible") == "no" and seen.get("marker_visible") == "no",
               "bubblewrap mount namespace from an allowlist", "host-only marker and /root invisible" if seen.get("marker_visible") == "no" else "host files visible"),
            _p("pid_namespace", seen.get("ns_pid") != _host_ns("pid") and int(seen.get("nprocs", "999")) < 10,
               "PID namespace with a fresh /proc", f"{seen.get('nprocs')} processes visible"),
            _p("network_namespace", seen.get("ns_net") != _host_ns("net") and seen.get("netifs") == "lo,",
               "network namespace, loopback only", f"interfaces: {seen.get('netifs')}"),
            _p("ipc_namespace", seen.get("ns_ipc") != _host_ns("ipc"), "IPC namespace (private SysV shm, queues, semaphores)"),
            _p("memory_limit", mem_file.exists() and mem_file.read_text().strip() == str(PROBE_LIMITS.memory_bytes),
               f"cgroup v{v} memory controller (tmpfs and SysV shm are charged to it)"),
            _p("no_swap", memsw_ok or swap == 0, "memory+swap limit" if memsw_ok else "host has no swap",
               f"host swap {swap // MiB} MiB"),
            _p("pids_limit", pids_file.exists() and pids_file.read_text().strip() == str(PROBE_LIMITS.pids), f"cgroup v{v} pids controller"),
            _p("cpu_quota", cpu_ok, f"cgroup v{v} CFS quota"),
            _p("freezer", freezer_ok, f"cgroup v{v} {'cgroup.freeze' if v == 2 else 'freezer controller'} (kill_all cannot be outrun)"),
            _p("disk_quota", blocks * bsize == PROBE_LIMITS.workdir_bytes and inodes == PROBE_LIMITS.workdir_inodes,
               "tmpfs with size= and nr_inodes= for /workdir, /tmp, /dev/shm", f"/workdir: {blocks * bsize} bytes, {inodes} inodes"),
            _p("oom_priority", seen.get("oom") == "1000", "oom_score_adj 1000 for student processes"),
            _p("clean_environment", env_names == expected_env, "fixed minimal environment", f"variables: {', '.join(sorted(env_names))}"),
            _p("own_inodes", seen.get("view_inodes", "").split() == [str(VIEW_INODES)] * 2 and seen.get("null_dev") == str(os.stat(box._places.view).st_dev)
               and (seen.get("usr_inodes") == str(VIEW_INODES) or system_fs_ok),
               "a tmpfs per sandbox: read-only overlays (or its own system image) for /usr, /etc, the runtime and /data, its own /dev nodes",
               "locks, inotify watches and statvfs of what the student reads are its own" if seen.get("null_dev") == str(os.stat(box._places.view).st_dev) else f"/usr, /etc, /dev/null report {seen.get('view_inodes')} inodes"),
            _private_system_inodes(seen, image, why),
            _p("host_counters_masked", seen.get("counters") == "000", "host-global /proc counters bound over with per-sandbox files",
               "pty count, key users, open files and the rest of procmask's list"),
            Protection(name="shared_host_resources", status="degraded", mechanism="none: one kernel's page cache and CPUs", detail=RESIDUAL),
            _p("loopback_guard", guarded, "nftables table per network namespace (drops and counts packets leaving lo for other addresses)",
               "" if guarded else "nft is not installed (make setup installs nftables): packets a socket bound to lo sends elsewhere go unseen"),
            _syscall_filter(seen, recorded),
            _p("device_passthrough", True, "bubblewrap --dev-bind of task-declared device nodes", "only nodes a task names are present"),
        )
        return ConfinementReport(protections=protections, cgroup_version=v)
    except ProctorError as exc:
        return ConfinementReport(protections=(Protection(name="sandbox", status="missing", mechanism="bubblewrap + cgroups", detail=str(exc)),))
    finally:
        marker.unlink(missing_ok=True)
        box.close()


def _syscall_filter(seen: dict[str, str], recorded: list[str]) -> Protection:
    mechanism = "seccomp filter on every student process: keyrings, fanotify, AF_VSOCK refused and recorded; page-cache eviction and probes neutralised"
    if not syscall_filter.supported():
        return _p("syscall_filter", False, mechanism, f"no filter for this architecture ({platform.machine()})")
    ok = seen.get("Seccomp") == "2" and seen.get("add_key") == f"refused-{errno.EPERM}" and "add_key" in recorded
    return _p("syscall_filter", ok, mechanism,
              f"Seccomp={seen.get('Seccomp')}, add_key as the student: {seen.get('add_key')}, recorded: {', '.join(recorded) or 'nothing'}")


def grant(report: ConfinementReport, required: Iterable[str], *, allow_degraded: bool, runtime: str = "bwrap") -> bool:
    """Check `report` grants every `required` protection; return whether the sandbox is degraded
    (some required one is not enforced, which only `allow_degraded` lets through). Raises
    ConfinementError naming each protection that is unknown, or lacking without the opt-out."""
    needed = set(required)
    unknown = needed - {p.name for p in report.protections}
    if unknown:
        raise ConfinementError(f"unknown protection(s) required under {runtime}: {', '.join(sorted(unknown))}")
    lacking = sorted(n for n in needed if report.get(n).status != "enforced")  # type: ignore[union-attr]
    if lacking and not allow_degraded:
        details = "; ".join(f"{n}: {report.get(n).status} ({report.get(n).detail})" for n in lacking)  # type: ignore[union-attr]
        check = "proctor check confinement" + ("" if runtime == "bwrap" else f" --runtime {runtime}")
        raise ConfinementError(
            f"this machine does not enforce {', '.join(lacking)} under {runtime} ({details}); "
            f"run `{check}`, or opt out explicitly with allow_degraded=True"
        )
    return bool(lacking)


def _private_system_inodes(seen: dict[str, str], image: Path | None, why: str) -> Protection:
    mechanism = "its own mount of an erofs system image (its own loop device, direct I/O) for /usr, /etc and the runtime"
    erofs = f"{sysimage.EROFS_MAGIC:x}"
    if image is not None and seen.get("system_fs") == f"{erofs},{erofs},":
        return _p("private_system_inodes", True, mechanism,
                  f"{image.name}: no page cache, mapping, futex key or atime shared with the host or another sandbox")
    if image is None and not sysimage.built_images():
        # Never built on this machine (setup not run since): an explicit gap, not a hidden one.
        return Protection(name="private_system_inodes", status="degraded", mechanism="read-only overlays of the host's files",
                          detail=f"{why}; until then the page cache, futex and pagemap channels of shared_host_resources stay open")
    return _p("private_system_inodes", False, mechanism, why or f"/usr and the runtime are on {seen.get('system_fs')}, not the image")

