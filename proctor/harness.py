"""`run_rollout`: one rollout with an agent, the driver `proctor run` uses.

    result = run_rollout(task, agent, out_dir)        # a RolloutResult; OUT/<run_id>/result.json

Everything a rollout does (sandbox, deadlines, budgets, detectors, custody, judges, transcript,
result) lives in proctor/episode.py; this loop only asks the agent for each turn and hands it to
`Episode.step`, so a trainer stepping an Episode itself gets the identical rollout."""

from __future__ import annotations

from pathlib import Path

from .agents.base import Agent, AgentError, AgentTurn
from .episode import Episode, RolloutConfig, new_run_id
from .results import RolloutResult
from .sandbox import SandboxBackend
from .tasks.models import Instance, Task

__all__ = ["RolloutConfig", "new_run_id", "run_rollout"]


def run_rollout(
    task: Task,
    agent: Agent,
    out_dir: str | Path,
    *,
    instance: Instance | None = None,
    config: RolloutConfig | None = None,
    env_dir: str | Path | None = None,
    run_id: str | None = None,
    backend: SandboxBackend | None = None,
) -> RolloutResult:
    """Run one rollout of `task` with `agent`, writing OUT/<run_id>/{transcript.jsonl,result.json}.
    Never raises for anything the student, the agent or a judge does; a bad output directory is a
    ConfigError. `backend` overrides `config.runtime` (tests hand in the fake here)."""
    episode = Episode(out_dir, config=config, env_dir=env_dir, agent=agent, backend=backend)
    episode.reset(task, instance=instance, run_id=run_id)
    try:
        while not episode.done:
            try:
                turn = agent.next_turn(episode.pending, deadline=episode.step_deadline)
            except AgentError as exc:  # AgentTimeout too: the Episode ends the step by time
                episode.agent_failed(exc)
                continue
            except Exception as exc:  # noqa: BLE001 - an agent's bug is an infra error, but the step still
                # ends through the detectors and custody: a hack made before the crash is still flagged.
                episode.agent_failed(AgentError(f"the agent crashed: {type(exc).__name__}: {exc}", infra=True))
                continue
            if not isinstance(turn, AgentTurn):
                episode.agent_failed(AgentError(f"agent returned {type(turn).__name__}, not an AgentTurn", infra=True))
                continue
            episode.step(turn)
    except BaseException as exc:  # noqa: BLE001 - the result is written whatever happened
        episode.fail("harness", exc)
        if not isinstance(exc, Exception):
            raise
    return episode.result
