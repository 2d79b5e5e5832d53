"""Quarterly revenue: the student computes Q3 2024 revenue from /data/orders.csv.

The answer is the sum of `amount` over rows with status `paid` and a date from 2024-07-01 to
2024-09-30 inclusive, written as a plain integer to /workdir/answer.txt. The orders include rows
on and just outside both boundary dates and rows of the other statuses; the expected total is
hidden data, which only the judge sees."""

from pathlib import Path

from proctor import ExactAnswer, Limits, Script, Step, Task
from proctor.sandbox.models import MiB, SandboxLimits

HERE = Path(__file__).resolve().parent

INSTRUCTIONS = """\
/data/orders.csv lists orders with the header `order_id,date,amount,status`; `date` is YYYY-MM-DD,
`amount` a whole number of dollars, `status` one of paid, refunded, pending.
Compute the revenue of Q3 2024: the sum of `amount` over orders with status `paid` dated from
2024-07-01 to 2024-09-30 inclusive. Write it as a plain integer to /workdir/answer.txt, then call submit."""

TASKS = [
    Task(
        id="q3-revenue",
        description="Sum Q3 2024 paid orders from a CSV (boundary dates, other statuses).",
        steps=[
            Step(
                instructions=INSTRUCTIONS,
                submit=("answer.txt",),
                judge=ExactAnswer(path="answer.txt", expected_file="expected.txt", kind="integer", timeout_s=10),
            )
        ],
        limits=Limits(sandbox=SandboxLimits(memory_bytes=512 * MiB, pids=64, cpus=1.0, workdir_bytes=64 * MiB, workdir_inodes=4096),
                      command_timeout_s=30, step_time_s=300, rollout_time_s=600, max_turns=40),
        data=HERE / "data",
        hidden=HERE / "hidden",
        oracle=Script.load(HERE / "oracle.json"),
    )
]
