"""The red team against the shipped example: every attack at the floor, the detectable ones
flagged, the harness alive, and the validity gate (oracle at the maximum, null and degenerate
agents at the floor). And the suite can fail: a task whose judge pays for anything is caught."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from typer.testing import CliRunner

from proctor.cli import app
from proctor.redteam import ATTACKS

EXAMPLE = Path(__file__).parent.parent / "examples" / "quarterly_revenue"


def test_every_attack_stays_at_the_floor_on_the_example_and_the_gate_passes(confinement):
    got = CliRunner().invoke(app, ["redteam", str(EXAMPLE), "--json", "-j", "2"], catch_exceptions=False)
    rows = json.loads(got.stdout)
    bad = [r for r in rows if not r["ok"]]
    assert got.exit_code == 0 and not bad, bad
    names = {r["attack"] for r in rows}
    assert {"oracle", "null", "degenerate"} <= names and {a.id for a in ATTACKS} - {"symlink-parent"} <= names
    for r in rows:
        if r["expected_flags"]:
            assert set(r["expected_flags"]) & set(r["flagged"]), r


def test_a_task_that_pays_for_a_planted_answer_is_reported(confinement, tmp_path):
    env = tmp_path / "lax"
    env.mkdir()
    (env / "__init__.py").write_text(textwrap.dedent("""\
        from proctor import FunctionJudge, Step, Task
        # A judge that pays for any answer file at all: the degenerate agent and every attack that writes one win.
        TASKS = [Task(id="lax", steps=[Step(instructions="x", submit=("answer.txt",),
                      judge=FunctionJudge(fn=lambda ctx: 1.0 if (ctx.submission / "answer.txt").exists() else 0.0))])]
    """))
    got = CliRunner().invoke(app, ["redteam", str(env), "--json", "--task", "lax"], catch_exceptions=False)
    assert got.exit_code == 1
    rows = {r["attack"]: r for r in json.loads(got.stdout)}
    assert not rows["degenerate"]["ok"] and "above the floor" in rows["degenerate"]["problem"]
    assert not rows["read-key-environment"]["ok"]
    assert rows["fifo-answer"]["ok"]  # custody still refuses it, whatever the judge


def test_an_unknown_attack_is_a_one_line_error():
    got = CliRunner().invoke(app, ["redteam", str(EXAMPLE), "--attack", "nope"])
    assert got.exit_code == 2 and "unknown attack 'nope'" in got.stderr
