"""A test environment for proctor.insight: small families whose outcome a scripted student decides
from the declared parameters, and one with planted flaws for the validity gate."""

import random
from pathlib import Path

from proctor import ExactAnswer, Family, FunctionJudge, Limits, SandboxLimits, Script, Step, Task
from proctor.sandbox.models import MiB
from proctor.tasks import ParamSpace
from proctor.tasks.models import ScriptTurn

SMALL = Limits(sandbox=SandboxLimits(memory_bytes=256 * MiB, pids=64, workdir_bytes=16 * MiB, workdir_inodes=1000),
               rollout_time_s=60, command_timeout_s=30)
SUM = "python3 -c \"print(sum(int(l) for l in open('/data/numbers.txt')))\" > /workdir/answer.txt"


def _oracle(command: str) -> Script:
    return Script(name="oracle", turns=[ScriptTurn(tool="bash", arguments={"command": command}),
                                        ScriptTurn(tool="submit", arguments={})])


def _numbers(workspace: Path, seed: int, how_many: int) -> int:
    rng = random.Random(f"insight-test/{seed}/{how_many}")
    numbers = [rng.randrange(1, 100) for _ in range(how_many)]
    (workspace / "data").mkdir()
    (workspace / "hidden").mkdir()
    (workspace / "data" / "numbers.txt").write_text("".join(f"{n}\n" for n in numbers))
    (workspace / "hidden" / "expected.txt").write_text(f"{sum(numbers)}\n")
    return sum(numbers)


def _make_sum(seed, difficulty, params, workspace):
    how_many = params["count"] * difficulty
    _numbers(workspace, seed, how_many)
    return Task(
        id=f"sum-{seed}-{difficulty}", limits=SMALL, data=workspace / "data", hidden=workspace / "hidden",
        steps=[Step(instructions="Sum /data/numbers.txt into /workdir/answer.txt.", submit=("answer.txt",),
                    judge=ExactAnswer(path="answer.txt", expected_file="expected.txt", kind="integer"))],
        oracle=_oracle(SUM), params={"numbers": how_many},
    )


def _anything_goes(ctx):
    return 1.0


def _make_flawed(seed, difficulty, params, workspace):
    total = _numbers(workspace, seed, 3)
    flaw = params["flaw"]
    judge = FunctionJudge(fn=_anything_goes, timeout_s=5) if flaw == "judge" else \
        ExactAnswer(path="answer.txt", expected_file="expected.txt", kind="integer")
    oracle = _oracle(f"echo {total + 1} > /workdir/answer.txt" if flaw == "oracle" else SUM)
    return Task(id=f"flawed-{flaw}-{seed}", limits=SMALL, data=workspace / "data", hidden=workspace / "hidden",
                steps=[Step(instructions="Sum /data/numbers.txt into /workdir/answer.txt.", submit=("answer.txt",), judge=judge)],
                oracle=oracle)


FAMILIES = [
    Family(id="sum", description="Sum count x difficulty numbers.", make=_make_sum, difficulties=(1, 2),
           default_params={"count": 2}, params=(ParamSpace(name="count", values=(2, 8)),)),
    Family(id="flawed", description="Sum three numbers; flaw plants a wrong oracle or a judge that pays for nothing.",
           make=_make_flawed, default_params={"flaw": "none"},
           params=(ParamSpace(name="flaw", values=("none", "oracle", "judge")),)),
]
