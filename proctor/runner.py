"""Many rollouts: resolve the task or family instance for each, make a fresh agent, run, collect.

Rollouts run in parallel threads when asked (each has its own sandbox, uid and cgroups); each
result is written as soon as its rollout ends, so an interrupted batch keeps what finished, and
`resume=True` (`proctor run --resume`) runs only what it did not finish (proctor/batches.py)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .agents.model_config import ModelConfig
from .agents.scripted import make_agent
from .batches import BatchPlan, batch_spec, open_batch
from .harness import RolloutConfig, run_rollout
from .results import RolloutResult
from .sandbox import SandboxBackend
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
    resume: bool = False,
    on_plan: Callable[[BatchPlan], None] | None = None,
    backend: SandboxBackend | None = None,
) -> list[RolloutResult]:
    """Run `n` rollouts of a task (or of a family, with seeds seed, seed+1, ...) as one batch of
    `out_dir`, and return all `n` results in order. With `resume`, the batch in `out_dir` that
    these arguments match is finished instead: its finished rollouts are kept (read back, not
    rerun) and only the others run. Configuration errors (unknown task, bad agent, bad parameters,
    a resume that matches no batch) surface before any rollout starts; `on_plan` then sees the
    batch (what is finished, what is left) before the first rollout does. `backend` overrides
    `config.runtime` (tests hand in the fake here)."""
    config = config or RolloutConfig()
    # Fail fast on a bad id, parameters or agent before spending anything.
    with resolved(env, ident, seed=seed, difficulty=difficulty, params=params) as (task, _):
        make_agent(agent_spec, task, model).close()
    spec = batch_spec(env, ident, agent_spec, n=n, seed=seed, difficulty=difficulty, params=params, config=config, model=model)

    with open_batch(out_dir, spec, resume=resume) as plan:
        if on_plan:
            on_plan(plan)

        def one(i: int) -> RolloutResult:
            with resolved(env, ident, seed=seed + i, difficulty=difficulty, params=params) as (task, instance):
                result = run_rollout(task, make_agent(agent_spec, task, model), out_dir, instance=instance, config=config,
                                     env_dir=env.directory, run_id=plan.run_id(task.id, i), backend=backend)
            if on_result:
                on_result(result)
            return result

        todo = plan.todo
        if parallel <= 1 or len(todo) <= 1:
            ran = [one(i) for i in todo]
        else:
            with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="proctor-rollout") as pool:
                ran = list(pool.map(one, todo))
        by_index = {**plan.finished, **dict(zip(todo, ran))}
        return [by_index[i] for i in range(n)]
