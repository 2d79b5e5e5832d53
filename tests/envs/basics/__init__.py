"""A test environment exercising the harness: budgets, deadlines, hooks, multiple steps, families
and judges that fail. Every task is small and quick."""

import time
from pathlib import Path

from proctor import ExactAnswer, Family, FunctionJudge, Limits, SandboxLimits, Step, Task, Verdict
from proctor.judges import Gate
from proctor.sandbox.models import MiB

HERE = Path(__file__).resolve().parent
SMALL = dict(sandbox=SandboxLimits(memory_bytes=256 * MiB, pids=64, workdir_bytes=16 * MiB, workdir_inodes=1000))


def _answer_is(expected: str):
    def judge(ctx):
        path = ctx.submission / "answer.txt"
        return 1.0 if path.is_file() and path.read_text().strip() == expected else 0.0
    judge.__name__ = f"answer_is_{expected}"
    return FunctionJudge(fn=judge, timeout_s=5)


def _crash(ctx):
    raise RuntimeError("the grader fell over")


def _hang(ctx):
    time.sleep(60)


def _place_hint(ctx):
    ctx.sandbox.run(["/bin/sh", "-c", "echo 41 > /workdir/hint.txt"], timeout=10)


def _two_steps():
    return (
        Step(instructions="Write 1 to /workdir/answer.txt.", submit=("answer.txt",), judge=_answer_is("1")),
        Step(instructions="Now write 2 to /workdir/answer.txt.", submit=("answer.txt",), judge=_answer_is("2")),
    )


def _make_sum(seed, difficulty, params, workspace):
    import random
    rng = random.Random(seed * 1000 + difficulty)
    numbers = [rng.randrange(100) for _ in range(params["count"] * difficulty)]
    (workspace / "data").mkdir()
    (workspace / "hidden").mkdir()
    (workspace / "data" / "numbers.txt").write_text("".join(f"{n}\n" for n in numbers))
    (workspace / "hidden" / "expected.txt").write_text(f"{sum(numbers)}\n")
    return Task(
        id=f"sum-{seed}-{difficulty}", limits=Limits(**SMALL), data=workspace / "data", hidden=workspace / "hidden",
        steps=[Step(instructions="Sum /data/numbers.txt into /workdir/answer.txt.", submit=("answer.txt",),
                    judge=ExactAnswer(path="answer.txt", expected_file="expected.txt", kind="integer"))],
        params={"numbers": len(numbers)},
    )


TASKS = [
    Task(id="write-42", limits=Limits(**SMALL, rollout_time_s=60),
         steps=[Step(instructions="Write 42 to /workdir/answer.txt.", submit=("answer.txt",), judge=_answer_is("42"))]),
    Task(id="short-deadline", limits=Limits(**SMALL, rollout_time_s=2, command_timeout_s=60),
         steps=[Step(instructions="Take your time.", submit=("answer.txt",), judge=_answer_is("42"))]),
    Task(id="short-step", limits=Limits(**SMALL, step_time_s=1.5, command_timeout_s=60),
         steps=_two_steps()),
    Task(id="two-steps", limits=Limits(**SMALL), steps=_two_steps()),
    Task(id="gated", limits=Limits(**SMALL), steps=(
        Step(instructions="Write 1.", submit=("answer.txt",), judge=Gate(gate=_answer_is("1"), then=_answer_is("1"))),
        Step(instructions="Write 2.", submit=("answer.txt",), judge=_answer_is("2")),
    )),
    Task(id="three-turns", limits=Limits(**SMALL, max_turns=3),
         steps=[Step(instructions="Go.", submit=("answer.txt",), judge=_answer_is("42"))]),
    Task(id="crashing-judge", limits=Limits(**SMALL),
         steps=[Step(instructions="Go.", submit=("answer.txt",), judge=FunctionJudge(fn=_crash))]),
    Task(id="hanging-judge", limits=Limits(**SMALL),
         steps=[Step(instructions="Go.", submit=("answer.txt",), judge=FunctionJudge(fn=_hang, timeout_s=1))]),
    Task(id="nan-judge", limits=Limits(**SMALL),
         steps=[Step(instructions="Go.", submit=("answer.txt",), judge=FunctionJudge(fn=lambda ctx: float("nan")))]),
    Task(id="infra-judge", limits=Limits(**SMALL),
         steps=[Step(instructions="Go.", submit=("answer.txt",),
                     judge=FunctionJudge(fn=lambda ctx: Verdict(score=0, explanation="provider down", infra_error=True)))]),
    Task(id="hooked", limits=Limits(**SMALL),
         steps=[Step(instructions="Add one to /workdir/hint.txt into answer.txt.", submit=("answer.txt",),
                     judge=_answer_is("42"), before=_place_hint)]),
    Task(id="needs-a-package", limits=Limits(**SMALL), packages=("surely-not-installed-pkg",),
         steps=[Step(instructions="Go.", submit=("answer.txt",), judge=_answer_is("42"))]),
    Task(id="starter-files", limits=Limits(**SMALL), workdir_files=HERE / "starter",
         steps=[Step(instructions="Go.", submit=("answer.txt",), judge=_answer_is("42"))]),
]

FAMILIES = [
    Family(id="sum", description="Sum some numbers.", make=_make_sum, difficulties=(1, 2), default_params={"count": 5}),
]
