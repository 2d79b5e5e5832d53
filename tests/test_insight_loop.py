"""The validity gate and the curriculum: generate, gate, run, report, again."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from proctor.cli import app
from proctor.insight.cells import Thresholds
from proctor.insight.curriculum import read_curriculum, run_curriculum
from proctor.insight.generate import generate_instances
from proctor.insight.report import build_report
from proctor.insight.validate import validate
from proctor.runner import InstanceSpec
from insight_results import ENV, MEDIOCRE, env, mediocre  # noqa: F401 (fixtures)



def test_the_gate_rejects_a_wrong_oracle_and_a_judge_that_pays_the_null_student(env, tmp_path, fake_backend):
    specs = [InstanceSpec(family="flawed", seed=1, params={"flaw": flaw}) for flaw in ("none", "oracle", "judge")]
    checked = validate(env, specs, tmp_path / "gate", backend=fake_backend)
    assert [c.accepted for c in checked] == [True, False, False] and all(c.validated for c in checked)
    assert checked[1].reason.startswith("the oracle did not reach the maximum 1: completed, score 0")
    assert checked[2].reason.startswith("the null student did not stay at the floor 0: completed, score 1")
    assert len(list((tmp_path / "gate").glob("*/result.json"))) == 6


def test_generate_writes_only_what_the_gate_accepted_and_reports_the_rest(env, tmp_path, fake_backend):
    made = generate_instances(env, "flawed", [], n=6, seed=0, out=tmp_path / "i.jsonl", strategy="uniform", backend=fake_backend)
    assert made.validated and len(made.checked) == 6
    assert {s.params["flaw"] for s in made.written} == {"none"} and len(made.written) == 2
    assert sorted(c.instance.params["flaw"] for c in made.checked if not c.accepted) == ["judge", "judge", "oracle", "oracle"]
    assert [json.loads(line)["params"] for line in (tmp_path / "i.jsonl").read_text().splitlines()] == [{"flaw": "none"}] * 2


def test_a_curriculum_keeps_each_round_and_aims_the_second_at_what_the_first_failed(env, tmp_path, fake_backend, mediocre):
    out = tmp_path / "cur"
    result = run_curriculum(env, "sum", mediocre, out, rounds=2, per_round=4, thresholds=Thresholds(min_n=1), backend=fake_backend)
    first, second = result.rounds
    assert (first.scored, first.failure_share) == (4, 0.5)
    assert second.scored == 4 and second.failure_share > first.failure_share
    assert first.rejected == second.rejected == 0
    for r in (1, 2):
        assert {p.name for p in (out / f"round-0{r}").iterdir()} == {"instances.jsonl", "runs", "gate", "gate.json", "report.json"}
    assert read_curriculum(out) == result
    assert build_report([out]).students == ["script:mediocre"]  # a curriculum stands for its student's rollouts
    assert build_report([out / "round-01" / "gate"]).students == ["null", "oracle"]
    with pytest.raises(Exception, match="not empty"):
        run_curriculum(env, "sum", mediocre, out, rounds=1, per_round=1, backend=fake_backend)


def test_on_the_real_sandbox_a_mediocre_student_fails_more_in_round_two(confinement, tmp_path, mediocre):
    out = tmp_path / "cur"
    res = CliRunner().invoke(app, ["curriculum", ENV, "--family", "sum", "--agent", mediocre, "--rounds", "2", "--per-round", "4",
                                   "--out", str(out), "--min-n", "1", "-j", "2", "--json"])
    assert res.exit_code == 0, res.output
    first, second = json.loads(res.output)["rounds"]
    assert first["failure_share"] == 0.5 and second["failure_share"] > first["failure_share"]
    assert first["rejected"] == second["rejected"] == 0
    assert len(list(out.glob("round-0*/gate/*/result.json"))) == 16  # every instance gated: oracle and null
    report = json.loads(CliRunner().invoke(app, ["report", str(out), "--json"]).output)
    assert report["scored"] == 8 and report["students"] == ["script:mediocre"]


def test_on_the_real_sandbox_generate_gates_every_instance_and_names_the_rejected(confinement, tmp_path):
    out = tmp_path / "i.jsonl"
    res = CliRunner().invoke(app, ["generate", ENV, "--family", "flawed", "--strategy", "uniform", "-n", "3", "--out", str(out),
                                   "-j", "2", "--gate-out", str(tmp_path / "gate")], env={"COLUMNS": "250"})
    assert res.exit_code == 1, res.output
    assert "rejected seed" in res.output and "the oracle did not reach the maximum 1" in res.output
    assert "the null student did not stay at the floor 0" in res.output
    assert [json.loads(line)["params"] for line in out.read_text().splitlines()] == [{"flaw": "none"}]
