"""Helpers for an environment's own tests: run a rollout in one line and assert on it.

    from proctor.testing import rollout

    def test_the_oracle_scores_one(tmp_path):
        assert rollout("path/to/env", "my-task", "oracle", tmp_path).score == 1.0
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .agents.base import Agent
from .agents.scripted import ScriptedAgent, make_agent
from .harness import RolloutConfig, run_rollout
from .results import RolloutResult
from .tasks.loading import load_environment, new_workspace, remove_workspace, resolve
from .tasks.models import Script


def rollout(
    env: str | Path, task: str, agent: str | Script | Agent, out_dir: str | Path, *,
    seed: int = 0, difficulty: int | None = None, params: dict[str, Any] | None = None,
    config: RolloutConfig | None = None,
) -> RolloutResult:
    """One rollout of `task` (or a family instance) with `agent`: an agent spec (`oracle`, `null`,
    `script:PATH`), a Script, or an Agent."""
    loaded = load_environment(str(env))
    workspace = new_workspace() if task in loaded.families else None
    try:
        resolved, instance = resolve(loaded, task, seed=seed, difficulty=difficulty, params=params, workspace=workspace)
        if isinstance(agent, Script):
            agent = ScriptedAgent(agent)
        elif isinstance(agent, str):
            agent = make_agent(agent, resolved)
        return run_rollout(resolved, agent, out_dir, instance=instance, config=config, env_dir=loaded.directory)
    finally:
        remove_workspace(workspace)
