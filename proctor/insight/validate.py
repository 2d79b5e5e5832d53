"""The validity gate on generated instances: before an instance is written, its oracle must reach
the maximum score and the null student (which does nothing) must stay at the floor, each in a real
rollout. An instance that fails either is broken for training (unsolvable, or paying for nothing)
and is rejected with the reason, never silently dropped."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..agents.scripted import make_agent
from ..harness import RolloutConfig, run_rollout
from ..results import RolloutResult
from ..runner import InstanceSpec, check_instances
from ..sandbox.backend import SandboxBackend
from ..tasks.loading import Environment, resolved

MAX_SCORE = 1.0
FLOOR = 0.0


class Checked(BaseModel):
    """One instance through the gate."""

    model_config = ConfigDict(extra="forbid")

    instance: InstanceSpec
    accepted: bool
    validated: bool = Field(description="False when the instance has no oracle: kept, but not proven solvable.")
    reason: str = Field("", description="Why it was rejected (or why it was not validated).")
    oracle_run: str | None = None
    null_run: str | None = None


def _outcome(result: RolloutResult) -> str:
    why = "; ".join(result.errors) or "; ".join(f"{m.kind}: {m.detail}" for m in result.misbehaviour[:2]) \
        or "; ".join(s.explanation for s in result.steps if s.explanation)
    return f"{result.status}, score {result.score:g}" + (f" ({' '.join(why.split())[:200]})" if why else "")


def check_one(env: Environment, spec: InstanceSpec, out_dir: Path, *, config: RolloutConfig | None = None,
              backend: SandboxBackend | None = None) -> Checked:
    with resolved(env, spec.family, seed=spec.seed, difficulty=spec.difficulty, params=spec.params) as (task, instance):
        if task.oracle is None:
            return Checked(instance=spec, accepted=True, validated=False, reason="the family's instance has no oracle: not validated")
        runs = {}
        for agent in ("oracle", "null"):
            runs[agent] = run_rollout(task, make_agent(agent, task), out_dir, instance=instance, config=config,
                                      env_dir=env.directory, backend=backend)
    oracle, null = runs["oracle"], runs["null"]
    reasons = []
    if oracle.status != "completed" or oracle.score < MAX_SCORE - 1e-9:
        reasons.append(f"the oracle did not reach the maximum {MAX_SCORE:g}: {_outcome(oracle)}")
    if null.status != "completed" or null.score > FLOOR + 1e-9:
        reasons.append(f"the null student did not stay at the floor {FLOOR:g}: {_outcome(null)}")
    return Checked(instance=spec, accepted=not reasons, validated=True, reason="; ".join(reasons),
                   oracle_run=oracle.run_id, null_run=null.run_id)


def validate(env: Environment, specs: Sequence[InstanceSpec], out_dir: str | Path, *, config: RolloutConfig | None = None,
             parallel: int = 1, backend: SandboxBackend | None = None) -> list[Checked]:
    """Every instance through the gate, in order. The gate's rollouts are kept under `out_dir`."""
    check_instances(env, specs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def one(spec: InstanceSpec) -> Checked:
        return check_one(env, spec, out, config=config, backend=backend)

    if parallel <= 1 or len(specs) <= 1:
        return [one(s) for s in specs]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="proctor-gate") as pool:
        return list(pool.map(one, specs))
