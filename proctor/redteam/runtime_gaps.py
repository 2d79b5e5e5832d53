"""What a runtime holds but cannot see: attacks whose expected flag has no recorder there.

The library's expected flags are what bwrap records. gVisor serves the student's syscalls in its
own user-space kernel, so some of bwrap's witnesses do not exist under it (docs/sandbox.md,
"What it lacks here"): the attack is still held (scored at the floor, the harness alive), but the
attempt leaves no trace for a detector to read. The red team accepts such a row as held only for
the reasons listed here, and says so in the row (`RedteamRow.unseen`), never silently; every other
expected flag is still required under every runtime."""

from __future__ import annotations

# Kinds with no recorder at all on a runtime: every attack expecting only one of them is unseen.
_KINDS: dict[str, dict[str, str]] = {
    "gvisor": {
        "forbidden_syscall": "the sentry refuses the syscall, but the seccomp recorder does not run inside gVisor",
        "network_blocked": "the sentry refuses the packet (EHOSTUNREACH), but gVisor's /proc/net/snmp counts no OutNoRoutes",
    },
}

# Single attacks whose witness is missing on a runtime, though the kind is recorded for others.
_ATTACKS: dict[str, dict[str, str]] = {
    "gvisor": {
        "fifo-answer": "a FIFO made in /workdir exists only in the sentry: custody finds no answer, so no special file to flag",
        "socket-answer": "a socket made in /workdir exists only in the sentry: custody finds no answer, so no special file to flag",
        "fork-bomb": "the sentry refuses forks past RLIMIT_NPROC itself: the host pids cgroup counts no refusal",
        "thread-bomb": "the sentry refuses threads past RLIMIT_NPROC itself: the host pids cgroup counts no refusal",
    },
}


def unseen(runtime: str, attack: str, expected: tuple[str, ...]) -> str:
    """Why `attack` cannot be flagged under `runtime` ("" if it can: then it must be)."""
    if reason := _ATTACKS.get(runtime, {}).get(attack):
        return reason
    kinds = _KINDS.get(runtime, {})
    if expected and all(kind in kinds for kind in expected):
        return "; ".join(kinds[kind] for kind in expected)
    return ""
