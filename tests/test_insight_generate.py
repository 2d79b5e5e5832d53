"""`proctor generate` and `proctor run --instances`: instances aimed by a report, read back safely."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from insight_results import write_run
from proctor.cli import app
from proctor.errors import ConfigError
from proctor.insight.generate import plan, points, report_by
from proctor.insight.instances import read_instances, write_instances
from proctor.insight.report import build_report
from proctor.insight.cells import Thresholds
from proctor.runner import InstanceSpec, run_instances
from proctor.tasks import load_environment
from insight_results import ENV, MEDIOCRE, env, mediocre  # noqa: F401 (fixtures)



def _known_runs(out: Path) -> None:
    """difficulty 1: count 2 always solved, count 8 never; difficulty 2: count 2 half the time,
    count 8 never."""
    for i in range(6):
        write_run(out, difficulty=1, params={"count": 2}, seed=i, score=1.0)
        write_run(out, difficulty=1, params={"count": 8}, seed=100 + i, score=0.0)
        write_run(out, difficulty=2, params={"count": 2}, seed=200 + i, score=float(i % 2))
        write_run(out, difficulty=2, params={"count": 8}, seed=300 + i, score=0.0)


def _plan(env, runs: Path, thresholds: Thresholds | None = None, **kw):
    family = env.families["sum"]
    runs.mkdir(exist_ok=True)
    return plan(family, build_report([runs], by=report_by(family), family="sum", thresholds=thresholds), **kw)


def _where(instances) -> Counter:
    return Counter((s.difficulty, s.params["count"]) for s in instances)


def test_the_space_comes_from_the_family_declaration(env):
    assert points(env.families["sum"]) == [(1, {"count": 2}), (1, {"count": 8}), (2, {"count": 2}), (2, {"count": 8})]
    assert points(env.families["flawed"]) == [(1, {"flaw": "none"}), (1, {"flaw": "oracle"}), (1, {"flaw": "judge"})]


def test_a_family_declares_only_parameters_it_can_set_each_value_once(env):
    from pydantic import ValidationError

    from proctor import Family
    from proctor.tasks import ParamSpace

    make = env.families["sum"].make
    with pytest.raises(ValidationError, match="declared parameter\\(s\\) size missing from default_params"):
        Family(id="f", make=make, params=(ParamSpace(name="size", values=(1, 2)),))
    with pytest.raises(ValidationError, match="listed twice"):
        ParamSpace(name="size", values=(1, 1))
    listed = json.loads(CliRunner().invoke(app, ["tasks", ENV, "--json"]).output)
    assert {row["id"]: row["varies"] for row in listed} == {"sum": {"count": [2, 8]}, "flawed": {"flaw": ["none", "oracle", "judge"]}}


def test_generated_instances_land_on_unsolved_cells_and_step_the_saturated_one_up(env, tmp_path):
    _known_runs(tmp_path)
    made = _plan(env, tmp_path, n=12, seed=7)
    verdicts = {(t.difficulty, t.params["count"]): t.verdict for t in made.targets}
    assert verdicts == {(1, 2): "saturated", (1, 8): "weak", (2, 2): "frontier", (2, 8): "weak"}
    where = _where(made.instances)
    assert where[(1, 2)] == 0  # saturated: none there...
    assert where[(1, 8)] == 5 and where[(2, 2)] == 5 and where[(2, 8)] == 2
    whys = {(t.difficulty, t.params["count"]): t.why for t in made.targets}
    assert "stepped up from saturated difficulty 1" in whys[(2, 2)]  # ...its difficulty stepped up instead
    assert "stepped down from never-passed difficulty 2" in whys[(1, 8)]
    assert all(s.seed > 305 for s in made.instances) and len({s.seed for s in made.instances}) == 12
    assert sum(1 for s in made.instances if s.difficulty == 2 and s.params["count"] == 8) == 2
    assert not made.notes


def test_the_same_seed_and_runs_give_the_same_instances_and_another_seed_other_seeds(env, tmp_path):
    _known_runs(tmp_path)
    first, again, other = (_plan(env, tmp_path, n=9, seed=s) for s in (1, 1, 2))
    assert first.instances == again.instances
    assert _where(first.instances) == _where(other.instances)
    assert {s.seed for s in first.instances} != {s.seed for s in other.instances}


def test_uniform_and_no_runs_spread_evenly_and_a_saturated_top_is_said(env, tmp_path):
    _known_runs(tmp_path)
    assert set(_where(_plan(env, tmp_path, n=8, seed=0, strategy="uniform").instances).values()) == {2}
    fresh = _plan(env, tmp_path / "none", n=4, seed=0)
    assert _where(fresh.instances) == Counter({(1, 2): 1, (1, 8): 1, (2, 2): 1, (2, 8): 1})
    for i in range(6):
        write_run(tmp_path / "top", difficulty=2, params={"count": 2}, seed=i, score=1.0)
    topped = _plan(env, tmp_path / "top", n=3, seed=0)
    assert _where(topped.instances)[(2, 2)] == 0
    assert topped.notes == ["difficulty 2 count=2 is saturated at the hardest difficulty: nothing harder to step up to"]


def test_an_instances_file_round_trips_and_bad_lines_name_their_number(env, tmp_path):
    specs = [InstanceSpec(family="sum", seed=3, difficulty=2, params={"count": 8}, why="weak")]
    path = write_instances(specs, tmp_path / "i.jsonl")
    assert read_instances(path, env) == specs
    cases = {
        '{"family": "sum", "seed": 1}\n{"family": "sum", "seed": \n': r"i\.jsonl:2: not JSON",
        '{"family": "sum", "seed": 1}\n\n{"family": "sum"}\n': r"i\.jsonl:3: seed: Field required",
        '{"family": "sum", "seed": 1, "colour": "red"}\n': r"i\.jsonl:1: colour: Extra inputs",
        '{"family": "nope", "seed": 1}\n': r"i\.jsonl:1: unknown family 'nope'; known: flawed, sum",
        '{"family": "sum", "seed": 1, "params": {"size": 3}}\n': r"i\.jsonl:1: family 'sum': unknown parameter 'size'",
        '{"family": "sum", "seed": 1, "params": {"count": 5}}\n': r"i\.jsonl:1: family 'sum': parameter 'count' is 5, not one of \[2, 8\]",
        '{"family": "sum", "seed": 1, "difficulty": 9}\n': r"i\.jsonl:1: family 'sum': difficulty 9 is not one of \[1, 2\]",
        "": r"no instances",
    }
    for text, error in cases.items():
        path.write_text(text)
        with pytest.raises(ConfigError, match=error):
            read_instances(path, env)


def test_run_instances_runs_exactly_those_instances_in_order(env, tmp_path, fake_backend, mediocre):
    specs = [InstanceSpec(family="sum", seed=s, difficulty=d, params={"count": c})
             for s, d, c in ((11, 1, 2), (12, 1, 8), (13, 2, 2), (14, 2, 8))]
    results = run_instances(env, specs, mediocre, tmp_path / "out", parallel=2, backend=fake_backend)
    assert [(r.instance.seed, r.instance.difficulty, r.instance.params["count"]) for r in results] == \
        [(11, 1, 2), (12, 1, 8), (13, 2, 2), (14, 2, 8)]
    assert [r.score for r in results] == [1.0, 0.0, 1.0, 0.0]
    assert all(r.instance.varied == ("count",) for r in results)
    cells = {(c.difficulty, c.params["count"]): c.pass_rate for c in build_report([tmp_path / "out"]).cells}
    assert cells == {(1, 2): 1.0, (1, 8): 0.0, (2, 2): 1.0, (2, 8): 0.0}


def test_a_mediocre_student_fails_more_of_the_instances_aimed_at_it(env, tmp_path, fake_backend, mediocre):
    round1 = _plan(env, tmp_path / "nothing-yet", n=8, seed=0)
    first = run_instances(env, round1.instances, mediocre, tmp_path / "r1", parallel=2, backend=fake_backend)
    round2 = _plan(env, tmp_path / "r1", n=8, seed=1, thresholds=Thresholds(min_n=2))
    second = run_instances(env, round2.instances, mediocre, tmp_path / "r2", parallel=2, backend=fake_backend)
    fail = lambda rs: sum(r.score < 1 for r in rs) / len(rs)  # noqa: E731
    assert fail(first) == 0.5 and fail(second) > 0.7


def test_proctor_run_refuses_a_bad_instances_file_in_one_line_and_runs_nothing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"family": "sum", "seed": 1}\n{"family": "sum", "seed": 2, "params": {"size": 1}}\n')
    res = CliRunner().invoke(app, ["run", ENV, "--instances", str(bad), "--agent", "null", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "bad.jsonl:2: family 'sum': unknown parameter 'size'" in res.output
    assert not (tmp_path / "out").exists()
    res = CliRunner().invoke(app, ["run", ENV, "--instances", str(bad), "--task", "sum", "--agent", "null", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "either --task or --instances" in res.output


def test_proctor_generate_writes_the_planned_instances_and_names_an_unknown_family(tmp_path):
    _known_runs(tmp_path / "runs")
    out = tmp_path / "next.jsonl"
    args = ["generate", ENV, "--family", "sum", "--from", str(tmp_path / "runs"), "-n", "12", "--seed", "7", "--out", str(out), "--no-validate"]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 12 and set(lines[0]) == {"family", "seed", "difficulty", "params", "why"}
    assert json.loads(res.output)["validated"] is False
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "stepped up from saturated difficulty 1" in res.output
    res = CliRunner().invoke(app, ["generate", ENV, "--family", "nope", "-n", "1", "--out", str(out)])
    assert res.exit_code == 2 and res.output.strip() == f"error: {ENV}: unknown family 'nope'; known: flawed, sum"


def test_a_shipped_family_is_aimed_by_its_own_declaration(tmp_path):
    """fast-kernel declares `kernel`; nothing in insight knows it. A student that masters softmax at
    every difficulty and never manages conv1d gets conv1d instances first, no softmax (there is
    nothing harder to step up to), and a look at the kernels it never ran."""
    kernels = load_environment(str(Path(__file__).parents[1] / "examples" / "fast_kernels"))
    family = kernels.families["fast-kernel"]
    for difficulty in family.difficulties:
        for i in range(5):
            write_run(tmp_path, family="fast-kernel", difficulty=difficulty, params={"kernel": "softmax"}, varied=("kernel",), score=1.0)
            write_run(tmp_path, family="fast-kernel", difficulty=difficulty, params={"kernel": "conv1d"}, varied=("kernel",), score=0.0)
    made = plan(family, build_report([tmp_path], by=report_by(family), family="fast-kernel"), n=20, seed=0)
    by_kernel = Counter(s.params["kernel"] for s in made.instances)
    assert by_kernel["softmax"] == 0 and by_kernel["conv1d"] > by_kernel["layer_norm"] == by_kernel["linear_scan"] > 0
    assert made.notes == [f"difficulty {max(family.difficulties)} kernel='softmax' is saturated at the hardest difficulty: nothing harder to step up to"]
    path = write_instances(made.instances, tmp_path / "k.jsonl")
    assert read_instances(path, kernels) == made.instances
