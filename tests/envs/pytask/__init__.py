"""A Harbor-style task for PytestJudge: the student writes /app/solution.py; the task's own
unmodified test file (hidden/tests/test_outputs.py) grades the whole workdir at /tests."""

from pathlib import Path

from proctor import Limits, PytestJudge, SandboxLimits, Script, Step, Task
from proctor.sandbox.models import MiB

HERE = Path(__file__).resolve().parent

SOLUTION = '''\
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    x: int
    y: int


def add(a, b):
    return a + b


def greet(name):
    return f"hello {name}"


def point(x, y):
    return Point(x, y)
'''


def _task(task_id: str, scoring: str) -> Task:
    return Task(
        id=task_id,
        description="Write add, greet and point in /app/solution.py.",
        workdir="/app",
        steps=[Step(instructions="Write /app/solution.py with add(a, b), greet(name) -> 'hello NAME' and point(x, y) "
                                 "(a value compared by its coordinates), then call submit.",
                    submit=("*",), judge=PytestJudge(tests="tests", scoring=scoring, timeout_s=60))],
        limits=Limits(sandbox=SandboxLimits(memory_bytes=512 * MiB, pids=64, workdir_bytes=16 * MiB, workdir_inodes=1000),
                      command_timeout_s=30, step_time_s=120, rollout_time_s=300, max_turns=10),
        hidden=HERE / "hidden",
        oracle=Script(name="oracle", turns=[
            {"tool": "write_file", "arguments": {"path": "/app/solution.py", "content": SOLUTION}},
            {"tool": "submit", "arguments": {}},
        ]),
    )


TASKS = [_task("adder", "all"), _task("adder-fraction", "fraction")]
