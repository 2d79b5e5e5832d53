"""The Episode driven directly, one action at a time, as a trainer drives it: the same custody,
judges, misbehaviour and result.json as `proctor run`, through the real sandbox."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from proctor.episode import Action, AsyncEpisode, Episode, EpisodeError
from proctor.results import read_result
from proctor.tasks import load_environment
from proctor.transcript import read_transcript

BASICS = Path(__file__).parent / "envs" / "basics"
EXAMPLE = Path(__file__).parent.parent / "examples" / "quarterly_revenue"
SOLVE = ("python3 -c \"import csv; rows = csv.DictReader(open('/data/orders.csv')); "
         "print(sum(int(r['amount']) for r in rows if r['status'] == 'paid' and '2024-07-01' <= r['date'] <= '2024-09-30'))\""
         " > /workdir/answer.txt")


@pytest.fixture
def example(confinement, tmp_path):
    with Episode(tmp_path, env=load_environment(str(EXAMPLE))) as ep:
        yield ep


@pytest.fixture
def basics(fake_backend, tmp_path):
    """The basics environment on the fake backend: these tests are about the Episode's own logic
    (steps, budgets, deadlines, teardown, the transcript), not about confinement."""
    with Episode(tmp_path, env=load_environment(str(BASICS)), backend=fake_backend) as ep:
        yield ep


def test_one_bash_call_and_submit_solve_the_example_with_reward_one_and_the_cli_result(example):
    obs = example.reset(task="q3-revenue")
    assert "Q3 2024" in obs.instructions and obs.step == 0 and obs.steps == 1
    assert {t["name"] for t in obs.tools} == {"bash", "read_file", "write_file", "submit"}
    assert all("properties" in t["parameters"] for t in obs.tools)
    out = example.step(Action(tool="bash", arguments={"command": SOLVE + " && cat /workdir/answer.txt"}))
    assert (out.done, out.reward, out.observation.text.strip()) == (False, 0.0, "37087")
    out = example.step({"tool": "submit", "arguments": {}})
    assert (out.done, out.reward, out.info["status"]) == (True, 1.0, "completed")
    result = read_result(Path(out.info["result_path"]))
    assert result == example.result and result.agent == "trainer" and result.usage.tool_calls == 2
    types = [e["type"] for e in read_transcript(example.run_dir / "transcript.jsonl")]
    assert types == ["rollout_start", "step_start", "model_turn", "tool_result", "model_turn", "tool_result",
                     "custody", "score", "rollout_end"]
    state = example.state()
    assert (state.done, state.status, state.reward, state.misbehaviour) == (True, "completed", 1.0, [])


def test_an_answer_symlinked_to_a_host_path_earns_nothing_and_state_shows_why(example):
    example.reset(task="q3-revenue")
    example.step(Action(tool="bash", arguments={"command": "ln -s /etc/passwd /workdir/answer.txt"}))
    out = example.step(Action(tool="submit"))
    assert out.done and out.reward <= 0 and out.info["status"] == "misbehaved"
    assert "submission_symlink" in {m.kind for m in example.state().misbehaviour}


def test_an_honest_wrong_answer_scores_zero_without_misbehaviour(example):
    example.reset(task="q3-revenue")
    example.step(Action(tool="bash", arguments={"command": "echo 12 > /workdir/answer.txt"}))
    out = example.step(Action(tool="submit"))
    assert (out.done, out.reward, out.info["status"]) == (True, 0.0, "completed")
    assert example.state().misbehaviour == []


def test_a_text_message_ends_the_step_and_multi_step_tasks_show_the_next_instructions(basics):
    obs = basics.reset(task="two-steps")
    assert obs.instructions.startswith("Write 1")
    out = basics.step(Action(tool="bash", arguments={"command": "echo 1 > /workdir/answer.txt"}))
    assert out.observation.instructions is None and out.observation.step == 0
    out = basics.step(Action(text="done"))
    assert not out.done and out.observation.step == 1 and out.observation.instructions.startswith("Now write 2")
    assert out.info["last_step"]["score"] == 1.0 and out.info["last_step"]["ended_by"] == "text"
    basics.step(Action(tool="bash", arguments={"command": "echo 2 > /workdir/answer.txt"}))
    out = basics.step(Action(tool="submit"))
    assert (out.done, out.reward) == (True, 1.0)


def test_a_family_instance_is_reset_by_seed_difficulty_and_params(basics):
    basics.reset(task="sum", seed=3, difficulty=2, params={"count": 2})
    assert basics.instance.seed == 3 and basics.instance.difficulty == 2 and basics.task.params == {"numbers": 4}
    out = basics.step(Action(tool="bash", arguments={"command": "awk '{s+=$1} END {print s}' /data/numbers.txt > /workdir/answer.txt"}))
    out = basics.step(Action(tool="submit"))
    assert (out.done, out.reward) == (True, 1.0)


def test_the_turn_budget_ends_the_episode_with_its_last_action(basics):
    basics.reset(task="three-turns")
    for _ in range(2):
        assert not basics.step(Action(tool="bash", arguments={"command": "true"})).done
    out = basics.step(Action(tool="bash", arguments={"command": "echo 42 > /workdir/answer.txt"}))
    assert out.done and out.info["ended_by"] == "turn_budget" and out.reward == 1.0


def test_an_action_after_the_deadline_is_not_run_and_the_step_ends_by_time(basics):
    basics.reset(task="short-deadline")
    import time
    time.sleep(2.2)
    out = basics.step(Action(tool="bash", arguments={"command": "echo 42 > /workdir/answer.txt"}))
    assert out.done and out.info["ended_by"] == "rollout_time" and out.reward == 0.0
    assert "time for this step is up" in out.observation.text or out.observation.text == ""


def test_a_step_before_reset_or_after_done_is_refused_with_a_reason(confinement, tmp_path):
    ep = Episode(tmp_path, env=load_environment(str(BASICS)))
    with pytest.raises(EpisodeError, match="before reset"):
        ep.step(Action(tool="submit"))
    ep.reset(task="write-42")
    ep.step(Action(tool="submit"))
    with pytest.raises(EpisodeError, match="done"):
        ep.step(Action(tool="submit"))
    with pytest.raises(ValueError, match="needs a tool"):
        Action()


def test_closing_mid_episode_tears_the_sandbox_down_and_writes_an_abandoned_result(basics):
    basics.reset(task="write-42")
    basics.step(Action(tool="bash", arguments={"command": "sleep 300 & echo started"}))
    box = basics.box
    root = box.workdir
    assert root.exists() and [p for p in box.processes() if p.uid == box.uid and not p.zombie]
    result = basics.close("the client disconnected")
    assert result.status == "abandoned" and result.reward == 0.0 and result.steps[0].ended_by == "abandoned"
    assert "the client disconnected" in " ".join(result.errors)
    assert not root.exists()
    on_disk = read_result(basics.run_dir / "result.json")
    assert on_disk.status == "abandoned"
    types = [e["type"] for e in read_transcript(basics.run_dir / "transcript.jsonl")]
    assert types[:4] == ["rollout_start", "step_start", "model_turn", "tool_result"] and types[-1] == "rollout_end"


def test_token_ids_and_logprobs_on_an_action_are_kept_in_the_transcript(basics):
    basics.reset(task="write-42")
    basics.step(Action(tool="bash", arguments={"command": "echo 42 > /workdir/answer.txt"},
                       token_ids=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3]))
    basics.step(Action(tool="submit"))
    turns = [e for e in read_transcript(basics.run_dir / "transcript.jsonl") if e["type"] == "model_turn"]
    assert turns[0]["extra"] == {"token_ids": [1, 2, 3], "logprobs": [-0.1, -0.2, -0.3]}


def test_async_episodes_run_concurrently_and_each_gets_its_own_reward(confinement, tmp_path):
    env = load_environment(str(BASICS))

    async def one(i: int) -> float:
        ep = AsyncEpisode(tmp_path, env=env)
        await ep.reset("write-42")
        answer = "42" if i % 2 == 0 else "41"
        await ep.step(Action(tool="bash", arguments={"command": f"sleep 0.5; echo {answer} > /workdir/answer.txt"}))
        out = await ep.step(Action(tool="submit"))
        assert out.done
        return out.reward

    async def main() -> list[float]:
        return await asyncio.gather(*(one(i) for i in range(6)))

    assert asyncio.run(main()) == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]


def test_a_task_that_requires_a_stronger_runtime_is_refused_unless_degraded_is_allowed(fake_backend, tmp_path):
    from proctor.agents import ScriptedAgent
    from proctor.harness import RolloutConfig, run_rollout
    from proctor.tasks import Script

    task = load_environment(str(BASICS)).tasks["write-42"].model_copy(update={"requires_runtime": "gvisor"})
    agent = Script(name="t", turns=[{"tool": "bash", "arguments": {"command": "echo 42 > /workdir/answer.txt"}}, {"tool": "submit", "arguments": {}}])
    refused = run_rollout(task, ScriptedAgent(agent), tmp_path, backend=fake_backend)
    assert refused.status == "infra_error" and refused.score == 0.0
    assert any("requires the gvisor sandbox runtime" in e and "--runtime gvisor" in e for e in refused.errors), refused.errors
    degraded = run_rollout(task, ScriptedAgent(agent), tmp_path, backend=fake_backend, config=RolloutConfig(allow_degraded=True))
    assert degraded.score == 1.0 and degraded.confinement["runtime"] == "fake"
    assert "runtime:gvisor" in degraded.confinement["degraded"]
    plain = run_rollout(task.model_copy(update={"requires_runtime": None}), ScriptedAgent(agent), tmp_path, backend=fake_backend)
    assert plain.status == "completed" and "runtime:gvisor" not in plain.confinement["degraded"]
