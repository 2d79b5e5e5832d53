"""The `train` tool: one training run on the instance's hidden teacher, metered against the step's budget.

Why a tool and not a program in /data: whatever a program in the student's sandbox computes is a
function of files the student can read, so if the teacher were in /data the student could compute
an experiment's outcome (or the answer) by analysis instead of running experiments. Here the
teacher stays in the task's hidden dir, the harness runs the trusted train.py on it in a child
process (never in the sandbox, never on a path the sandbox shows), and the student gets back only
what a run prints. Each run's CPU time (user + system, read from the kernel while it runs) is
charged against the step's experiment budget; a run that would exceed what is left is stopped
there, and once the budget is spent every further call is refused with a one-line reason.

Each run's line is also appended to /workdir/train_runs.jsonl (written as the student, so a
program can fit what it measured)."""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from proctor.errors import SandboxError
from proctor.tools import Arguments, Tool, ToolContext, ToolResult, register_tool

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "train.py"
TRAIN_INPUTS = "train.json"  # in the hidden dir, next to teacher.npy
LOG = "/workdir/train_runs.jsonl"
MAX_STEPS = 100_000_000
POLL_S = 0.02
_TICKS = os.sysconf("SC_CLK_TCK")
# One BLAS thread: the budget is CPU-seconds, and a run must not borrow other cores' time.
_ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


class TrainArgs(Arguments):
    width: int = Field(ge=1, description="Features the model sees (1..max_width, see /data/instance.json).")
    steps: int = Field(ge=1, le=MAX_STEPS, description="SGD steps.")
    seed: int = Field(0, ge=0, le=2**32, description="Seed of the run's data stream.")


@dataclass
class Meter:
    """The step's experiment budget (kept in the ToolContext, which lives one step)."""

    budget_s: float
    spent_s: float = 0.0
    runs: int = 0

    def summary(self) -> str:
        return f"experiment budget: {self.spent_s:.2f} of {self.budget_s:g} CPU-seconds used in {self.runs} run(s)"


@dataclass
class Run:
    stdout: str
    stderr: str
    returncode: int | None
    cpu_s: float
    over_budget: bool
    timed_out: bool


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a live child has used so far, from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def run_metered(argv: list[str], cpu_left_s: float, wall_s: float) -> Run:
    """Run a trusted program, killed once it has used `cpu_left_s` CPU-seconds or `wall_s` seconds."""
    hard = max(1, math.ceil(cpu_left_s) + 1)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env={"PATH": "/usr/bin:/bin", **_ONE_THREAD}, start_new_session=True)
        # The kernel's backstop, should polling be starved (set from outside: rollouts run in
        # threads, where a preexec_fn is unsafe).
        try:
            resource.prlimit(proc.pid, resource.RLIMIT_CPU, (hard, hard))
        except (ProcessLookupError, PermissionError):
            pass  # already gone; polling and wait4 still account for it
        deadline, over, timed_out = time.monotonic() + wall_s, False, False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if _cpu_of(proc.pid) >= cpu_left_s:
                over = True
            elif time.monotonic() >= deadline:
                timed_out = True
            if over or timed_out:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(POLL_S)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode in (-signal.SIGKILL, -signal.SIGXCPU) and not timed_out:
            over = True  # the rlimit's signal
        out.seek(0)
        err.seek(0)
        return Run(stdout=out.read(64 * 1024).decode(errors="replace"), stderr=err.read(64 * 1024).decode(errors="replace"),
                   returncode=proc.returncode, cpu_s=usage.ru_utime + usage.ru_stime, over_budget=over, timed_out=timed_out)


@register_tool
class TrainTool(Tool):
    name = "train"
    description = ("Train one linear model of the given width on this instance's hidden teacher with online SGD "
                   "(the program is /data/train.py) and return its losses. Each run's CPU time is charged against "
                   "this step's experiment budget; calls are refused once it is spent.")
    Arguments = TrainArgs

    def execute(self, args: TrainArgs, ctx: ToolContext) -> ToolResult:
        started = time.monotonic()
        inputs = ctx.hidden / TRAIN_INPUTS if ctx.hidden is not None else None
        if inputs is None or not inputs.is_file():
            return ToolResult.failure("train: this task has no hidden teacher (the tool belongs to the scaling-law family)", started=started)
        shown = json.loads(inputs.read_text())
        if args.width > shown["max_width"]:
            return ToolResult.failure(f"train: width must be between 1 and {shown['max_width']} (the widest model of this instance), "
                                      f"got {args.width}", started=started)
        meter: Meter = ctx.state.setdefault("train_meter", Meter(budget_s=shown["cpu_budget_s"]))
        left = meter.budget_s - meter.spent_s
        if left <= 0:
            return ToolResult.failure(f"train: refused: the {meter.summary()}; fit what you have measured", started=started)
        run = run_metered([sys.executable, "-I", str(PROGRAM), "--teacher-dir", str(ctx.hidden), "--width", str(args.width),
                           "--steps", str(args.steps), "--seed", str(args.seed)],
                          cpu_left_s=left, wall_s=ctx.config.bash_max_timeout_s)
        meter.spent_s = meter.budget_s if run.over_budget else meter.spent_s + run.cpu_s
        meter.runs += 1
        if run.over_budget:
            return ToolResult.failure(f"train: run stopped: it used the rest of the budget ({meter.summary()}); "
                                      "fit what you have measured", started=started)
        if run.timed_out:
            return ToolResult.failure(f"train: run stopped after {ctx.config.bash_max_timeout_s:g} s of wall time (the longest "
                                      f"a call may take now; {meter.summary()})", started=started, timed_out=True)
        if run.returncode != 0:
            reason = (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1]
            return ToolResult.failure(f"train: {reason}", started=started)
        line = run.stdout.strip()
        record = {"width": args.width, "steps": args.steps, "seed": args.seed, "output": line, "cpu_s": round(run.cpu_s, 3)}
        note = ""
        try:
            logged = ctx.sandbox.run(["/bin/sh", "-c", f"cat >> {LOG}"], input=(json.dumps(record) + "\n").encode(), timeout=10)
            if logged.exit_code != 0:
                note = f"\n[not appended to {LOG}: {logged.stderr.decode(errors='replace').strip()[:200] or 'the write failed'}]"
        except SandboxError as exc:
            # The run itself succeeded and was charged: the student's sandbox state (full disk,
            # no processes left) must not turn it into the harness's failure. A dead sandbox
            # surfaces at the next call that needs it.
            note = f"\n[not appended to {LOG}: {str(exc)[:200]}]"
        return ToolResult(output=f"{line} cpu_s={run.cpu_s:.2f}\n[{meter.summary()}]{note}", exit_code=0,
                          duration_s=time.monotonic() - started)
