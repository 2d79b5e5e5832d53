"""Batches of rollouts: `proctor run --resume` finishes a batch whose harness died (each rollout once,
nothing half-written counted, nothing deleted), refuses a resume that is not the same batch, and the
progress bar of a long batch stays off --json output and counts infra errors.

What the resume decides is tested on the fake backend; the harness killed with SIGKILL mid-batch
runs the real CLI on the real sandbox."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from proctor import cli
from proctor.batches import batch_spec, open_batch
from proctor.errors import ConfigError
from proctor.harness import RolloutConfig
from proctor.progress import BatchProgress
from proctor.results import RolloutResult, Timings
from proctor.runner import run_many
from proctor.tasks.loading import load_environment
from proctor.tasks.models import Instance

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "quarterly_revenue"
BASICS = Path(__file__).parent / "envs" / "basics"


@pytest.fixture(scope="module")
def basics():
    return load_environment(str(BASICS))


@pytest.fixture
def batch(basics, fake_backend, tmp_path):
    """run_many on the fake backend: a family batch of `sum` with the null agent unless told otherwise."""
    def run(n=5, out=tmp_path / "out", **kwargs):
        kwargs = {"seed": 0, "agent_spec": "null", "ident": "sum", **kwargs}
        return run_many(basics, kwargs.pop("ident"), kwargs.pop("agent_spec"), out, n=n, backend=fake_backend, **kwargs)
    return run


def rollout_dirs(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith("."))


def snapshot(path: Path) -> tuple:
    st = path.stat()
    return path.read_bytes(), st.st_ino, st.st_mtime_ns


# -- what a resume keeps, moves aside and reruns (fake backend) ---------------------------------------


def test_a_resume_keeps_whole_results_and_reruns_the_half_written_the_unreadable_and_infra_errors(batch, tmp_path):
    out = tmp_path / "out"
    first = batch(n=5)
    ids = [r.run_id for r in first]
    other = batch(n=2, ident="write-42")  # another batch in the same OUT
    (out / other[1].run_id / "result.json").unlink()
    # Rollout 1: the harness died mid-rollout (a transcript, no result). Rollout 2: its result is
    # cut short. Rollout 3: an infra error (a trainer masks it, so the batch is not whole with it).
    (out / ids[1] / "result.json").unlink()
    whole = (out / ids[2] / "result.json").read_text()
    (out / ids[2] / "result.json").write_text(whole[: len(whole) // 2])
    data = json.loads((out / ids[3] / "result.json").read_text())
    (out / ids[3] / "result.json").write_text(json.dumps({**data, "status": "infra_error", "errors": ["provider: 503"]}))
    kept = {i: snapshot(out / ids[i] / "result.json") for i in (0, 4)}

    plans = []
    resumed = batch(n=5, resume=True, on_plan=plans.append)

    [plan] = plans
    assert plan.resumed and sorted(plan.finished) == [0, 4] and plan.todo == [1, 2, 3]
    assert [r.run_id for r in resumed] == ids, "each rollout keeps its run id"
    assert [r.instance.seed for r in resumed] == [0, 1, 2, 3, 4]
    assert all(r.status == "completed" for r in resumed)
    assert {i: snapshot(out / ids[i] / "result.json") for i in (0, 4)} == kept, "finished rollouts are not rerun"
    assert rollout_dirs(out) == sorted([*ids, *(r.run_id for r in other)]), "each run id once, the other batch untouched"
    assert not (out / other[1].run_id / "result.json").exists()
    # Nothing is deleted: what was replaced is under .superseded/, whole, with a line saying why.
    aside = out / ".superseded"
    assert sorted(p.name for p in aside.iterdir() if p.is_dir()) == ids[1:4]
    assert (aside / ids[1] / "transcript.jsonl").read_text().startswith('{"type": "rollout_start"')
    assert (aside / ids[2] / "result.json").read_text() == whole[: len(whole) // 2]
    log = [json.loads(line) for line in (aside / "log.jsonl").read_text().splitlines()]
    assert [(e["index"], e["kind"]) for e in log] == [
        (1, "without result.json"), (2, "with an unreadable result.json"), (3, "infra_error")]
    assert log[2]["detail"] == "provider: 503"
    assert plan.describe().endswith(f"moved 3 aside to {aside} (1 without result.json, 1 with an unreadable result.json, 1 infra_error)")


def test_a_rollout_superseded_twice_keeps_both_copies(batch, tmp_path):
    out = tmp_path / "out"
    [result] = batch(n=1)
    for _ in range(2):
        (out / result.run_id / "result.json").unlink()
        batch(n=1, resume=True)
    assert sorted(p.name for p in (out / ".superseded").iterdir()) == sorted([result.run_id, f"{result.run_id}.1", "log.jsonl"])
    assert (out / result.run_id / "result.json").exists()


def test_a_resume_of_a_finished_batch_runs_nothing(batch, tmp_path):
    first = batch(n=3)
    plans = []
    again = batch(n=3, resume=True, on_plan=plans.append)
    assert again == first and plans[0].todo == [] and "3 of 3 already finished, 0 to run" in plans[0].describe()


def test_the_same_batch_spelled_another_way_is_resumed(batch, fake_backend, tmp_path, monkeypatch):
    """A relative path for the environment, a family's default difficulty and parameter given
    explicitly: the same rollouts, so the same batch."""
    first = batch(n=2)
    (tmp_path / "out" / first[1].run_id / "result.json").unlink()
    monkeypatch.chdir(BASICS.parent)
    relative = load_environment(os.path.relpath(BASICS))
    plans = []
    again = run_many(relative, "sum", "null", tmp_path / "out", n=2, difficulty=1, params={"count": 5}, resume=True,
                     on_plan=plans.append, backend=fake_backend)
    assert plans[0].resumed and plans[0].todo == [1] and [r.run_id for r in again] == [r.run_id for r in first]


@pytest.mark.parametrize("change, named", [
    ({"seed": 3}, "--seed was 0, now 3"),
    ({"n": 4}, "-n was 5, now 4"),
    ({"params": {"count": 2}}, "--param count was 5, now 2"),
    ({"difficulty": 2}, "--difficulty was 1, now 2"),
    ({"agent_spec": "script:{tmp}/submit.json"}, "--agent was null, now script:{tmp}/submit.json"),
    ({"config": RolloutConfig(misbehaviour_penalty=1.0, runtime="gvisor")}, "--penalty was 0.0, now 1.0; --runtime was bwrap, now gvisor"),
])
def test_a_resume_with_other_arguments_is_refused_naming_the_difference(batch, tmp_path, change, named):
    out = tmp_path / "out"
    first = batch(n=5)
    (out / first[0].run_id / "result.json").unlink()
    (tmp_path / "submit.json").write_text(json.dumps({"name": "s", "turns": [{"tool": "submit", "arguments": {}}]}))
    change = {k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v for k, v in change.items()}
    named = named.replace("{tmp}", str(tmp_path))
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    with pytest.raises(ConfigError) as caught:
        batch(**{"n": 5, **change}, resume=True)
    message = str(caught.value)
    assert message.startswith(f"--resume: {out}'s batch ") and named in message, message
    assert "\n" not in message
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before, "a refused resume touches nothing"


def test_a_script_agent_whose_file_changed_is_another_batch(batch, tmp_path):
    script = tmp_path / "agent.json"
    script.write_text(json.dumps({"name": "a", "turns": [{"tool": "submit", "arguments": {}}]}))
    batch(n=2, agent_spec=f"script:{script}")
    script.write_text(json.dumps({"name": "a", "turns": [{"text": "done"}]}))
    with pytest.raises(ConfigError, match=f"the script file {script} has changed since the batch began"):
        batch(n=2, agent_spec=f"script:{script}", resume=True)


def test_a_batch_still_running_is_not_resumed(basics, batch, tmp_path):
    out = tmp_path / "out"
    spec = batch_spec(basics, "sum", "null", n=2, seed=0, difficulty=None, params=None, config=RolloutConfig(), model=None)
    with open_batch(out, spec) as running:
        with pytest.raises(ConfigError, match=f"batch {running.record.batch_id} in {out} is still running"):
            batch(n=2, resume=True)
    assert [r.status for r in batch(n=2, resume=True)] == ["completed", "completed"], "its lock dies with its holder"


def test_resume_on_an_out_without_a_batch_starts_one_but_not_over_unrecorded_results(batch, tmp_path):
    plans = []
    started = batch(n=2, out=tmp_path / "fresh", resume=True, on_plan=plans.append)
    assert not plans[0].resumed and len(started) == 2
    stray = tmp_path / "old" / "q3-revenue-20260101T000000-0badf00d"
    stray.mkdir(parents=True)
    (stray / "result.json").write_text("{}")
    with pytest.raises(ConfigError, match="holds results but no batch record"):
        batch(n=2, out=tmp_path / "old", resume=True)


def test_an_interrupted_parallel_batch_starts_no_more_rollouts_and_resume_runs_them(batch, tmp_path):
    """Ctrl-C reaches the main thread only: the rollouts running then finish, the queued ones never start."""
    seen = []

    def interrupt_after_two(result):
        seen.append(result)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        batch(n=12, parallel=2, on_result=interrupt_after_two)
    out = tmp_path / "out"
    started = rollout_dirs(out)
    assert len(started) < 6 and all((out / name / "result.json").exists() for name in started)
    resumed = batch(n=12, parallel=2, resume=True)
    assert [r.instance.seed for r in resumed] == list(range(12)) and set(started) <= {r.run_id for r in resumed}


# -- the harness killed mid-batch, for real --------------------------------------------------------

SLOW_SUM = {"name": "slow-sum", "turns": [
    {"tool": "bash", "arguments": {"command": (
        "sleep 0.4; awk -F, '$4==\"paid\" && $2>=\"2024-07-01\" && $2<=\"2024-09-30\" {s+=$3} END {print s}' "
        "/data/orders.csv > /workdir/answer.txt")}},
    {"tool": "submit", "arguments": {}}]}


def test_a_batch_killed_with_sigkill_is_finished_by_resume_with_each_rollout_once(confinement, tmp_path):
    agent = tmp_path / "slow.json"
    agent.write_text(json.dumps(SLOW_SUM))
    out, n = tmp_path / "out", 8
    args = [sys.executable, "-m", "proctor.cli", "run", str(EXAMPLE), "--task", "q3-revenue", "--agent", f"script:{agent}",
            "--out", str(out), "-n", str(n), "-j", "2"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            dirs = [p for p in out.glob("q3-revenue-*") if p.is_dir()] if out.is_dir() else []
            done = [p for p in dirs if (p / "result.json").exists()]
            if len(done) >= 3 and len(dirs) > len(done):  # some finished, some mid-rollout
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    finished_before = {p.name: (p / "result.json").read_bytes() for p in out.iterdir() if (p / "result.json").exists()}
    half_written = {p.name for p in out.glob("q3-revenue-*") if not (p / "result.json").exists()}
    assert 3 <= len(finished_before) < n and half_written, "the kill should land mid-batch, mid-rollout"

    resumed = subprocess.run([*args, "--resume", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert resumed.returncode == 0, resumed.stderr
    results = json.loads(resumed.stdout)  # pure JSON: the resume's line went to stderr
    assert f"{len(finished_before)} of {n} already finished, {n - len(finished_before)} to run" in resumed.stderr
    run_ids = [r["run_id"] for r in results]
    assert len(set(run_ids)) == n and sorted(run_ids) == rollout_dirs(out), "every rollout once, nothing else counted"
    assert [int(r.rsplit("-", 1)[1]) for r in run_ids] == list(range(n))
    assert [(r["status"], r["score"]) for r in results] == [("completed", 1.0)] * n
    assert {name: (out / name / "result.json").read_bytes() for name in finished_before} == finished_before
    assert {p.name for p in (out / ".superseded").iterdir() if p.is_dir()} == half_written
    # A second resume finds the batch whole: it runs nothing and says so.
    again = CliRunner().invoke(cli.app, [*args[3:], "--resume"], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert f"{n} of {n} already finished, 0 to run" in again.stdout
    assert f"{n} rollout(s): {n} completed ({n} finished before this resume, 0 run now)" in again.stdout


def test_a_resume_with_another_seed_is_a_one_line_cli_error(batch, tmp_path):
    batch(n=2)
    got = CliRunner().invoke(cli.app, ["run", str(BASICS), "--task", "sum", "--agent", "null", "--out", str(tmp_path / "out"),
                                       "-n", "2", "--seed", "3", "--resume"])
    assert got.exit_code == 2
    [line] = [line for line in got.stderr.splitlines() if line.strip()]
    assert line.startswith("error: --resume: ") and "--seed was 0, now 3" in line


# -- the progress bar ------------------------------------------------------------------------------


def _result(status: str) -> RolloutResult:
    return RolloutResult(run_id="r", task_id="t", instance=Instance(task_id="t"), agent="null", status=status, score=0.0,
                         judged_score=0.0, reward=0.0, timings=Timings(started_at="2026-01-01T00:00:00+00:00"))


def test_the_progress_bar_shows_done_of_total_rate_eta_and_infra_errors():
    terminal = Console(file=io.StringIO(), force_terminal=True, width=160)
    with BatchProgress(terminal, "sum x10", total=10, done=2) as bar:  # 2 finished before a resume
        for status in ("completed", "infra_error", "misbehaved", "infra_error"):
            bar.advance(_result(status))
            time.sleep(0.01)
        shown = Console(file=io.StringIO(), record=True, width=160)
        shown.print(bar.progress.get_renderable())
    line = shown.export_text()
    assert "sum x10" in line and "6/10" in line and "2 infra errors" in line and "eta" in line
    assert "/s" in line and "-/s" not in line, line


def test_the_progress_bar_draws_nothing_off_a_terminal():
    piped = io.StringIO()
    with BatchProgress(Console(file=piped), "sum x3", total=3) as bar:
        for _ in range(3):
            bar.advance(_result("completed"))
    assert piped.getvalue() == ""


def test_json_output_stays_pure_json_even_on_a_terminal(confinement, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "console", Console(force_terminal=True, width=160))
    args = ["run", str(EXAMPLE), "--task", "q3-revenue", "--agent", "oracle", "-n", "2"]
    drawn = CliRunner().invoke(cli.app, [*args, "--out", str(tmp_path / "a")], catch_exceptions=False)
    assert drawn.exit_code == 0 and "/2" in drawn.stdout and "infra errors" in drawn.stdout, "on a terminal the bar is drawn"
    quiet = CliRunner().invoke(cli.app, [*args, "--out", str(tmp_path / "b"), "--json"], catch_exceptions=False)
    assert quiet.exit_code == 0
    assert [r["status"] for r in json.loads(quiet.stdout)] == ["completed", "completed"]
