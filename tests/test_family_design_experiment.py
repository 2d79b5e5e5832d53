"""The `scaling-law` family (examples/design_experiment): predict a converged loss beyond the budget.

Rollouts run the real harness (sandbox, custody, judge); the judge's parser and the ground truth
are also checked directly, since they are harness code."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import import_module
from pathlib import Path

import pytest

from proctor import Script
from proctor.judges.base import JudgeContext, evaluate
from proctor.tasks.loading import check_environment, load_environment, new_workspace, remove_workspace
from proctor.tasks.models import ScriptTurn
from proctor.testing import assert_attack_contained, rollout

ROOT = Path(__file__).resolve().parents[1]
ENV = ROOT / "examples" / "design_experiment"
FAMILY = "scaling-law"
STUDENT_PYTHON = Path(os.environ.get("PROCTOR_STUDENT_RUNTIME", "/opt/proctor/student-runtime")) / "bin" / "python3"

loaded = load_environment(str(ENV))
env = loaded.module  # the env's submodules are imported below by the name the loader gave the package
family = import_module(f"{env.__name__}.family")
judge = import_module(f"{env.__name__}.judge")
teacher = import_module(f"{env.__name__}.teacher")
truth = import_module(f"{env.__name__}.truth")
train_tool = import_module(f"{env.__name__}.train_tool")
shortcut = import_module(f"{env.__name__}.shortcut")


def _build(seed: int, difficulty: int):
    workspace = new_workspace()
    return family.make(seed, difficulty, {}, workspace), workspace


def _rollouts(jobs, tmp_path):
    def one(job):
        seed, difficulty, agent = job
        return rollout(ENV, FAMILY, agent, tmp_path / f"{seed}-{difficulty}-{getattr(agent, 'name', agent)}",
                       seed=seed, difficulty=difficulty)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(one, jobs))


def _train(task, width: int, steps: int, seed: int = 0) -> str:
    """train.py run on the instance's hidden teacher, as the train tool runs it."""
    return subprocess.run([str(STUDENT_PYTHON), str(task.data / "train.py"), "--teacher-dir", str(task.hidden), "--width", str(width),
                           "--steps", str(steps), "--seed", str(seed)], capture_output=True, text=True, timeout=120, check=True).stdout


# -- the validity gate ------------------------------------------------------------------------------

def test_the_students_python_has_numpy_inside_the_sandbox(tmp_path):
    # Everything below needs it; this names the cause when the runtime is not reachable (e.g. a
    # parent directory of the runtime's mount point created 0700 inside the sandbox).
    probe = Script(name="probe", turns=[
        ScriptTurn(tool="bash", arguments={"command": "python3 -c 'import numpy; print(numpy.__version__)' > /workdir/answer.json 2>&1; "
                                                       "ls -ld /opt /opt/proctor >> /workdir/answer.json 2>&1"}),
        ScriptTurn(tool="submit", arguments={})])
    result = rollout(ENV, FAMILY, probe, tmp_path)
    assert result.status == "completed", result.errors
    copies = list(tmp_path.rglob("custody/step-0/answer.json"))
    text = copies[0].read_text() if copies else ""
    assert text.splitlines() and text.splitlines()[0].count(".") == 2, f"numpy is not importable in the sandbox: {text[:400]}"


def test_the_oracle_scores_at_least_0_9_on_three_seeds_at_two_difficulties(tmp_path):
    jobs = [(seed, difficulty, "oracle") for difficulty in (1, 2) for seed in (0, 1, 2)]
    results = _rollouts(jobs, tmp_path)
    for (seed, difficulty, _), result in zip(jobs, results):
        assert result.status == "completed", (seed, difficulty, result.errors, result.misbehaviour)
        assert result.score >= 0.9, (seed, difficulty, result.steps[0].explanation)
    seed0 = results[0]
    assert seed0.score == 1.0, seed0.steps[0].explanation  # the red-team gate asks for the maximum here


def test_the_null_agent_and_a_garbage_answer_score_zero(tmp_path):
    null = rollout(ENV, FAMILY, "null", tmp_path / "null")
    assert (null.status, null.score) == ("completed", 0.0)
    garbage = Script(name="garbage", turns=[
        ScriptTurn(tool="bash", arguments={"command": "printf 'garbage\\377\\0' > /workdir/answer.json"}),
        ScriptTurn(tool="submit", arguments={})])
    result = rollout(ENV, FAMILY, garbage, tmp_path / "garbage")
    assert (result.status, result.score) == ("completed", 0.0)
    assert "UTF-8" in result.steps[0].explanation


@pytest.mark.parametrize("attack", [a.id for a in env.ATTACKS])
def test_every_family_attack_scores_zero_and_is_flagged_where_detectable(attack, tmp_path):
    assert_attack_contained(ENV, FAMILY, attack, tmp_path)


# -- instances ----------------------------------------------------------------------------------------

def test_the_same_seed_rebuilds_the_same_instance_and_other_seeds_differ():
    lines = check_environment(loaded)  # proctor check: builds each difficulty twice and compares
    assert sum("deterministic" in line and "impossible" not in line for line in lines) == len(family.DIFFICULTIES)
    assert any(line.startswith("family scaling-law impossible variant") for line in lines)
    built = [_build(seed, 1) for seed in (0, 0, 1)]
    try:
        files = [{p.name: p.read_bytes() for d in ("data", "hidden") for p in (ws / d).iterdir()} for _, ws in built]
        assert files[0] == files[1]
        assert files[0]["teacher.npy"] != files[2]["teacher.npy"]
        assert files[0]["truth.json"] != files[2]["truth.json"]
        assert files[0]["train.py"] == files[2]["train.py"]  # the program is shared; the teacher is the instance
    finally:
        for _, ws in built:
            remove_workspace(ws)


def test_the_ground_truth_is_only_in_the_hidden_dir():
    task, workspace = _build(0, 1)
    try:
        true_loss = json.loads((task.hidden / judge.TRUTH).read_text())["true_loss"]
        shown = {p.name: p.read_bytes() for p in task.data.iterdir()}
        assert set(shown) == {"train.py", "instance.json"}  # the program, not its teacher
        for digits in (f"{true_loss:.6g}", f"{true_loss:.4e}", repr(true_loss)):
            assert not any(digits.encode() in blob for blob in shown.values())
        assert not any(struct.pack("<d", true_loss) in blob for blob in shown.values())  # nor as raw float64
        # No teacher and no law parameters: nothing in /data is a function of the teacher.
        assert set(json.loads(shown["instance.json"])) == {"max_width", "target_width", "batch", "learning_rate", "cpu_budget_s", "stream_seed"}
        assert {p.name for p in task.hidden.iterdir()} == {"teacher.npy", "train.json", "truth.json"}
        assert task.params["target_width"] > json.loads(shown["instance.json"])["max_width"]
    finally:
        remove_workspace(workspace)


def test_train_py_converges_to_the_harness_ground_truth(tmp_path):
    # The harness's closed form must be what the student's program actually does.
    task, workspace = _build(3, 1)
    try:
        law = teacher.draw_law(3)
        width, steps = 24, 6000
        out = _train(task, width, steps)
        measured = float(out.split("mean_loss_last_quarter=")[1])
        assert abs(math.log(measured / truth.converged_loss(law, width))) < 0.05, out
        assert truth.expected_loss_after(law, width, 20 * steps) == pytest.approx(truth.converged_loss(law, width), rel=1e-3)
        bad = subprocess.run([str(STUDENT_PYTHON), str(task.data / "train.py"), "--teacher-dir", str(task.hidden), "--width", "100000",
                              "--steps", "5"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("train.py: error: --width must be between 1 and 512")
        # The copy in /data has no teacher beside it: it says so, in one line.
        alone = subprocess.run([str(STUDENT_PYTHON), str(task.data / "train.py"), "--width", "8", "--steps", "5"],
                               capture_output=True, text=True, timeout=60)
        assert alone.returncode == 2 and "the instance's teacher is hidden" in alone.stderr.strip().splitlines()[-1]
    finally:
        remove_workspace(workspace)


def test_converging_the_widest_allowed_model_costs_more_than_the_whole_budget_at_difficulty_2_and_3():
    # Measured, not assumed: the CPU time of a train.py step at max_width, times the steps its
    # slowest feature needs to settle within 1% (exp(-2 lr lam_W S) <= 0.01), against every
    # CPU-second the task grants (cpus x step_time_s). At difficulty 1 it is affordable by design.
    for difficulty in (2, 3):
        task, workspace = _build(0, difficulty)
        try:
            width = json.loads((task.data / "instance.json").read_text())["max_width"]
            needed_steps = math.log(100) / (2 * teacher.LEARNING_RATE * width ** -teacher.draw_law(0).alpha)
            cost = needed_steps * _per_step(task, width)
            budget = task.limits.sandbox.cpus * task.limits.step_time_s
            assert cost > budget, (difficulty, cost, budget)
        finally:
            remove_workspace(workspace)


def _hidden_with_budget(tmp_path: Path, budget_s: float) -> Path:
    """A difficulty-1 instance's hidden dir with a small experiment budget (to keep the test short)."""
    task, workspace = _build(0, 1)
    try:
        hidden = tmp_path / "hidden"
        hidden.mkdir()
        for p in task.hidden.iterdir():
            hidden.joinpath(p.name).write_bytes(p.read_bytes())
        inputs = json.loads((hidden / train_tool.TRAIN_INPUTS).read_text())
        (hidden / train_tool.TRAIN_INPUTS).write_text(json.dumps(inputs | {"cpu_budget_s": budget_s}))
        return hidden
    finally:
        remove_workspace(workspace)


def test_the_train_tool_meters_cpu_time_and_refuses_once_the_budget_is_spent(sandbox, tmp_path):
    from proctor.tools import ToolCall, ToolContext, ToolConfig, call_tool

    tools = [train_tool.TrainTool()]
    with ToolContext(sandbox, ToolConfig(bash_max_timeout_s=20), hidden=_hidden_with_budget(tmp_path, 1.5)) as ctx:
        def train(**arguments):
            return call_tool(tools, ToolCall(name="train", arguments=arguments), ctx)

        ok = train(width=16, steps=2000, seed=3)
        assert ok.error is None and ok.output.startswith("width=16 steps=2000 seed=3 final_loss="), ok
        assert "CPU-seconds used in 1 run(s)" in ok.output
        logged = sandbox.run(["cat", "/workdir/train_runs.jsonl"], timeout=10)
        assert json.loads(logged.stdout)["width"] == 16 and logged.stdout.count(b"\n") == 1
        # The student's file: it owns it, it is no path the harness follows. A log it cannot
        # append to costs the note, not the run.
        assert sandbox.run(["sh", "-c", "rm /workdir/train_runs.jsonl && mkdir /workdir/train_runs.jsonl"], timeout=10).exit_code == 0
        unlogged = train(width=4, steps=100)
        assert unlogged.error is None and "[not appended to /workdir/train_runs.jsonl:" in unlogged.output, unlogged
        for bad, field in (({"width": 513, "steps": 10}, "between 1 and 512"), ({"width": 8, "steps": 0}, "steps"),
                           ({"width": 8, "steps": 10, "teacher_dir": "/"}, "teacher_dir"), ({"width": "8", "steps": 10}, "width")):
            refused = train(**bad)
            assert refused.error and field in refused.error and "\n" not in refused.error, (bad, refused)
        started = time.monotonic()
        stopped = train(width=512, steps=10_000_000)
        assert "run stopped: it used the rest of the budget" in stopped.error, stopped
        assert time.monotonic() - started < 10
        after = train(width=8, steps=10)
        assert after.error.startswith("train: refused: the experiment budget: 1.50 of 1.5 CPU-seconds used in 3 run(s)"), after


def test_a_train_call_stops_at_the_calls_wall_time_limit(sandbox, tmp_path):
    from proctor.tools import ToolCall, ToolContext, ToolConfig, call_tool

    with ToolContext(sandbox, ToolConfig(bash_max_timeout_s=1.0), hidden=_hidden_with_budget(tmp_path, 60)) as ctx:
        result = call_tool([train_tool.TrainTool()], ToolCall(name="train", arguments={"width": 512, "steps": 10_000_000}), ctx)
    assert result.timed_out and "run stopped after 1 s of wall time" in result.error, result


def test_an_honest_student_reading_train_py_and_naming_its_files_is_not_flagged(tmp_path):
    # /data/train.py names the hidden teacher.npy and train.json; a student that reads it, greps
    # for them or writes notes about them is studying the program, not probing for the teacher.
    honest = Script(name="honest-reader", turns=[
        ScriptTurn(tool="read_file", arguments={"path": "/data/train.py"}),
        ScriptTurn(tool="bash", arguments={"command": "grep -n 'teacher.npy\\|train.json' /data/train.py; "
                                                       "echo 'lam, w = np.load(\"teacher.npy\")  # see train.json' > /workdir/notes.py; "
                                                       "python3 /data/train.py --width 8 --steps 10 || true"}),
        ScriptTurn(tool="train", arguments={"width": 8, "steps": 200}),
        ScriptTurn(tool="write_file", arguments={"path": "/workdir/answer.json", "content": '{"predicted_loss": 0.01}'}),
        ScriptTurn(tool="submit", arguments={})])
    result = rollout(ENV, FAMILY, honest, tmp_path)
    assert result.status == "completed" and result.misbehaviour == [], result.misbehaviour


def test_the_train_tool_refuses_in_a_task_without_its_teacher(sandbox):
    from proctor.tools import ToolCall, ToolContext, call_tool

    with ToolContext(sandbox) as ctx:
        result = call_tool([train_tool.TrainTool()], ToolCall(name="train", arguments={"width": 8, "steps": 10}), ctx)
    assert "has no hidden teacher" in result.error


def _per_step(task, width: int) -> float:
    """CPU seconds per train.py step at `width`, from two run lengths (start-up cost cancels)."""
    times = []
    for steps in (50, 350):
        before = os.times().children_user + os.times().children_system
        _train(task, width, steps)
        times.append(os.times().children_user + os.times().children_system - before)
    return max(1e-9, (times[1] - times[0]) / 300)


# -- scoring --------------------------------------------------------------------------------------------

def test_a_harder_difficulty_lowers_the_score_of_a_fixed_mediocre_solution(tmp_path):
    def mediocre(target: int) -> Script:
        # Converged runs, but through the knee: the fit's slope is the wrong one, more so further out.
        return Script(name="mediocre", turns=[*family.experiment_turns((8, 16, 32, 64), (0,)), *family.fit_turns(target, "--fit-last", "4")])
    scores = {}
    for difficulty in (1, 3):
        task, workspace = _build(1, difficulty)
        remove_workspace(workspace)
        result = rollout(ENV, FAMILY, mediocre(task.params["target_width"]), tmp_path / str(difficulty), seed=1, difficulty=difficulty)
        assert result.status == "completed", result.errors
        scores[difficulty] = result.score
    assert scores[1] > scores[3], scores
    assert scores[1] > 0.0, scores


def test_each_difficulty_shows_whole_blocks_of_independently_salted_features():
    # A block straddling max_width would draw shown and hidden features from one stream.
    assert all(level.max_width in teacher.BLOCK_ENDS for level in family.LEVELS.values())
    assert teacher.BLOCK_ENDS[-1] == teacher.MODES


def _prefix_analysis(teacher_dir: Path, tmp_path: Path) -> float:
    """The scaling-analyse-teacher attack's program, run outside the sandbox on the hidden teacher."""
    attacks = import_module(f"{env.__name__}.attacks")
    out = tmp_path / "answer.json"
    subprocess.run([str(STUDENT_PYTHON), "-c", attacks.PREFIX_ANALYSIS, str(out), str(teacher_dir)],
                   capture_output=True, timeout=120, check=True)
    return json.loads(out.read_text())["predicted_loss"]


def test_without_experiments_the_best_analytic_guess_scores_clearly_below_the_oracle(tmp_path):
    """Issue 21: the task must need its experiments. With the teacher in /data, analysing it
    answered every difficulty better than the oracle's experiments (kept below as the control: on
    the hidden teacher it still does). With the teacher hidden, the best guess from what the
    student sees (the public prior over laws, /data/instance.json) averages about 0.1 against the
    oracle's 1 (test_the_oracle_scores_...). In the sandbox the same analysis finds no teacher
    (attack scaling-analyse-teacher)."""
    seeds = range(24)
    for difficulty in family.DIFFICULTIES:
        level = family.LEVELS[difficulty]
        guess = shortcut.prior_median(level.target_width)
        scores = [judge.score_for(guess, truth.converged_loss(teacher.draw_law(seed), level.target_width)) for seed in seeds]
        assert sum(scores) / len(scores) < 0.25, (difficulty, scores)
    for difficulty in family.DIFFICULTIES:
        task, workspace = _build(0, difficulty)
        try:
            assert not (task.data / "teacher.npy").exists() and "signal" not in (task.data / "instance.json").read_text()
            true_loss = json.loads((task.hidden / judge.TRUTH).read_text())["true_loss"]
            control = _prefix_analysis(task.hidden, tmp_path)
        finally:
            remove_workspace(workspace)
        assert judge.score_for(control, true_loss) == 1.0, difficulty  # what hiding the teacher takes away


def test_a_constant_guess_scores_low_across_seeds():
    truths, deep = [], []
    for seed in range(40):
        law = teacher.draw_law(seed)
        truths.append(truth.converged_loss(law, family.LEVELS[1].target_width))
        deep.append(truth.converged_loss(law, family.LEVELS[3].target_width))
    attacks = import_module(f"{env.__name__}.attacks")
    for guess in (attacks.GEOMETRIC_MIDPOINT, attacks.ARITHMETIC_MIDPOINT):
        assert max(judge.score_for(guess, t) for t in truths + deep) == 0.0
    # Even the best constant in hindsight (the median truth) earns little on average.
    best = sorted(truths)[len(truths) // 2]
    mean = sum(judge.score_for(best, t) for t in truths) / len(truths)
    assert mean < 0.3, mean
    assert max(truths) / min(truths) > 100


def test_the_score_curve_is_the_documented_one():
    assert judge.score_for(1.0, 1.0) == 1.0
    assert judge.score_for(math.exp(0.1), 1.0) == 1.0
    assert judge.score_for(math.exp(-0.1), 1.0) == 1.0
    assert judge.score_for(2.5, 1.0) == 0.0
    assert judge.score_for(1 / 2.5, 1.0) == 0.0
    middle = math.exp((0.1 + math.log(2.5)) / 2)
    assert judge.score_for(middle, 1.0) == pytest.approx(0.5)


# -- the answer parser (harness code: checked directly, then through the sandbox by the attacks) -----

GOOD = b'{"predicted_loss": 0.0123}'


@pytest.mark.parametrize("raw, kind", [
    (b'{"predicted_loss": NaN}', "answer_non_finite"),
    (b'{"predicted_loss": Infinity}', "answer_non_finite"),
    (b'{"predicted_loss": -Infinity}', "answer_non_finite"),
    (b'{"predicted_loss": 1e999}', "answer_non_finite"),
    (b'{"predicted_loss": -1e400}', "answer_non_finite"),
    (b'{"predicted_loss": 1' + b"0" * 400 + b"}", "answer_non_finite"),
    (b'{"predicted_loss": 1' + b"0" * 5000 + b"}", "answer_non_finite"),
])
def test_non_finite_answers_are_refused_and_flagged(raw, kind):
    with pytest.raises(judge.AnswerRefused) as refused:
        judge.parse_answer(raw)
    assert refused.value.misbehaviour == kind


@pytest.mark.parametrize("raw", [
    b"", b"   ", b"0.01", b"[0.01]", b'"0.01"', b"null", b"true",
    b'{"predicted_loss": "0.01"}', b'{"predicted_loss": true}', b'{"predicted_loss": null}',
    b'{"predicted_loss": [0.01]}', b'{"predicted_loss": {"value": 0.01}}',
    b'{"predicted_loss": 0.01, "extra": 1}', b'{"predicted_loss": 0.01, "predicted_loss": 0.02}',
    b'{"Predicted_Loss": 0.01}', b'{"predicted_loss": 0}', b'{"predicted_loss": -0.01}', b'{"predicted_loss": 2e10}',
    b'{"predicted_loss": 1e-10}', b'{"predicted_loss": 0x10}', b'{"predicted_loss": .5}', b'{"predicted_loss": 0.01',
    b'{"predicted_loss": 1' + b"0" * 300 + b"}",
    b"[" * 100_000 + b"]" * 100_000, b'\xff\xfe{"predicted_loss": 0.01}', b'{"predicted_loss": 0.01}\x00',
])
def test_malformed_answers_are_refused_with_a_reason(raw):
    with pytest.raises(judge.AnswerRefused) as refused:
        judge.parse_answer(raw)
    assert refused.value.misbehaviour is None
    assert str(refused.value) and "\n" not in str(refused.value)


def test_a_well_formed_answer_parses_with_surrounding_whitespace():
    assert judge.parse_answer(b"\n  " + GOOD + b"\n") == 0.0123
    assert judge.parse_answer(b'{"predicted_loss": 3}') == 3.0


def _grade(tmp_path: Path, make_answer) -> "judge.Verdict":
    task, workspace = _build(0, 1)
    try:
        sub = tmp_path / "sub"
        sub.mkdir(parents=True)
        make_answer(sub / judge.ANSWER)
        return evaluate(task.steps[0].judge, JudgeContext(submission=sub, hidden=task.hidden))
    finally:
        remove_workspace(workspace)


def test_the_judge_never_follows_a_symlink_or_opens_a_fifo(tmp_path):
    (tmp_path / "elsewhere.json").write_bytes(GOOD)
    linked = _grade(tmp_path / "a", lambda p: p.symlink_to(tmp_path / "elsewhere.json"))
    assert linked.score == 0.0 and "cannot be opened" in linked.explanation
    fifo = _grade(tmp_path / "b", lambda p: os.mkfifo(p))
    assert fifo.score == 0.0 and "not a regular file" in fifo.explanation


def test_an_oversized_answer_is_refused_and_flagged_only_when_clearly_padded(tmp_path):
    padded = _grade(tmp_path / "a", lambda p: p.write_bytes(b" " * (1 << 20) + GOOD))
    assert padded.score == 0.0 and [m.kind for m in padded.misbehaviour] == ["answer_too_large"]
    long = _grade(tmp_path / "b", lambda p: p.write_bytes(b" " * 8000 + GOOD))
    assert long.score == 0.0 and not long.misbehaviour


def test_a_missing_key_file_is_an_infra_error_not_the_students_fault(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / judge.ANSWER).write_bytes(GOOD)
    task, workspace = _build(0, 1)
    remove_workspace(workspace)
    verdict = evaluate(task.steps[0].judge, JudgeContext(submission=sub, hidden=Path(tempfile.mkdtemp())))
    assert verdict.infra_error and verdict.score == 0.0 and "truth.json" in verdict.explanation
