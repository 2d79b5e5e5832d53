"""The fast_kernels family: the oracle is fast and right, nothing else scores, every attack of its
own is contained (and flagged where the judge can tell), instances are reproducible, and a harder
difficulty asks more of the same mediocre kernel. Every rollout runs the real sandboxes."""

from __future__ import annotations

import hashlib
import json

import pytest

from proctor import Script
from proctor.judges.student_code import StudentCall
from proctor.redteam.run import _garbage
from proctor.tasks.loading import build_instance, load_environment, new_workspace, remove_workspace, resolved
from proctor.tasks.models import ScriptTurn
from proctor.testing import assert_attack_contained, rollout

ENV = "examples/fast_kernels"
FAMILY = "fast-kernel"

MEDIOCRE_SOFTMAX = """import numpy as np


def softmax(x, temperature):
    out = np.empty_like(x)
    for i in range(x.shape[0]):          # vectorised within a row, a Python loop over rows
        row = x[i] / temperature
        e = np.exp(row - row.max())
        out[i] = e / e.sum()
    return out
"""


def _submit(source: str, name: str = "custom") -> Script:
    return Script(name=name, turns=[ScriptTurn(tool="write_file", arguments={"path": "/workdir/kernel.py", "content": source}),
                                    ScriptTurn(tool="submit", arguments={})])


@pytest.mark.parametrize("difficulty", [1, 3])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])  # the seed picks the kernel: softmax, layer_norm, conv1d, linear_scan
def test_the_oracle_scores_at_least_0_9(tmp_path, seed, difficulty):
    result = rollout(ENV, FAMILY, "oracle", tmp_path / "first", seed=seed, difficulty=difficulty)
    assert result.status == "completed", result.steps
    assert "calls correct" in result.steps[0].explanation, result.steps[0].explanation
    if result.score < 0.9:
        # The speedup is timed: on a loaded 2-core machine it has fallen to ~0.8 of the target once
        # (CI, 0.894 and 0.898). The red team gate's policy: one more run; a second miss stands.
        result = rollout(ENV, FAMILY, "oracle", tmp_path / "again", seed=seed, difficulty=difficulty)
    assert result.score >= 0.9, result.steps[0].explanation


def test_the_null_agent_scores_zero(tmp_path):
    result = rollout(ENV, FAMILY, "null", tmp_path, seed=5)
    assert result.score == 0.0
    assert "baseline" in result.steps[0].explanation or "speedup" in result.steps[0].explanation


def test_a_degenerate_submission_scores_zero_with_a_one_line_reason(tmp_path):
    env = load_environment(ENV)
    with resolved(env, FAMILY, seed=6) as (task, _):
        garbage = _garbage(task)
    result = rollout(ENV, FAMILY, garbage, tmp_path, seed=6)
    assert result.score == 0.0 and result.status != "infra_error"
    assert "\n" not in result.steps[0].explanation


def test_a_kernel_that_does_not_import_scores_zero_and_says_why(tmp_path):
    result = rollout(ENV, FAMILY, _submit("def softmax(x, temperature)\n    return x\n"), tmp_path, params={"kernel": "softmax"})
    assert result.score == 0.0 and result.status == "completed"
    assert "could not be loaded" in result.steps[0].explanation and "SyntaxError" in result.steps[0].explanation


def test_a_slightly_wrong_kernel_scores_zero_however_fast(tmp_path):
    wrong = "import numpy as np\n\n\ndef softmax(x, temperature):\n    e = np.exp(x / temperature - (x / temperature).max(axis=1, keepdims=True))\n    return e / e.sum(axis=1, keepdims=True) * (1 + 1e-3)\n"
    result = rollout(ENV, FAMILY, _submit(wrong), tmp_path, params={"kernel": "softmax"})
    assert result.score == 0.0 and "is wrong" in result.steps[0].explanation


def test_float32_arithmetic_is_within_the_stated_tolerance(tmp_path):
    single = ("import numpy as np\n\n\ndef layer_norm(x, gamma, beta, eps):\n    x = x.astype(np.float32)\n"
              "    y = x - x.mean(axis=1, keepdims=True)\n    y /= np.sqrt((y * y).mean(axis=1, keepdims=True) + np.float32(eps))\n"
              "    return y * gamma.astype(np.float32) + beta.astype(np.float32)\n")
    result = rollout(ENV, FAMILY, _submit(single), tmp_path, params={"kernel": "layer_norm"})
    assert result.status == "completed" and "all 15 calls correct" in result.steps[0].explanation, result.steps[0].explanation


def test_a_harder_difficulty_lowers_the_score_of_a_mediocre_kernel(tmp_path):
    easy = rollout(ENV, FAMILY, _submit(MEDIOCRE_SOFTMAX), tmp_path / "easy", difficulty=1, params={"kernel": "softmax"})
    hard = rollout(ENV, FAMILY, _submit(MEDIOCRE_SOFTMAX), tmp_path / "hard", difficulty=3, params={"kernel": "softmax"})
    assert easy.status == hard.status == "completed"
    assert easy.score >= 0.9, easy.steps[0].explanation
    assert hard.score < easy.score - 0.1, (easy.steps[0].explanation, hard.steps[0].explanation)


def _fingerprint(seed: int, difficulty: int) -> tuple[str, str]:
    env = load_environment(ENV)
    workspace = new_workspace()
    try:
        task, _ = build_instance(env.families[FAMILY], seed, difficulty, None, workspace)
        files = hashlib.sha256()
        for path in sorted(task.workdir_files.rglob("*")):
            files.update(path.name.encode() + path.read_bytes())
        return json.dumps(task.params, sort_keys=True) + task.steps[0].instructions, files.hexdigest()
    finally:
        remove_workspace(workspace)


def test_the_same_seed_rebuilds_the_same_instance_and_other_seeds_differ():
    assert _fingerprint(8, 2) == _fingerprint(8, 2)
    others = {_fingerprint(seed, 2) for seed in (8, 12, 16)}  # the same kernel (seed % 4), other parameters
    assert len(others) == 3
    assert _fingerprint(8, 1) != _fingerprint(8, 3)


def test_the_student_never_sees_the_reference():
    env = load_environment(ENV)
    reference = (env.directory / "reference.py").read_text()
    with resolved(env, FAMILY, seed=1) as (task, _):
        for path in task.workdir_files.rglob("*"):
            text = path.read_text()
            assert "reference_" not in text and reference[:200] not in text


ATTACK_IDS = [a.id for a in load_environment(ENV).attacks]


@pytest.mark.parametrize("attack", ATTACK_IDS)
def test_every_family_attack_is_contained(tmp_path, attack):
    result = assert_attack_contained(ENV, FAMILY, attack, tmp_path)
    assert result.score == 0.0


def test_cpu_beyond_one_core_and_cpu_between_calls_are_flagged():
    env = load_environment(ENV)
    judge_module = __import__(f"{env.module.__name__}.judge", fromlist=["KernelSpeedJudge"])
    with resolved(env, FAMILY, seed=0) as (task, _):
        judge = task.steps[0].judge
    calls = [StudentCall(ok=True, value=None, wall_s=0.02, cpu_s=0.039) for _ in range(10)]
    meta: dict = {}
    kinds = {e.kind for e in judge._cpu_events(calls, cpu_total=0.39, meta=meta)}
    assert kinds == {"cpu_over_quota"}
    kinds = {e.kind for e in judge._cpu_events(calls[:1], cpu_total=0.5, meta=meta)}
    assert "background_work" in kinds
    honest = [StudentCall(ok=True, value=None, wall_s=0.02, cpu_s=0.019) for _ in range(10)]
    assert judge._cpu_events(honest, cpu_total=0.191, meta=meta) == []
    assert judge_module.speed_score(1.2, 10.0) == 0.0 and judge_module.speed_score(10.0, 10.0) == 1.0


def test_a_daemon_the_kernel_leaves_at_grading_time_is_misbehaviour_of_the_graded_step(tmp_path):
    # Code that runs only when the judge imports it: the student's session never saw it run.
    result = assert_attack_contained(ENV, FAMILY, "kernel-detach-daemon", tmp_path)
    assert result.status == "misbehaved"
    assert [(m.kind, m.step) for m in result.misbehaviour] == [("processes_left_in_grading", result.steps[0].index)], result.misbehaviour
    assert "grading sandbox" in result.misbehaviour[0].detail
