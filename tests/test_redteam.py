"""The red team: the library is large, documented and adapts to each task; against the shipped
example every attack stays at the floor and the detectable ones are flagged; and the suite has
teeth: deliberately weakened tasks (tests/envs/weakened) are each reported, with the CLI exiting 1.
The whole red team against every example in examples/ is tests/test_redteam_examples.py."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proctor.cli import app
from proctor.redteam import ATTACKS, Attack, applicable, run_redteam
from proctor.redteam.doc import attack_table
from proctor.tasks.loading import load_environment
from proctor.testing import rollout

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "quarterly_revenue"
ESSAY = ROOT / "examples" / "essay_review"
WEAKENED = ROOT / "tests" / "envs" / "weakened"
FAMILIES = {"answer_key", "tampering", "submission", "output", "resources", "escape", "network", "judge"}


# -- the library ------------------------------------------------------------------------------------


def test_the_library_holds_at_least_sixty_distinct_documented_attacks():
    ids = [a.id for a in ATTACKS]
    assert len(ids) >= 60 and len(set(ids)) == len(ids)
    assert {a.family for a in ATTACKS} == FAMILIES
    for a in ATTACKS:
        assert isinstance(a, Attack) and a.description and a.defence and "\n" not in a.description, a.id


def test_the_doc_lists_every_attack_and_misbehaviour_kind():
    doc = (ROOT / "docs" / "redteam.md").read_text()
    missing = [a.id for a in ATTACKS if f"| `{a.id}` |" not in doc]
    assert not missing, f"docs/redteam.md lacks {missing}; run `python -m proctor.redteam.doc docs/redteam.md`"
    assert attack_table() in doc, "the attack table in docs/redteam.md is stale; run `python -m proctor.redteam.doc docs/redteam.md`"
    kinds = {k for a in ATTACKS for k in a.flagged}
    vocabulary = (ROOT / "docs" / "misbehaviour.md").read_text()
    assert all(f"| `{k}` |" in vocabulary for k in kinds), sorted(k for k in kinds if f"| `{k}` |" not in vocabulary)


def test_attacks_adapt_to_the_task():
    task = load_environment(str(EXAMPLE)).tasks["q3-revenue"]
    scripts = {a.id: s for a, s in applicable(task)}
    key = str(task.hidden / "expected.txt")
    assert key in json.dumps(scripts["read-key-host-path"].model_dump())
    assert "/workdir/answer.txt" in json.dumps(scripts["fifo-answer"].model_dump())
    assert "-name expected.txt" in json.dumps(scripts["read-key-by-name"].model_dump())
    assert not any(i.startswith("judge-") for i in scripts), "no LLM judge in this task"
    assert "symlink-parent" not in scripts, "answer.txt has no parent directory to replace"
    essay = load_environment(str(ESSAY)).tasks["incident-summary"]
    judged = {a.id: s for a, s in applicable(essay)}
    verdict = judged["judge-fake-verdict"].turns[0]
    assert verdict.tool == "write_file" and verdict.arguments["path"] == "/workdir/summary.md"
    assert not any(i.startswith("key-") and i != "key-links-everywhere" for i in judged), "no exact answer to imitate"


def test_every_script_ends_with_a_submit_and_bounds_its_commands():
    for task in [load_environment(str(EXAMPLE)).tasks["q3-revenue"], load_environment(str(ESSAY)).tasks["incident-summary"]]:
        for attack, script in applicable(task):
            assert script.turns[-1].tool == "submit", attack.id
            for turn in script.turns:
                if turn.tool == "bash":
                    assert 0 < turn.arguments["timeout"] <= 20, attack.id


# -- against the shipped examples ----------------------------------------------------------------------


def test_every_attack_stays_at_the_floor_on_the_example_and_the_gate_passes(confinement):
    got = CliRunner().invoke(app, ["redteam", str(EXAMPLE), "--json", "-j", "2"], catch_exceptions=False)
    rows = json.loads(got.stdout)
    bad = [r for r in rows if not r["ok"]]
    assert got.exit_code == 0 and not bad, bad
    names = {r["attack"] for r in rows}
    expected = {a.id for a, _ in applicable(load_environment(str(EXAMPLE)).tasks["q3-revenue"])}
    assert {"oracle", "null", "degenerate"} <= names and expected <= names and len(expected) >= 60
    for r in rows:
        if r["expected_flags"]:
            assert set(r["expected_flags"]) & set(r["flagged"]), r
        assert r["judged_score"] == 0.0 or r["attack"] == "oracle", r


def test_the_penalty_shows_what_a_trainer_would_give(confinement):
    got = CliRunner().invoke(app, ["redteam", str(EXAMPLE), "--json", "--penalty", "0.5", "--attack", "fifo-answer",
                                   "--attack", "read-key-environment"], catch_exceptions=False)
    rows = {r["attack"]: r for r in json.loads(got.stdout)}
    assert got.exit_code == 0
    assert rows["fifo-answer"]["status"] == "misbehaved" and rows["fifo-answer"]["reward"] == -0.5
    assert rows["read-key-environment"]["status"] == "completed" and rows["read-key-environment"]["reward"] == 0.0


def test_a_penalty_out_of_range_is_a_one_line_error():
    got = CliRunner().invoke(app, ["redteam", str(EXAMPLE), "--penalty", "11"])
    assert got.exit_code == 2 and "Traceback" not in got.output


def test_the_llm_judged_example_zeroes_and_flags_every_judge_manipulation(confinement, tmp_path):
    assert (r := rollout(ESSAY, "incident-summary", "oracle", tmp_path)).score == 1.0 and r.status == "completed"
    rows = run_redteam(load_environment(str(ESSAY)), families=["judge"], out_dir=tmp_path, parallel=2)
    assert len(rows) >= 6
    for row in rows:
        assert row.ok and row.score == 0.0 and row.judged_score == 0.0 and "judge_manipulation" in row.flagged, row


# -- teeth: weakened tasks are reported ----------------------------------------------------------------

HOLES = [
    ("live-workdir", "key-links-everywhere", "the judges paid 1"),
    ("key-in-data", "read-key-data-dotfiles", "earned 1.0 above the floor"),
    ("trusts-score-file", "plant-score-files", "the judges paid 1"),
    ("gullible-llm-judge", "judge-fake-verdict", "not flagged (expected judge_manipulation)"),
]


@pytest.mark.parametrize("task, attack, problem", HOLES)
def test_a_weakened_task_is_reported_and_the_cli_exits_1(confinement, task, attack, problem):
    # One rollout at a time: live-workdir hands its judge the live path through module state.
    got = CliRunner().invoke(app, ["redteam", str(WEAKENED), "--json", "--task", task, "--attack", attack, "--attack", "fifo-answer"],
                             catch_exceptions=False)
    rows = {r["attack"]: r for r in json.loads(got.stdout)}
    assert got.exit_code == 1
    assert not rows[attack]["ok"] and problem in rows[attack]["problem"], rows[attack]
    if "fifo-answer" in rows:
        assert rows["fifo-answer"]["ok"], "custody still refuses a FIFO, whatever the judge"


@pytest.mark.parametrize("task", [t for t, _, _ in HOLES])
def test_each_weakened_task_is_otherwise_valid(confinement, tmp_path, task):
    assert rollout(WEAKENED, task, "oracle", tmp_path).score == 1.0
    assert rollout(WEAKENED, task, "null", tmp_path).score == 0.0


def test_a_task_that_pays_for_a_planted_answer_is_reported(confinement, tmp_path):
    env = tmp_path / "lax"
    env.mkdir()
    (env / "__init__.py").write_text(textwrap.dedent("""\
        from proctor import FunctionJudge, Step, Task
        # A judge that pays for any answer file at all: the degenerate agent and every attack that writes one win.
        TASKS = [Task(id="lax", steps=[Step(instructions="x", submit=("answer.txt",),
                      judge=FunctionJudge(fn=lambda ctx: 1.0 if (ctx.submission / "answer.txt").exists() else 0.0))])]
    """))
    got = CliRunner().invoke(app, ["redteam", str(env), "--json", "--task", "lax", "--family", "answer_key", "--family", "submission"],
                             catch_exceptions=False)
    assert got.exit_code == 1
    rows = {r["attack"]: r for r in json.loads(got.stdout)}
    assert not rows["read-key-environment"]["ok"] and "above the floor" in rows["read-key-environment"]["problem"]
    assert rows["fifo-answer"]["ok"]  # custody still refuses it, whatever the judge
    got = CliRunner().invoke(app, ["redteam", str(env), "--json", "--task", "lax", "--attack", "nan-answer"], catch_exceptions=False)
    assert got.exit_code == 1


def test_an_unknown_attack_is_a_one_line_error():
    got = CliRunner().invoke(app, ["redteam", str(EXAMPLE), "--attack", "nope"])
    assert got.exit_code == 2 and "unknown attack 'nope'" in got.stderr


# -- no silent passes ----------------------------------------------------------------------------------


def _no_oracle_env(tmp_path: Path) -> Path:
    env = tmp_path / "unproven"
    env.mkdir()
    (env / "__init__.py").write_text(textwrap.dedent("""\
        from proctor import ExactAnswer, Step, Task
        # Nobody can show this task is solvable: every attack stays at the floor, proving nothing.
        TASKS = [Task(id="unproven", steps=[Step(instructions="x", submit=("answer.txt",), judge=ExactAnswer(path="answer.txt", expected="7"))])]
    """))
    return env


def test_a_task_without_an_oracle_fails_the_gate_unless_allowed(confinement, tmp_path, monkeypatch):
    # Only the gate's own rows run here (the library's attacks are the other tests' business).
    monkeypatch.setattr("proctor.redteam.run.applicable", lambda task, own=(): [])
    env = _no_oracle_env(tmp_path)
    got = CliRunner().invoke(app, ["redteam", str(env), "--json"], catch_exceptions=False)
    rows = {r["attack"]: r for r in json.loads(got.stdout)}
    assert got.exit_code == 1 and not rows["oracle"]["ok"] and "has no oracle" in rows["oracle"]["problem"], rows
    assert rows["null"]["ok"] and rows["degenerate"]["ok"]
    got = CliRunner().invoke(app, ["redteam", str(env), "--allow-no-oracle"], catch_exceptions=False)
    assert got.exit_code == 0 and "no oracle, allowed by --allow-no-oracle" in " ".join(got.stdout.split()), got.stdout


@pytest.mark.parametrize("args, error", [
    (["--attack", "judge-fake-verdict"], "--attack judge-fake-verdict selected no attack for task(s) q3-revenue"),
    (["--family", "judge"], "--family judge selected no attack for task(s) q3-revenue"),
    (["--family", "nope"], "unknown attack family 'nope'"),
])
def test_a_filter_that_selects_no_attack_is_a_one_line_error(args, error):
    got = CliRunner().invoke(app, ["redteam", str(EXAMPLE), *args])
    lines = [line for line in got.stderr.splitlines() if line.strip()]
    assert got.exit_code == 2 and len(lines) == 1 and error in lines[0], got.output
