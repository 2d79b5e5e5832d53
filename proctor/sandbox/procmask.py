"""What the student's /proc shows of the host: every host-global counter is masked.

A fresh /proc for the sandbox's PID namespace still shows the whole host's counters, and a
counter two sandboxes can both move and read is a channel between them: one rollout opens files
(`/proc/sys/fs/file-nr`), ptys (`/proc/sys/kernel/pty/nr`), keys (`/proc/key-users`), cgroups
(`/proc/cgroups`) or writes blocks (`/proc/fs/ext4/*/mb_groups`, `/proc/diskstats`), and a later
or concurrent one reads the number. Each such file is bound over with a per-sandbox file written
once at creation: synthetic where honest tools read it (`free`, `ps`, `top`, `os.cpu_count()`),
empty where none does. What stays is listed in `CLASSES` with the reason it may stay."""

from __future__ import annotations

import os
from pathlib import Path

from .models import SandboxLimits

# Read by tools (free, top, ps, os.cpu_count through glibc's /proc/stat fallback, lscpu):
# a plausible, constant file.
SYNTHETIC = ("meminfo", "stat", "loadavg", "cpuinfo", "sys/kernel/pty/nr")
# Read by no honest tool we know of, and all moved by other sandboxes or the host.
EMPTIED = (
    "vmstat", "zoneinfo", "buddyinfo", "pagetypeinfo", "diskstats", "interrupts", "softirqs",
    "schedstat", "locks", "keys", "key-users", "cgroups", "crypto", "modules", "slabinfo",
    "sys/fs/file-nr", "sys/fs/inode-nr", "sys/fs/inode-state", "sys/fs/dentry-state",
    "sys/fs/aio-nr", "sys/kernel/hung_task_detect_count",
)
# Whole directories of global counters: the host filesystem's free blocks per group and journal
# transactions (fs/), pressure stall averages (pressure/), quota operation counts (sys/fs/quota/).
EMPTIED_DIRS = ("fs", "pressure", "sys/fs/quota")

# Every file a student can read under /proc, by why it may be read (see docs/sandbox.md). The
# test enumerates the real /proc inside a sandbox and fails on a path no class names.
CLASSES: dict[str, tuple[str, ...]] = {
    "masked": (*SYNTHETIC, *EMPTIED, *(d + "/" for d in EMPTIED_DIRS)),
    # The student's own namespaces: its processes, IPC objects, network, hostname, mounts.
    "per-namespace": (
        "[0-9]", "self/", "thread-self/", "net/", "sysvipc/", "sys/net/", "sys/fs/mqueue/",
        "sys/kernel/ns_last_pid", "sys/kernel/hostname", "sys/kernel/domainname", "mounts",
        "sys/kernel/msgmax", "sys/kernel/msgmnb", "sys/kernel/msgmni", "sys/kernel/sem",
        "sys/kernel/shmall", "sys/kernel/shmmax", "sys/kernel/shmmni", "sys/kernel/shm_rmid_forced",
        "sys/kernel/auto_msgmni", "sys/kernel/msg_next_id", "sys/kernel/sem_next_id",
        "sys/kernel/shm_next_id", "sys/user/",
    ),
    # Fixed at boot or set only by the host's root: limits, tunables, hardware description.
    "static": (
        "sys/", "bus/", "irq/", "tty/", "dma", "iomem", "ioports", "misc", "devices", "swaps",
        "version", "cmdline", "consoles", "kallsyms", "config.gz", "execdomains", "filesystems",
        "partitions", "mtrr", "fb", "kcore", "asound/", "driver/", "dynamic_debug/",
        "sysrq-trigger", "vmallocinfo", "timer_list", "kmsg", "kpagecount", "kpageflags",
        "kpagecgroup", "bootconfig", "latency_stats", "sched_debug", "acpi/", "scsi/", "mdstat",
        "zswap",
    ),
    # Host-global and readable; what it carries and why it stays is in docs/sandbox.md.
    # /proc/<pid>/net is per process, so it cannot be bound over; these few fields in it count
    # the whole host: TCP sockets allocated and TCP/UDP memory (sockstat, protocols), packets
    # per CPU (softnet_stat).
    "residual": ("uptime", "net/sockstat", "net/sockstat6", "net/protocols", "net/softnet_stat"),
}


def classify(path: str) -> str | None:
    """The class of a path relative to /proc (e.g. "sys/fs/file-nr"), most specific rule first."""
    best: tuple[int, str] | None = None
    for cls, rules in CLASSES.items():
        for rule in rules:
            hit = (
                path[:1].isdigit() if rule == "[0-9]"
                else path.startswith(rule) if rule.endswith("/")
                else path == rule
            )
            if hit and (best is None or len(rule) > best[0]):
                best = (len(rule), cls)
    return best[1] if best else None


def _meminfo(limits: SandboxLimits) -> str:
    # The cgroup limit is all the student can have: `free` and psutil show that, never the host.
    kib = limits.memory_bytes // 1024
    rows = {
        "MemTotal": kib, "MemFree": kib, "MemAvailable": kib, "Buffers": 0, "Cached": 0,
        "SwapCached": 0, "Active": 0, "Inactive": 0, "SwapTotal": 0, "SwapFree": 0, "Dirty": 0,
        "Writeback": 0, "AnonPages": 0, "Mapped": 0, "Shmem": 0, "KReclaimable": 0, "Slab": 0,
        "SReclaimable": 0, "SUnreclaim": 0, "CommitLimit": kib, "Committed_AS": 0,
    }
    return "".join(f"{k + ':':<16}{v:>8} kB\n" for k, v in rows.items())


def _cpu_ids() -> list[int]:
    """The host's online CPUs: glibc counts the `cpuN` lines of /proc/stat for os.cpu_count()
    when /sys is absent, as it is in the sandbox."""
    ids = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            ids.append(int(line.split()[0][3:]))
    return ids or list(range(os.cpu_count() or 1))


def _boot_time() -> int:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    return 0


def _stat() -> str:
    # All times zero: `top` shows an idle machine instead of every other tenant's load.
    zeros = " 0" * 10
    lines = [f"cpu {zeros}", *(f"cpu{i}{zeros}" for i in _cpu_ids())]
    lines += ["intr 0", "ctxt 0", f"btime {_boot_time()}", "processes 0", "procs_running 1", "procs_blocked 0", "softirq 0"]
    return "\n".join(lines) + "\n"


def _cpuinfo() -> str:
    # A snapshot: the live file's "cpu MHz" follows the host's load on machines that scale frequency.
    return Path("/proc/cpuinfo").read_text()


def contents(limits: SandboxLimits) -> dict[str, str]:
    """Masked /proc files (relative paths) that exist on this host, and what each shows instead."""
    made = {
        "meminfo": _meminfo(limits),
        "stat": _stat(),
        "loadavg": "0.00 0.00 0.00 1/1 1\n",
        "cpuinfo": _cpuinfo(),
        "sys/kernel/pty/nr": "0\n",
        **{name: "" for name in EMPTIED},
    }
    # Only what exists and the student could read: every bind costs bubblewrap a mount.
    return {name: text for name, text in made.items() if _world_readable(f"/proc/{name}")}


def _world_readable(path: str) -> bool:
    try:
        return os.stat(path).st_mode & 0o004 != 0
    except OSError:
        return False


def masked_dirs() -> list[str]:
    return [d for d in EMPTIED_DIRS if os.path.isdir(f"/proc/{d}")]
