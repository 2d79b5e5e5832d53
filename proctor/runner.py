"""Many rollouts: resolve the task or family instance for each, make a fresh agent, run, collect.

Rollouts run in parallel threads when asked (each has its own sandbox, uid and cgroups); each
result is written as soon as its rollout ends, so an interrupted batch keeps what finished."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .agents.model_config import ModelConfig
from .agents.scripted import make_agent
from .harness import RolloutConfig, run_rollout
from .results import RolloutResult
from .tasks.loading import Environment, resolved


def run_many(
    env: Environment,
    ident: str,
    agent_spec: str,
    out_dir: str | Path,
    *,
    n: int = 1,
    seed: int = 0,
    difficulty: int | None = None,
    params: dict[str, Any] | None = None,
    config: RolloutConfig | None = None,
    parallel: int = 1,
    on_result: Callable[[RolloutResult], None] | None = None,
    model: ModelConfig | None = None,
) -> list[RolloutResult]:
    """Run `n` rollouts of a task (or of a family, with seeds seed, seed+1, ...). Configuration
    errors (unknown task, bad agent, bad parameters) surface before any rollout starts."""
    # Fail fast on a bad id, parameters or agent before spending anything.
    with resolved(env, ident, seed=seed, difficulty=difficulty, params=params) as (task, _):
        make_agent(agent_spec, task, model).close()

    def one(i: int) -> RolloutResult:
        with resolved(env, ident, seed=seed + i, difficulty=difficulty, params=params) as (task, instance):
            result = run_rollout(task, make_agent(agent_spec, task, model), out_dir, instance=instance, config=config,
                                 env_dir=env.directory)
        if on_result:
            on_result(result)
        return result

    if parallel <= 1 or n == 1:
        return [one(i) for i in range(n)]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="proctor-rollout") as pool:
        return list(pool.map(one, range(n)))
