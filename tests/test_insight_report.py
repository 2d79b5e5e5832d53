"""`proctor report`: cells, verdicts, intervals and bad input, on runs of known outcomes."""

from __future__ import annotations

import json
import os

import pytest

from typer.testing import CliRunner

from insight_results import write_known_outcomes, write_run
from proctor.cli import app
from proctor.errors import ConfigError
from proctor.insight import Thresholds, build_report, wilson_interval
from proctor.insight.report import parse_by

# Wilson score intervals (95%, no continuity correction) as published by Newcombe, "Two-sided
# confidence intervals for the single proportion", Statistics in Medicine 17 (1998), table II,
# plus two computed by hand: 0/10 -> (0, z^2/(n+z^2)) and 5/10 (symmetric about 0.5).
REFERENCE = [
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (0, 10, 0.0, 0.2775),
    (5, 10, 0.2366, 0.7634),
]


@pytest.mark.parametrize(("passes", "n", "low", "high"), REFERENCE)
def test_the_wilson_interval_matches_published_values(passes, n, low, high):
    got = wilson_interval(passes, n)
    assert got == pytest.approx((low, high), abs=6e-5)


def test_the_wilson_interval_of_no_rollouts_is_everything_and_narrows_with_more():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    narrow, wide = wilson_interval(50, 100), wilson_interval(5, 10)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]
    assert wilson_interval(10, 10, confidence=0.99)[0] < wilson_interval(10, 10, confidence=0.9)[0]


def _by_count(report):
    return {c.params["count"]: c for c in report.cells}


def test_a_student_that_always_never_and_half_solves_gets_saturated_weak_and_frontier(tmp_path):
    write_known_outcomes(tmp_path)
    report = build_report([tmp_path])
    cells = _by_count(report)
    assert set(cells) == {3, 5, 8}
    assert (cells[3].verdict, cells[8].verdict, cells[5].verdict) == ("saturated", "weak", "frontier")
    assert (cells[3].pass_rate, cells[8].pass_rate, cells[5].pass_rate) == (1.0, 0.0, 0.5)
    assert cells[5].ci == pytest.approx(wilson_interval(5, 10))
    assert all(c.n == 10 and c.family == "sum" and c.difficulty == 1 for c in cells.values())
    assert report.results == report.scored == 30 and report.unreadable == 0 and report.students == ["script:mediocre"]


def test_the_thresholds_decide_the_verdicts_and_too_few_rollouts_say_nothing(tmp_path):
    write_known_outcomes(tmp_path, per_cell=4)
    assert {c.verdict for c in build_report([tmp_path]).cells} == {"too_few"}
    loose = Thresholds(min_n=4, weak_at_most=0.5, saturated_at_least=0.9)
    assert {c.params["count"]: c.verdict for c in build_report([tmp_path], thresholds=loose).cells} == {3: "saturated", 5: "weak", 8: "weak"}
    with pytest.raises(ValueError, match="must be below"):
        Thresholds(weak_at_most=0.8, saturated_at_least=0.5)


def test_a_partial_score_passes_only_at_the_pass_score(tmp_path):
    for _ in range(5):
        write_run(tmp_path, params={"count": 3}, score=0.7)
    assert build_report([tmp_path]).cells[0].pass_rate == 0.0
    cell = build_report([tmp_path], thresholds=Thresholds(pass_score=0.7)).cells[0]
    assert cell.pass_rate == 1.0 and cell.mean_score == pytest.approx(0.7)


def test_infra_errors_are_counted_apart_and_never_lower_the_pass_rate(tmp_path):
    for _ in range(5):
        write_run(tmp_path, params={"count": 3}, score=1.0)
        write_run(tmp_path, params={"count": 3}, status="infra_error", score=0.0)
    write_run(tmp_path, params={"count": 3}, status="abandoned", score=0.0)
    report = build_report([tmp_path])
    (cell,) = report.cells
    assert (cell.n, cell.pass_rate, cell.infra_errors, cell.verdict) == (5, 1.0, 6, "saturated")
    assert (report.results, report.scored, report.infra_errors) == (11, 5, 6)


def test_misbehaviour_is_a_rate_with_its_most_frequent_kinds_and_never_a_pass(tmp_path):
    write_run(tmp_path, params={"count": 3}, status="misbehaved", score=0.0, kinds=("submission_symlink",))
    write_run(tmp_path, params={"count": 3}, status="misbehaved", score=0.0, kinds=("submission_symlink", "processes_left_at_custody"))
    write_run(tmp_path, params={"count": 3}, status="misbehaved", score=0.0, kinds=("a", "b", "c"))
    write_run(tmp_path, params={"count": 3}, score=1.0, tokens=1000, tool_calls=4, wall_s=3.0)
    (cell,) = build_report([tmp_path]).cells
    assert cell.misbehaviour_rate == 0.75 and cell.passes == 1
    assert list(cell.misbehaviour_kinds.items())[0] == ("submission_symlink", 2) and len(cell.misbehaviour_kinds) == 3
    assert (cell.mean_tokens, cell.mean_tool_calls, cell.mean_wall_s) == (250, 1, 1.5)


def test_two_students_are_compared_cell_by_cell(tmp_path):
    write_known_outcomes(tmp_path / "a", agent="model:small")
    for _ in range(10):
        for count in (3, 5, 8):
            write_run(tmp_path / "b", params={"count": count}, agent="model:large", score=1.0)
    report = build_report([tmp_path / "a", tmp_path / "b"])
    assert report.students == ["model:large", "model:small"]
    verdicts = {(c.student, c.params["count"]): c.verdict for c in report.cells}
    assert verdicts[("model:large", 8)] == "saturated" and verdicts[("model:small", 8)] == "weak"
    pooled = build_report([tmp_path], by=parse_by("family,difficulty,params"))
    assert {c.params["count"]: c.n for c in pooled.cells} == {3: 20, 5: 20, 8: 20}
    assert all(c.student is None for c in pooled.cells)


def test_by_coarsens_the_cells_or_groups_by_any_recorded_parameter(tmp_path):
    write_known_outcomes(tmp_path)
    write_run(tmp_path, difficulty=2, params={"count": 3, "numbers": 6}, score=1.0)
    (family_only,) = build_report([tmp_path], by=("family",)).cells
    assert (family_only.n, family_only.difficulty, family_only.params, family_only.passes) == (31, None, {}, 16)
    by_difficulty = build_report([tmp_path], by=("difficulty",)).cells
    assert [(c.difficulty, c.n) for c in by_difficulty] == [(1, 30), (2, 1)]
    by_numbers = build_report([tmp_path], by=("numbers",)).cells
    assert sorted((c.params["numbers"] or 0, c.n) for c in by_numbers) == [(0, 30), (6, 1)]
    with pytest.raises(ConfigError, match="twice"):
        parse_by("family,family")


def test_unreadable_and_foreign_result_files_are_counted_and_named_not_fatal(tmp_path):
    write_known_outcomes(tmp_path, per_cell=5)
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "result.json").write_text('{"run_id": "x", "sta')
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "result.json").write_text(json.dumps({"accuracy": 0.9}))
    (tmp_path / "binary").mkdir()
    (tmp_path / "binary" / "result.json").write_bytes(b"\xff\xfe\x00garbage")
    for name in ("fifo", "huge", "link"):
        (tmp_path / name).mkdir()
    os.mkfifo(tmp_path / "fifo" / "result.json")  # reading it would block forever
    with open(tmp_path / "huge" / "result.json", "wb") as f:
        f.truncate(64 << 20)  # sparse: costs no disk
    (tmp_path / "link" / "result.json").symlink_to(next(tmp_path.glob("sum-*/result.json")))
    report = build_report([tmp_path])
    assert report.results == 15 and report.unreadable == 6
    reasons = {p.path.split("/")[-2]: p.reason for p in report.problems}
    assert reasons["torn"] == "not JSON" and reasons["binary"] == "not JSON"
    assert reasons["foreign"].startswith("not a Proctor result (run_id: Field required")
    assert (reasons["fifo"], reasons["huge"], reasons["link"]) == (
        "not a regular file", "larger than 16 MiB: not a result", "a symbolic link: not followed")


def test_a_missing_run_directory_is_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="no such run directory"):
        build_report([tmp_path / "nope"])


def test_proctor_report_prints_cells_as_json_and_a_table_naming_bad_files(tmp_path):
    write_known_outcomes(tmp_path)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "result.json").write_text("[]")
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert {(c["params"]["count"], c["verdict"]) for c in data["cells"]} == {(3, "saturated"), (5, "frontier"), (8, "weak")}
    assert {"family", "difficulty", "params", "n", "pass_rate", "mean_score", "ci", "misbehaviour_rate", "verdict"} <= set(data["cells"][0])
    assert data["unreadable"] == 1
    write_run(tmp_path, params={"count": "[/red] [bold"}, agent="script:[/]")
    res = runner.invoke(app, ["report", str(tmp_path), "--min-n", "20"], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "too_few" in res.output and "foreign/result.json" in res.output
    assert '"[/red] [bold"' in res.output and "script:[/]" in res.output  # markup in a result is text
    res = runner.invoke(app, ["report", str(tmp_path), "--weak-at-most", "0.9"])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "must be below" in res.output


def test_report_html_is_one_self_contained_page_with_the_plots_and_every_cell(tmp_path):
    write_known_outcomes(tmp_path / "runs")
    write_run(tmp_path / "runs", params={"count": "<script>alert(1)</script>"}, status="misbehaved", score=0.0, kinds=("submission_symlink",))
    page = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["report", str(tmp_path / "runs"), "--html", str(page)])
    assert res.exit_code == 0, res.output
    text = page.read_text()
    assert text.count("<svg") == 1 and "pass rate (Wilson interval)" in text and "misbehaviour rate" in text
    assert "<script" not in text and "&lt;script&gt;" in text
    assert "src=" not in text and "<link" not in text and 'href="http' not in text  # nothing fetched: it opens from disk
    assert text.split("<h2>Cheating")[0].count("<tr>") == 1 + 4  # the cells table; the cheating table follows


def test_report_html_of_a_curriculum_plots_its_rounds(tmp_path):
    from proctor.insight.curriculum import SUMMARY, Curriculum, Round

    write_known_outcomes(tmp_path / "round-01" / "runs", per_cell=2)
    rounds = [Round(round=i, instances=4, rejected=0, scored=4, passes=2, failure_share=share, misbehaviour_rate=0.0,
                    infra_errors=0, verdicts={}, directory=str(tmp_path)) for i, share in ((1, 0.5), (2, 0.75))]
    (tmp_path / SUMMARY).write_text(Curriculum(family="sum", agent="script:m", rounds=rounds).model_dump_json())
    res = CliRunner().invoke(app, ["report", str(tmp_path), "--html", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "r.html").read_text()
    assert text.count("<svg") == 2 and "Curriculum: sum with script:m" in text and "failure share" in text
    res = CliRunner().invoke(app, ["report", str(tmp_path), "--html", str(tmp_path / "no" / "r.html")])
    assert res.exit_code == 2 and "does not exist" in res.output
