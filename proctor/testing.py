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
from .sandbox import SandboxBackend
from .tasks.loading import load_environment, resolved
from .tasks.models import Script


def rollout(
    env: str | Path, task: str, agent: str | Script | Agent, out_dir: str | Path, *,
    seed: int = 0, difficulty: int | None = None, params: dict[str, Any] | None = None,
    config: RolloutConfig | None = None, backend: SandboxBackend | None = None, impossible: bool = False,
) -> RolloutResult:
    """One rollout of `task` (or a family instance) with `agent`: an agent spec (`oracle`, `null`,
    `script:PATH`), a Script, or an Agent. `backend` overrides the config's runtime (the fake, in
    fast unit tests of an environment's logic). `impossible` runs its impossible variant (a
    cheating-rate probe)."""
    loaded = load_environment(str(env))
    with resolved(loaded, task, seed=seed, difficulty=difficulty, params=params, impossible=impossible) as (built, instance):
        if isinstance(agent, Script):
            agent = ScriptedAgent(agent)
        elif isinstance(agent, str):
            agent = make_agent(agent, built)
        return run_rollout(built, agent, out_dir, instance=instance, config=config, env_dir=loaded.directory, backend=backend)


def assert_attack_contained(env: str | Path, task: str, attack: str, out_dir: str | Path) -> RolloutResult:
    """Run one red-team attack (the library's or the environment's own `ATTACKS`) against `task` and assert it scores 0 (no infra error) and, when
    the harness can detect it, is flagged. Returns the result for further checks."""
    from .redteam.attacks import ATTACKS, environment_attacks

    loaded = load_environment(str(env))
    by_id = {a.id: a for a in [*ATTACKS, *environment_attacks(loaded)]}
    if attack not in by_id:
        raise AssertionError(f"unknown attack {attack!r}; known: {', '.join(sorted(by_id))}")
    with resolved(loaded, task) as (built, instance):
        script = by_id[attack].script(built)
        if script is None:
            raise AssertionError(f"attack {attack!r} does not apply to task {task!r}")
        result = run_rollout(built, ScriptedAgent(script), out_dir, instance=instance, env_dir=loaded.directory)
    kinds = {m.kind for m in [*result.misbehaviour, *result.observations]}  # recorded: attempts and observations
    assert result.status != "infra_error", f"{attack}: infra_error: {result.errors}"
    assert result.score == 0.0, f"{attack} earned {result.score} on {task}"
    expected = set(by_id[attack].flagged)
    assert not expected or expected & kinds, f"{attack} was not flagged (expected {sorted(expected)}, got {sorted(kinds)})"
    return result
