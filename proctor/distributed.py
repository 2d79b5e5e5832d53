"""Rollouts spread over a Ray cluster (`proctor run --ray auto|local|ADDRESS`).

The driver (the `proctor run` process) keeps the batch: its record, its run ids, its `--out`. Each
rollout is one Ray task that runs the whole rollout on the worker's node exactly as `proctor run`
does there: the node's own sandboxes, with the same confinement grant (a node that cannot confine
refuses the rollout, which comes back as an `infra_error` naming why). The task returns the
rollout's result and every file of its run directory (transcript included), and the driver writes
them into `--out/<run_id>/`, result.json last and atomically, so a rollout is on the driver's disk
whole or not at all.

A worker or node that dies mid-rollout loses only that attempt: Ray reports the task failed
(its result can never arrive afterwards, since Ray's own retries are off), and the driver runs the
same rollout, under the same run id, again, up to `retries` more times; past that the rollout is
written as an `infra_error` naming the failure. Each run id is written once, by the driver, so
nothing is lost and nothing counted twice; `--resume` later reruns those infra errors.

Each node needs Proctor installed and the environment (and a `script:` agent's file) at the same
path as on the driver, as with any Ray job. `ray` is an optional extra: `pip install 'proctor[ray]'`."""

from __future__ import annotations

import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .agents.model_config import ModelConfig
from .errors import ConfigError
from .harness import RolloutConfig
from .results import RolloutResult, Timings, write_result
from .tasks.models import Instance

DEFAULT_RETRIES = 2


class RayJob(BaseModel):
    """One rollout as a Ray task: what a worker needs to run it, all plain values."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    index: int
    env: str = Field(description="The environment as the worker loads it: a directory path or a module name.")
    ident: str
    agent_spec: str
    resolve: dict[str, Any] = Field(description="Keyword arguments of tasks.loading.resolved for this rollout (seed, difficulty, params...), exactly as the driver resolved it.")
    config: RolloutConfig
    model: ModelConfig | None = None
    run_id: str
    task_id: str
    instance: Instance


class RayOutcome(BaseModel):
    """What a worker sends back: the result, and the run directory's files by relative path."""

    model_config = ConfigDict(extra="forbid")
    result: RolloutResult
    files: dict[str, bytes]
    node: str = ""


def env_ref(env: Any) -> str:
    """How a worker finds the driver's environment: its directory, or its importable module name."""
    name = env.module.__name__
    if name.startswith("proctor_env_") and env.directory is not None:
        return str(env.directory)
    return name


def connect(address: str) -> None:
    """Join the Ray cluster at `address` ("auto": the one this machine is part of; "local": start a
    one-machine cluster in this process; else HOST:PORT or ray://...). An initialised Ray is used as is."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs the ray extra: pip install 'proctor[ray]' (or PROCTOR_EXTRAS=ray make setup)") from None
    if ray.is_initialized():
        return
    try:
        if address == "local":
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except Exception as exc:  # noqa: BLE001 - any failure to connect is one line naming the address
        raise ConfigError(f"--ray {address}: cannot join the Ray cluster: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None


def run_job(job: RayJob) -> RayOutcome:
    """On the worker: the whole rollout, in a scratch --out of its own, read back whole."""
    from .agents.scripted import make_agent
    from .harness import run_rollout
    from .tasks.loading import load_environment, resolved

    env = load_environment(job.env)
    with tempfile.TemporaryDirectory(prefix="proctor-ray-") as scratch:
        with resolved(env, job.ident, **job.resolve) as (task, instance):
            result = run_rollout(task, make_agent(job.agent_spec, task, job.model), scratch, instance=instance,
                                 config=job.config, env_dir=env.directory, run_id=job.run_id)
        run_dir = Path(scratch) / job.run_id
        files = {}
        for path in sorted(run_dir.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.name != "result.json":
                files[str(path.relative_to(run_dir))] = path.read_bytes()
    node = ""
    try:
        import ray

        node = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - only a label
        pass
    return RayOutcome(result=result, files=files, node=node)


def system_failure(exc: BaseException) -> bool:
    """A failure of the worker or node (retry it), not of the rollout's own code."""
    import ray.exceptions as rex

    kinds = tuple(getattr(rex, name) for name in (
        "WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError", "OwnerDiedError",
        "RaySystemError", "TaskUnschedulableError", "ActorDiedError", "OutOfMemoryError", "ObjectReconstructionFailedError",
    ) if hasattr(rex, name))
    return isinstance(exc, kinds)


def write_outcome(out_dir: Path, outcome: RayOutcome) -> RolloutResult:
    run_dir = out_dir / outcome.result.run_id
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=False)
    for rel, data in outcome.files.items():
        target = (run_dir / rel).resolve()
        if not target.is_relative_to(run_dir.resolve()):
            continue  # never: paths come from our own worker code
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    write_result(outcome.result, run_dir)  # last and atomic: the rollout is whole on disk, or absent
    return outcome.result


def _infra_result(job: RayJob, why: str) -> RolloutResult:
    return RolloutResult(
        run_id=job.run_id, task_id=job.task_id, instance=job.instance, agent=job.agent_spec.split(":")[0],
        status="infra_error", score=0.0, judged_score=0.0, reward=0.0, errors=[why[:2000]],
        timings=Timings(started_at=datetime.now(timezone.utc).isoformat(timespec="seconds")),
    )


def run_on_ray(
    jobs: Sequence[RayJob],
    out_dir: str | Path,
    *,
    address: str,
    parallel: int,
    retries: int = DEFAULT_RETRIES,
    on_result: Callable[[RolloutResult], None] | None = None,
) -> dict[int, RolloutResult]:
    """Run `jobs` as Ray tasks, at most `parallel` at once, and write each into `out_dir` when it
    comes back. A task whose worker or node died is run again (same run id) up to `retries` times,
    then written as an infra_error. Returns the results by job index."""
    import ray

    connect(address)
    remote = ray.remote(num_cpus=1, max_retries=0, retry_exceptions=False)(run_job)
    out = Path(out_dir)
    queue: deque[tuple[RayJob, int]] = deque((job, 0) for job in jobs)
    pending: dict[Any, tuple[RayJob, int]] = {}
    done: dict[int, RolloutResult] = {}
    try:
        while queue or pending:
            while queue and len(pending) < max(1, parallel):
                job, attempt = queue.popleft()
                pending[remote.remote(job)] = (job, attempt)
            ready, _ = ray.wait(list(pending), num_returns=1)
            job, attempt = pending.pop(ready[0])
            try:
                result = write_outcome(out, ray.get(ready[0]))
            except Exception as exc:  # noqa: BLE001 - every failure becomes a result or a retry
                why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                if system_failure(exc) and attempt < retries:
                    queue.append((job, attempt + 1))
                    continue
                result = _infra_result(job, f"ray: the rollout failed on its worker after {attempt + 1} attempt(s): {why}")
                run_dir = out / job.run_id
                run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                write_result(result, run_dir)
            done[job.index] = result
            if on_result:
                on_result(result)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return done


__all__ = ["DEFAULT_RETRIES", "RayJob", "RayOutcome", "connect", "env_ref", "run_job", "run_on_ray", "system_failure", "write_outcome"]

