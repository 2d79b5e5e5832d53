"""The `scaling-law` family: (seed, difficulty) -> a task instance with its program, key and oracle."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from proctor import FunctionJudge, Limits, Script, Step, Task
from proctor.sandbox.models import MiB
from proctor.tasks.models import ScriptTurn

from . import judge, teacher, truth

HERE = Path(__file__).resolve().parent
FAMILY_ID = teacher.FAMILY_ID
DIFFICULTIES = (1, 2, 3)


class Difficulty(BaseModel):
    """What a difficulty level changes: how far to extrapolate, and how much compute the student gets."""

    target_width: int = Field(description="Width whose converged loss is asked for.")
    max_width: int = Field(description="Widest model train.py can train: the teacher is shipped up to here, short of the target.")
    step_time_s: float = Field(description="Wall time of the student's whole step.")


LEVELS = {
    1: Difficulty(target_width=2048, max_width=512, step_time_s=60),
    2: Difficulty(target_width=16384, max_width=4096, step_time_s=45),
    3: Difficulty(target_width=131072, max_width=32768, step_time_s=30),
}
CPUS = 1.0
COMMAND_TIMEOUT_S = 15.0
MAX_COMMAND_TIMEOUT_S = 20.0


class StudentInstance(BaseModel):
    """/data/instance.json: what train.py needs besides /data/teacher.npy (no law parameters)."""

    max_width: int
    signal_beyond_max_width: float = Field(description="The teacher's signal in all features past max_width, summed.")
    batch: int
    learning_rate: float
    stream_seed: int


def limits(level: Difficulty) -> Limits:
    return Limits(memory_bytes=512 * MiB, pids=64, cpus=CPUS, disk_bytes=64 * MiB, inodes=2048,
                  command_timeout_s=COMMAND_TIMEOUT_S, max_command_timeout_s=MAX_COMMAND_TIMEOUT_S,
                  step_time_s=level.step_time_s, rollout_time_s=level.step_time_s + 30, max_turns=60)


def instructions(level: Difficulty) -> str:
    budget = CPUS * level.step_time_s
    return f"""\
/data/train.py trains a linear model of a given width (the number of input features it sees) on
this instance's synthetic teacher with online minibatch SGD, and prints its loss:

    python3 /data/train.py --width 64 --steps 4000 --seed 0
    width=64 steps=4000 seed=0 final_loss=... mean_loss_last_quarter=...

(/data/teacher.npy and /data/instance.json hold the teacher's first {level.max_width} features, the
widest model train.py can train; `--help` lists the options.) As the steps grow, the loss of a
given width settles at a converged value (up to SGD noise).

Question: what is the converged loss of a width-{level.target_width} model, i.e. the value that
mean_loss_last_quarter approaches, averaged over seeds, when that width is trained long enough?

Your compute is limited: {CPUS:g} CPU, {COMMAND_TIMEOUT_S:g} s per command by default
(at most {MAX_COMMAND_TIMEOUT_S:g} s), {level.step_time_s:g} s of wall time for the whole task,
about {budget:g} CPU-seconds in all. Width {level.target_width} is beyond what train.py can train, and
wide runs take many steps to converge: plan small experiments and extrapolate.

Write your prediction to /workdir/answer.json as exactly {{"predicted_loss": <number>}}: one
JSON object, one key, a finite number in [{judge.MIN_LOSS:g}, {judge.MAX_LOSS:g}]. Then call submit.
Score: with e = |ln(predicted / true)|, 1 if e <= {judge.FULL_ERROR:g}, 0 if e >= ln 2.5, linear between."""


ORACLE_WIDTHS = (16, 32, 64, 128, 256)


def oracle_script(target_width: int) -> Script:
    """Measure each width in its own command (each well inside the per-command timeout), then fit."""
    program = (HERE / "oracle_experiment.py").read_text()
    measure = [ScriptTurn(tool="bash", arguments={"command": f"python3 /workdir/experiment.py measure {w}", "timeout": MAX_COMMAND_TIMEOUT_S})
               for w in ORACLE_WIDTHS]
    return Script(name="oracle:scaling-law", turns=[
        ScriptTurn(tool="write_file", arguments={"path": "/workdir/experiment.py", "content": program}),
        *measure,
        ScriptTurn(tool="bash", arguments={"command": f"python3 /workdir/experiment.py fit {target_width}", "timeout": MAX_COMMAND_TIMEOUT_S}),
        ScriptTurn(tool="submit", arguments={}),
    ])


def make(seed: int, difficulty: int, params: dict[str, Any], workspace: Path) -> Task:
    level = LEVELS[difficulty]
    law = teacher.draw_law(seed)
    data, hidden = workspace / "data", workspace / "hidden"
    data.mkdir()
    hidden.mkdir()
    shutil.copyfile(HERE / "train.py", data / "train.py")
    lam, signal, beyond = teacher.spectrum(**law.model_dump())
    weights = teacher.teacher_weights(lam, signal, law.seed, level.max_width)
    np.save(data / "teacher.npy", np.stack([lam[:level.max_width], weights]), allow_pickle=False)
    shown = StudentInstance(max_width=level.max_width, signal_beyond_max_width=teacher.tail(signal, beyond, level.max_width),
                            batch=teacher.BATCH, learning_rate=teacher.LEARNING_RATE, stream_seed=teacher.stream_seed(seed))
    (data / "instance.json").write_text(shown.model_dump_json(indent=2) + "\n")
    true_loss = truth.converged_loss(law, level.target_width)
    (hidden / judge.TRUTH).write_text(judge.Truth(true_loss=true_loss, target_width=level.target_width).model_dump_json() + "\n")
    return Task(
        id=f"{FAMILY_ID}-s{seed}-d{difficulty}",
        description=f"Predict the converged loss at width {level.target_width} from small training runs (scaling-law extrapolation).",
        steps=[Step(instructions=instructions(level), submit=(judge.ANSWER,),
                    judge=FunctionJudge(fn=judge.grade, name="scaling_law_answer", timeout_s=10))],
        limits=limits(level),
        data=data,
        hidden=hidden,
        oracle=oracle_script(level.target_width),
        params={"target_width": level.target_width},
    )
