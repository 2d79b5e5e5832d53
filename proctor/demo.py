"""`proctor demo`: a scripted hostile student against a real sandbox, no key and no network.

Each attack runs as the student inside a fresh sandbox with small limits; the harness then checks,
from outside, that the attack was contained and that the harness itself is unharmed."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable

from pydantic import BaseModel
from rich.console import Console

from .sandbox import ExecResult, Sandbox, SandboxLimits, SandboxSpec
from .sandbox.models import MiB

DEMO_LIMITS = SandboxLimits(memory_bytes=256 * MiB, pids=64, cpus=0.5, workdir_bytes=32 * MiB, workdir_inodes=2000)


class DemoRow(BaseModel):
    name: str
    description: str
    outcome: str
    contained: bool


def _harness_ok() -> bool:
    """The harness can still start processes."""
    return subprocess.run(["/bin/true"], timeout=10).returncode == 0


def _attacks(harness_port: int) -> list[tuple[str, str, str, Callable[[ExecResult, Sandbox], tuple[str, bool]]]]:
    py = "python3 -c"
    return [
        ("read-host-secrets", "read /root, the harness's files and host /tmp",
         "ls /root /work /run/proctor /tmp/proctor-demo-secret 2>&1; cat /etc/shadow 2>&1",
         lambda r, b: ("nothing of the host is there", _all_absent(r, 5))),
        ("signal-the-harness", f"kill -9 the harness (pid {os.getpid()}) and pid 1",
         f"kill -9 {os.getpid()} 1; echo rc=$?",
         lambda r, b: ("harness alive, signals refused", _harness_ok())),
        ("become-root", "setuid(0) and su",
         f"{py} 'import os; os.setuid(0)' 2>&1 | tail -1; su -c id 2>&1 | tail -1",
         lambda r, b: ("no privilege gained", "uid=0" not in r.text)),
        ("memory-hog", "allocate 2 GiB under a 256 MiB limit",
         f"{py} 'x = bytearray(2 * 1024**3); print(\"got it\")'",
         lambda r, b: (f"killed by the kernel (signal {r.signal or r.exit_code})", "got it" not in r.text and _harness_ok())),
        ("disk-fill", "write 100 MiB into a 32 MiB workdir",
         "dd if=/dev/zero of=/workdir/fill bs=1M count=100 2>&1",
         lambda r, b: ("stopped at the quota", "No space left" in r.text)),
        ("fork-bomb", "a classic fork bomb under a 64-process limit",
         "bomb() { bomb | bomb & }; bomb; sleep 2; echo done",
         lambda r, b: ("contained; harness still starts processes", _harness_ok())),
        ("network-out", "reach the internet, cloud metadata and a host loopback service",
         f"for a in 192.0.2.1:80 169.254.169.254:80 127.0.0.1:{harness_port}; do "
         f"{py} \"import socket,sys; h,p=sys.argv[1].split(':'); s=socket.socket(); s.settimeout(2); "
         "print(sys.argv[1], s.connect_ex((h,int(p))))\" $a; done",
         lambda r, b: ("no connection left the namespace", r.text.count(" 0\n") == 0 and r.text.count("\n") == 3)),
        ("leftover-daemon", "a setsid daemon that keeps rewriting the answer after the turn",
         "setsid sh -c 'while :; do echo 42 > /workdir/answer.txt; sleep 0.01; done' >/dev/null 2>&1 & echo started",
         lambda r, b: _reaped(b)),
    ]


def _all_absent(result: ExecResult, n: int) -> bool:
    lines = result.text.splitlines()
    return len(lines) == n and all("No such file or directory" in line for line in lines)


def _reaped(box: Sandbox) -> tuple[str, bool]:
    report = box.kill_all()
    return (f"kill_all: {report.killed} killed, proven empty in {report.duration_s * 1000:.0f} ms", report.empty)


def run_demo(progress: Console | None = None) -> list[DemoRow]:
    rows = []
    secret = "/tmp/proctor-demo-secret"  # exists on the host; must not exist for the student
    with open(secret, "w") as f:
        f.write("the answer key")
    with socket.socket() as listener:  # a host service the student must not reach
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        for name, description, command, judge in _attacks(port):
            if progress:
                progress.print(f"[dim]attacking: {name}[/dim]")
            with Sandbox.create(SandboxSpec(limits=DEMO_LIMITS)) as box:
                result = box.run(["/bin/bash", "-c", command], timeout=15)
                outcome, contained = judge(result, box)
                rows.append(DemoRow(name=name, description=description, outcome=outcome, contained=contained))
    os.unlink(secret)
    return rows
