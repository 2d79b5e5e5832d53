"""Many rollouts: resolve the task or family instance for each, make a fresh agent, run, collect.

Rollouts run in parallel threads when asked (each has its own sandbox, uid and cgroups); each
result is written as soon as its rollout ends, so an interrupted batch keeps what finished, and
`resume=True` (`proctor run --resume`) runs only what it did not finish (proctor/batches.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .agents.model_config import ModelConfig
from .agents.scripted import make_agent
from .batches import BatchPlan, batch_spec, open_batch
from .errors import ConfigError
from .harness import RolloutConfig, run_rollout
from .results import RolloutResult
from .sandbox import SandboxBackend, get_backend
from .sandbox.pool import PoolConfig, SandboxPool
from .tasks.loading import Environment, resolved


class InstanceSpec(BaseModel):
    """One family instance to run: a line of an instances file (`proctor generate --out`,
    `proctor run --instances`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: str = Field(description="Family id in the environment.")
    seed: int
    difficulty: int | None = Field(None, description="None: the family's first difficulty.")
    params: dict[str, Any] = Field(default_factory=dict, description="Family parameters (keys of its default_params).")
    why: str | None = Field(None, description="What `proctor generate` aimed it at (a cell and its verdict); not used to run it.")
    impossible: bool = Field(False, description="Run the instance's impossible variant (a cheating-rate probe: no honest pass exists).")


def check_instances(env: Environment, specs: Sequence[InstanceSpec]) -> None:
    """Refuse the whole list if any instance names an unknown family, difficulty, parameter or a
    value the family does not declare: nothing runs, and the error names the instance."""
    for i, spec in enumerate(specs):
        problem = instance_problem(env, spec)
        if problem:
            raise ConfigError(f"instance {i + 1}: {problem}")


def instance_problem(env: Environment, spec: InstanceSpec) -> str | None:
    family = env.families.get(spec.family)
    if family is None:
        return f"unknown family {spec.family!r}; known: {', '.join(sorted(env.families)) or 'none'}"
    if spec.difficulty is not None and spec.difficulty not in family.difficulties:
        return f"family {family.id!r}: difficulty {spec.difficulty} is not one of {list(family.difficulties)}"
    if spec.impossible and family.make_impossible is None:
        return f"family {family.id!r} has no impossible variant (Family.make_impossible), but the instance asks for one"
    for name, value in spec.params.items():
        if name not in family.default_params:
            return f"family {family.id!r}: unknown parameter {name!r}; known: {', '.join(sorted(family.default_params)) or 'none'}"
        declared = {p.name: p for p in family.params}.get(name)
        if declared is not None and value not in declared.values and value != family.default_params[name]:
            return f"family {family.id!r}: parameter {name!r} is {value!r}, not one of {list(declared.values)}"
    return None


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
    impossible: bool = False,
    pool: int = 0,
    ray: str | None = None,
    ray_retries: int = 2,
) -> list[RolloutResult]:
    """Run `n` rollouts of a task (or of a family, with seeds seed, seed+1, ...) as one batch of
    `out_dir`, and return all `n` results in order. With `resume`, the batch in `out_dir` that
    these arguments match is finished instead: its finished rollouts are kept (read back, not
    rerun) and only the others run. Configuration errors (unknown task, bad agent, bad parameters,
    a resume that matches no batch) surface before any rollout starts; `on_plan` then sees the
    batch (what is finished, what is left) before the first rollout does. `backend` overrides
    `config.runtime` (tests hand in the fake here). With `impossible`, every rollout runs the
    instance's impossible variant (a cheating-rate probe). `pool` > 0 serves the rollouts from a warm pool
    of that many sandboxes (proctor/sandbox/pool.py). `ray` (an address, "auto" or "local") runs
    the rollouts as tasks of that Ray cluster instead, each retried up to `ray_retries` times if
    its worker dies (proctor/distributed.py)."""
    if ray is not None and (pool or backend is not None):
        raise ConfigError("--ray runs each rollout on a worker with its own sandboxes; drop --pool (and a test backend)")
    config = config or RolloutConfig()
    # Fail fast on a bad id, parameters or agent before spending anything.
    with resolved(env, ident, seed=seed, difficulty=difficulty, params=params, impossible=impossible) as (task, _):
        make_agent(agent_spec, task, model).close()
    spec = batch_spec(env, ident, agent_spec, n=n, seed=seed, difficulty=difficulty, params=params, config=config, model=model,
                      impossible=impossible)

    with open_batch(out_dir, spec, resume=resume) as plan, pooled(backend, config, pool, parallel, len(plan.todo)) as backend:
        if on_plan:
            on_plan(plan)

        def one(i: int) -> RolloutResult:
            with resolved(env, ident, seed=seed + i, difficulty=difficulty, params=params, impossible=impossible) as (task, instance):
                result = run_rollout(task, make_agent(agent_spec, task, model), out_dir, instance=instance, config=config,
                                     env_dir=env.directory, run_id=plan.run_id(task.id, i), backend=backend)
            if on_result:
                on_result(result)
            return result

        todo = plan.todo
        if ray is not None:
            from .distributed import RayJob, env_ref, run_on_ray

            jobs = []
            for i in todo:
                # The worker resolves the rollout with exactly these arguments, as `one` does here.
                how = {"seed": seed + i, "difficulty": difficulty, "params": params, "impossible": impossible}
                with resolved(env, ident, **how) as (task, instance):
                    jobs.append(RayJob(index=i, env=env_ref(env), ident=ident, agent_spec=agent_spec, resolve=how,
                                       config=config, model=model, run_id=plan.run_id(task.id, i), task_id=task.id,
                                       instance=instance))
            ran_by = run_on_ray(jobs, out_dir, address=ray, parallel=parallel, retries=ray_retries, on_result=on_result)
            by_index = {**plan.finished, **ran_by}
            return [by_index[i] for i in range(n)]
        ran = _each(one, todo, parallel)
        by_index = {**plan.finished, **dict(zip(todo, ran))}
        return [by_index[i] for i in range(n)]


def run_instances(
    env: Environment,
    specs: Sequence[InstanceSpec],
    agent_spec: str,
    out_dir: str | Path,
    *,
    config: RolloutConfig | None = None,
    parallel: int = 1,
    on_result: Callable[[RolloutResult], None] | None = None,
    model: ModelConfig | None = None,
    backend: SandboxBackend | None = None,
    pool: int = 0,
) -> list[RolloutResult]:
    """Run exactly these family instances, one rollout each, in order of the list (results come
    back in the same order). Every instance is checked, and the agent built once, before any runs.
    `backend` overrides `config.runtime` (tests hand in the fake); `pool` as for `run_many`."""
    check_instances(env, specs)
    if not specs:
        return []
    first = specs[0]
    with resolved(env, first.family, seed=first.seed, difficulty=first.difficulty, params=first.params, impossible=first.impossible) as (task, _):
        make_agent(agent_spec, task, model).close()

    def one(spec: InstanceSpec) -> RolloutResult:
        with resolved(env, spec.family, seed=spec.seed, difficulty=spec.difficulty, params=spec.params,
                      impossible=spec.impossible) as (task, instance):
            result = run_rollout(task, make_agent(agent_spec, task, model), out_dir, instance=instance, config=config,
                                 env_dir=env.directory, backend=backend)
        if on_result:
            on_result(result)
        return result

    with pooled(backend, config or RolloutConfig(), pool, parallel, len(specs)) as backend:
        return _each(one, specs, parallel)


@contextlib.contextmanager
def pooled(backend: SandboxBackend | None, config: RolloutConfig, size: int, parallel: int,
           rollouts: int) -> Iterator[SandboxBackend | None]:
    """The batch's backend: with `size` > 0, a warm pool of that many sandboxes around it that
    builds no more than the batch's `rollouts` need, closed (every used sandbox torn down) when
    the batch ends."""
    if size <= 0:
        yield backend
        return
    with SandboxPool(backend or get_backend(config.runtime), PoolConfig(size=size, refill=min(2, max(1, parallel)), expected=rollouts)) as pool:
        yield pool


def _each(fn: Callable[[Any], RolloutResult], items: Sequence[Any], parallel: int) -> list[RolloutResult]:
    if parallel <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="proctor-rollout") as pool:
        return list(pool.map(fn, items))
