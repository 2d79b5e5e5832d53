"""`proctor judge-eval`: the injection corpus graded against the local stand-in, and against a
grader behind a real OpenAI-compatible endpoint and the Anthropic SDK (the stand-in served over
loopback HTTP by tests/fake_provider.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from examples.essay_review.judge_model import standin
from fake_provider import FakeProvider, Recorded, anthropic_reply, openai_reply
from proctor.cli import app

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples/essay_review/judge-eval.toml"
ENV = ROOT / "examples/essay_review"


def cli(*args: object):
    return CliRunner().invoke(app, ["judge-eval", *map(str, args)], catch_exceptions=False)


@pytest.mark.parametrize("detector", ["flag", "ignore"])
def test_the_stand_in_grader_is_bought_by_no_injection_and_costs_no_control_a_point(detector):
    result = cli(CONFIG, "--on-manipulation", detector, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["mode"] == "evidence" and len(report["items"]) >= 100
    assert all(c["injections_moved"] == 0 and c["controls_lost"] == 0 and c["infra_errors"] == 0 for c in report["categories"])
    control = next(c for c in report["categories"] if c["category"] == "control")
    assert control["flagged"] == 0


def test_a_judge_that_takes_the_models_own_score_fails_judge_eval():
    result = cli(CONFIG, "--mode", "holistic", "--json")
    assert result.exit_code == 1
    moved = {c["category"]: c["injections_moved"] for c in json.loads(result.output)["categories"]}
    assert moved["polite_request"] == 15 and moved["other_language"] == 24


def _texts(body: dict) -> tuple[str, str]:
    def text(content) -> str:
        return content if isinstance(content, str) else "".join(block.get("text", "") for block in content)
    if "system" in body:  # Anthropic Messages
        return text(body["system"]), text(body["messages"][-1]["content"])
    messages = body["messages"]
    return text(messages[0]["content"]), text(messages[-1]["content"])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_judge_eval_grades_through_a_real_provider_endpoint(tmp_path, monkeypatch, provider):
    model = standin()
    reply = openai_reply if provider == "openai" else anthropic_reply

    def grader(request: Recorded):
        return reply(text=model.complete(*_texts(request.body), 10))

    monkeypatch.setenv("GRADER_KEY", "sk-test-not-a-real-key")
    with FakeProvider([], respond=grader) as server:
        url = server.openai_url if provider == "openai" else server.anthropic_url
        config = tmp_path / "judge.toml"
        config.write_text(f'env = "{ENV}"\n[model]\nprovider = "{provider}"\nmodel = "grader"\nbase_url = "{url}"\napi_key_env = "GRADER_KEY"\n')
        result = cli(config, "--category", "polite_request", "--category", "other_language", "--category", "control", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["judge"] == f"RubricJudge({provider}:grader)" and len(report["items"]) == 15 + 24 + 21
    assert server.requests and not server.errors
    assert "sk-test" not in result.output


@pytest.mark.parametrize(("body", "message"), [
    ("env = 3", "env: Input should be a valid string"),
    ('env = "."\n[model]\nlocal = "nope.py:standin"', "must be 'file.py:function'"),
    ('env = "."\n[model]\nprovider = "openai"\nmodel = "m"\napi_key = "sk-1"', "literal key"),
    ('env = "."\ntask = "missing"', "not a task of"),
    ("env = [", "not valid TOML"),
])
def test_a_bad_config_is_one_clear_line(tmp_path, body, message):
    config = ENV / f".judge-eval-test-{tmp_path.name}.toml"
    config.write_text(body)
    try:
        result = CliRunner().invoke(app, ["judge-eval", str(config)])
    finally:
        config.unlink()
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_unknown_category_is_refused():
    result = CliRunner().invoke(app, ["judge-eval", str(CONFIG), "--category", "nope"])
    assert result.exit_code == 2 and "unknown nope" in result.output
