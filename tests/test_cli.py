"""The command line end to end: run, tasks, check, new, demo, and the one-line errors a user gets
for malformed environments, scripts and options."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proctor.cli import app
from proctor.transcript import read_transcript

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "quarterly_revenue"
BASICS = Path(__file__).parent / "envs" / "basics"
PROCTOR = Path(sys.executable).parent / "proctor"


def cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def results_in(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*/result.json"))]


def test_run_with_the_oracle_scores_one_and_writes_the_result(confinement, tmp_path):
    got = cli("run", EXAMPLE, "--task", "q3-revenue", "--agent", "oracle", "--out", tmp_path, "--json")
    assert got.exit_code == 0, got.output
    [result] = results_in(tmp_path)
    assert (result["status"], result["score"], result["reward"]) == ("completed", 1.0, 1.0)
    assert json.loads(got.stdout)[0]["run_id"] == result["run_id"]


def test_run_with_a_script_file_replays_it(confinement, tmp_path):
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps({"name": "wrong", "turns": [
        {"tool": "write_file", "arguments": {"path": "/workdir/answer.txt", "content": "123\n"}},
        {"tool": "submit", "arguments": {}}]}))
    got = cli("run", EXAMPLE, "--task", "q3-revenue", "--agent", f"script:{path}", "--out", tmp_path / "out")
    assert got.exit_code == 0, got.output
    [result] = results_in(tmp_path / "out")
    assert result["score"] == 0.0 and result["agent"] == "script:wrong"


def test_run_n_rollouts_of_a_family_uses_consecutive_seeds(confinement, tmp_path):
    got = cli("run", BASICS, "--task", "sum", "--agent", "null", "--out", tmp_path, "-n", "3", "--seed", "5",
              "--param", "count=2", "-j", "2")
    assert got.exit_code == 0, got.output
    instances = sorted((r["instance"]["seed"], r["instance"]["params"]["count"]) for r in results_in(tmp_path))
    assert instances == [(5, 2), (6, 2), (7, 2)]


def test_tasks_lists_tasks_and_families(tmp_path):
    got = cli("tasks", BASICS, "--json")
    assert got.exit_code == 0
    rows = {row["id"]: row for row in json.loads(got.stdout)}
    assert rows["write-42"]["kind"] == "task" and rows["sum"]["kind"] == "family"
    assert rows["sum"]["difficulties"] == [1, 2]


def test_check_loads_every_task_and_builds_every_family(confinement):
    got = cli("check", BASICS, "--json")
    assert got.exit_code == 0, got.output
    checked = json.loads(got.stdout)["checked"]
    assert "family sum difficulty 2: builds task sum-0-2, deterministic" in checked
    assert any("surely-not-installed-pkg" in line and line.startswith("warning") for line in checked)


def test_new_scaffolds_an_environment_whose_own_tests_pass(confinement, tmp_path):
    env = tmp_path / "myenv"
    assert cli("new", env).exit_code == 0
    assert cli("check", env).exit_code == 0
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(env / "tests")],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "5 passed" in tests.stdout
    assert "already exists" in one_line_error(cli("new", env))


def test_demo_runs_the_oracle_a_wrong_answer_and_three_hacks_as_expected(confinement):
    got = cli("demo", "--json")
    assert got.exit_code == 0, got.output
    rows = {row["name"]: row for row in json.loads(got.stdout)}
    assert rows["oracle"]["score"] == 1.0 and not rows["oracle"]["misbehaviour"]
    assert rows["wrong-answer"]["score"] == 0.0 and not rows["wrong-answer"]["misbehaviour"]
    # Typing the key's host path is a probe too; the symlink is refused by custody.
    assert rows["symlink-to-key"]["misbehaviour"] == ["hidden_path_probe", "submission_symlink"]
    assert rows["fifo-answer"]["misbehaviour"] == ["submission_special_file"]
    assert rows["background-rewriter"]["misbehaviour"] == ["processes_left_at_custody"]
    assert all(row["as_expected"] and row["status"] != "infra_error" for row in rows.values())


# -- malformed input: one line naming the file and the field -----------------------------------------


def write_env(tmp_path: Path, source: str) -> Path:
    env = tmp_path / "badenv"
    env.mkdir()
    (env / "__init__.py").write_text(textwrap.dedent(source))
    return env


def test_a_task_without_steps_names_the_file_line_and_field(tmp_path):
    env = write_env(tmp_path, """\
        from proctor import Task
        TASKS = [
            Task(id="t"),
        ]
    """)
    error = one_line_error(cli("check", env))
    assert f"{env}/__init__.py:3" in error and "steps" in error and "Field required" in error


def test_a_bad_field_value_is_named(tmp_path):
    env = write_env(tmp_path, """\
        from proctor import ExactAnswer, Limits, SandboxLimits, Step, Task
        TASKS = [Task(id="t", limits=Limits(sandbox=SandboxLimits(memory_bytes=5)), steps=[Step(instructions="x", judge=ExactAnswer(path="a", expected="1"))])]
    """)
    error = one_line_error(cli("tasks", env))
    assert "memory_bytes" in error and "__init__.py:2" in error


@pytest.mark.parametrize(("old", "new"), [("memory_bytes", "memory_bytes"), ("disk_bytes", "workdir_bytes"), ("inodes", "workdir_inodes")])
def test_a_limit_under_its_old_name_says_where_it_moved_instead_of_being_dropped(tmp_path, old, new):
    env = write_env(tmp_path, f"""\
        from proctor import ExactAnswer, Limits, Step, Task
        TASKS = [Task(id="t", limits=Limits({old}=1 << 30), steps=[Step(instructions="x", judge=ExactAnswer(path="a", expected="1"))])]
    """)
    error = one_line_error(cli("check", env))
    assert f"Limits.{old} moved to Limits.sandbox.{new}" in error and "__init__.py:2" in error


def test_an_attacks_entry_that_is_not_an_attack_fails_the_check_in_one_line(tmp_path):
    env = write_env(tmp_path, """\
        from proctor import ExactAnswer, Step, Task
        TASKS = [Task(id="t", steps=[Step(instructions="x", judge=ExactAnswer(path="a", expected="1"))])]
        ATTACKS = ["read the key"]
    """)
    error = one_line_error(cli("check", env))
    assert "ATTACKS[0] is a str, not a proctor.redteam.Attack" in error and "__init__.py" in error


def test_a_syntax_error_in_an_environment_is_one_line(tmp_path):
    error = one_line_error(cli("check", write_env(tmp_path, "TASKS = [\n")))
    assert "__init__.py" in error and "syntax error" in error


def test_an_environment_without_tasks_says_what_it_must_define(tmp_path):
    assert "neither TASKS nor FAMILIES" in one_line_error(cli("check", write_env(tmp_path, "X = 1\n")))


def test_a_nondeterministic_family_fails_the_check(tmp_path):
    env = write_env(tmp_path, """\
        import random
        from proctor import ExactAnswer, Family, Step, Task
        def make(seed, difficulty, params, workspace):
            (workspace / "data").mkdir()
            (workspace / "data" / "x.txt").write_text(str(random.random()))
            return Task(id="t", data=workspace / "data", steps=[Step(instructions="x", judge=ExactAnswer(path="a", expected="1"))])
        FAMILIES = [Family(id="f", make=make)]
    """)
    assert "must be deterministic" in one_line_error(cli("check", env))


def test_a_crashing_family_names_its_line(tmp_path):
    env = write_env(tmp_path, """\
        from proctor import Family
        def make(seed, difficulty, params, workspace):
            return 1 / 0
        FAMILIES = [Family(id="f", make=make)]
    """)
    error = one_line_error(cli("check", env))
    assert "__init__.py:3" in error and "ZeroDivisionError" in error and "family 'f'" in error


@pytest.mark.parametrize("content, expected", [
    ("{not json", "not valid JSON"),
    ('{"name": "x", "turns": [{"tool": "bash", "text": "hi"}]}', "turns.0"),
    ('{"turns": []}', "name: Field required"),
    ('{"name": "x", "turns": [{"tool": "bash", "arguments": {}, "colour": 1}]}', "turns.0.colour"),
])
def test_a_malformed_script_file_names_the_file_and_field(tmp_path, content, expected):
    path = tmp_path / "agent.json"
    path.write_text(content)
    error = one_line_error(cli("run", EXAMPLE, "--task", "q3-revenue", "--agent", f"script:{path}", "--out", tmp_path / "o"))
    assert str(path) in error and expected in error
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


@pytest.mark.parametrize("args, expected", [
    (["--task", "nope", "--agent", "oracle"], "no task or family 'nope'; known: q3-revenue"),
    (["--task", "q3-revenue", "--agent", "robot"], "unknown agent 'robot'"),
    (["--task", "q3-revenue", "--agent", "script:/does/not/exist.json"], "/does/not/exist.json: cannot read"),
    (["--task", "q3-revenue", "--agent", "oracle", "--param", "x"], "--param 'x': use KEY=VALUE"),
])
def test_bad_run_options_give_one_line_errors(tmp_path, args, expected):
    assert expected in one_line_error(cli("run", EXAMPLE, *args, "--out", tmp_path))


def test_a_bad_family_parameter_or_difficulty_is_named(tmp_path):
    assert "unknown parameter(s) colour; known: count" in one_line_error(
        cli("run", BASICS, "--task", "sum", "--agent", "null", "--out", tmp_path, "--param", "colour=red"))
    assert "difficulty 9 is not one of [1, 2]" in one_line_error(
        cli("run", BASICS, "--task", "sum", "--agent", "null", "--out", tmp_path, "--difficulty", "9"))


def test_a_missing_environment_is_named(tmp_path):
    assert "no such environment" in one_line_error(cli("tasks", "no_such_env_module"))
    assert "no __init__.py" in one_line_error(cli("tasks", tmp_path))


# -- a harness killed mid-rollout -----------------------------------------------------------------


def test_a_harness_killed_mid_rollout_leaves_a_readable_transcript_and_its_sandbox_is_reclaimed(confinement, tmp_path):
    from proctor.sandbox.host import state_dir

    agent = tmp_path / "slow.json"
    agent.write_text(json.dumps({"name": "slow", "turns": [
        {"tool": "bash", "arguments": {"command": "echo started; sleep 60"}}, {"tool": "submit", "arguments": {}}]}))
    sandboxes = state_dir("sandboxes")
    before = set(os.listdir(sandboxes))
    proc = subprocess.Popen([str(PROCTOR), "run", str(EXAMPLE), "--task", "q3-revenue", "--agent", f"script:{agent}",
                             "--out", str(tmp_path / "out")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        transcript = None
        while time.monotonic() < deadline:
            found = list((tmp_path / "out").glob("*/transcript.jsonl"))
            if found and any(e["type"] == "model_turn" for e in read_transcript(found[0])):
                transcript = found[0]
                break
            time.sleep(0.05)
        assert transcript is not None, "the rollout never started"
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    events = read_transcript(transcript)
    assert [e["type"] for e in events][:3] == ["rollout_start", "step_start", "model_turn"]
    assert all(line.strip() for line in transcript.read_text().splitlines())
    assert not (transcript.parent / "result.json").exists()
    left = set(os.listdir(sandboxes)) - before
    assert left, "the killed harness's sandbox should still be there until reclaimed"
    # The next harness to start reclaims it: processes, mounts, cgroups, files.
    subprocess.run([str(PROCTOR), "run", str(EXAMPLE), "--task", "q3-revenue", "--agent", "null", "--out",
                    str(tmp_path / "again")], check=True, capture_output=True, timeout=60)
    assert not (set(os.listdir(sandboxes)) & left)


def test_an_environment_loaded_from_many_threads_at_once_is_whole(tmp_path):
    """A package is in sys.modules before its code has run: a second thread must not see it half made."""
    from concurrent.futures import ThreadPoolExecutor

    from proctor.tasks.loading import load_environment

    env = tmp_path / "slow_env"
    env.mkdir()
    (env / "__init__.py").write_text(
        "import time\nfrom proctor import Task, Step, ExactAnswer\ntime.sleep(0.3)\n"
        "TASKS = [Task(id='t', steps=[Step(instructions='x', submit=('a.txt',), judge=ExactAnswer(path='a.txt', expected='1'))])]\n")
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda _: load_environment(str(env)), range(4)))
    assert all(list(e.tasks) == ["t"] for e in loaded)


def test_check_reports_every_judge_whose_files_are_missing(tmp_path):
    env = write_env(tmp_path, """\
        from pathlib import Path
        from proctor import ExactAnswer, Step, Task
        from proctor.judges import AllOf, CommandJudge, TestSuiteJudge
        HERE = Path(__file__).resolve().parent
        (HERE / "hidden").mkdir(exist_ok=True)
        (HERE / "hidden" / "key.txt").write_text("1")
        judge = AllOf(judges=(ExactAnswer(path="a", expected_file="missing.txt"), ExactAnswer(path="a", expected_file="key.txt"),
                              TestSuiteJudge(tests="hidden_tests"), CommandJudge(script="grade.py")))
        TASKS = [Task(id="t", hidden=HERE / "hidden", steps=[Step(instructions="x", submit=("a",), judge=judge)])]
    """)
    error = one_line_error(cli("check", env))
    assert "task 't': judge files missing" in error and "expected_file 'missing.txt'" in error and "key.txt" not in error
    assert "tests 'hidden_tests'" in error and "grade.py does not exist" in error
    (env / "hidden" / "missing.txt").write_text("1")
    (env / "hidden_tests").mkdir()
    (env / "grade.py").write_text("")
    assert cli("check", env).exit_code == 0
