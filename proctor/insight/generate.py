"""`proctor generate`: new instance specs aimed by a report.

The space is the family's own declaration (its difficulties and `Family.params`), so a new family
works without a change here. Each point of the space gets a weight from its cell's verdict, and N
instances are shared out by weight (largest remainder, ties to the earlier point), each with a fresh
seed above every seed the runs used:

- weak: 3 (fresh seeds); when the student never passed, 2 there and 2 at the next easier difficulty
  with the same parameters (a rung it can learn from), or all 3 there at the lowest difficulty;
- frontier: 3 (mixed outcomes are where RL learns most);
- too_few, or never run: 1 (look before aiming);
- saturated: 0 there, and 2 at the next harder difficulty with the same parameters that is not
  saturated too (nothing when there is none: the plan's notes say so).

`uniform` gives every point the same weight (a baseline, and what a first round uses anyway when
there are no runs yet). The plan is a pure function of the family's declaration, the report, N and
the seed."""

from __future__ import annotations

import itertools
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError
from ..harness import RolloutConfig
from ..runner import InstanceSpec
from ..sandbox.backend import SandboxBackend
from ..tasks.loading import Environment
from ..tasks.models import Family
from .cells import Thresholds, Verdict
from .instances import write_instances
from .report import Report, build_report
from .validate import Checked
from .validate import validate as validate_instances

Strategy = Literal["targeted", "uniform"]
STRATEGIES: tuple[str, ...] = ("targeted", "uniform")
WEIGHT = {"weak": 3, "frontier": 3, "too_few": 1, "unseen": 1, "saturated": 0}
NEIGHBOUR = 2
SEED_WINDOW = 1000  # fresh seeds are drawn from the next max(SEED_WINDOW, 10 N) above the largest seen


class Target(BaseModel):
    """One point of the family's space and what the plan gives it."""

    model_config = ConfigDict(extra="forbid")

    difficulty: int
    params: dict[str, Any]
    verdict: Verdict | Literal["unseen"] = Field(description="Its cell's verdict in the report (unseen: no rollouts).")
    pass_rate: float | None = None
    n: int = 0
    weight: int
    why: list[str] = Field(default_factory=list)
    count: int = Field(0, description="Instances generated here.")


class Plan(BaseModel):
    """What `proctor generate --json` prints (the instances themselves go to --out)."""

    model_config = ConfigDict(extra="forbid")

    family: str
    strategy: Strategy
    seed: int
    targets: list[Target]
    instances: list[InstanceSpec]
    notes: list[str] = Field(default_factory=list)


def points(family: Family) -> list[tuple[int, dict[str, Any]]]:
    """Every (difficulty, declared parameter values) the family can make, easiest first."""
    names = [p.name for p in family.params]
    combos = list(itertools.product(*(p.values for p in family.params)))
    return [(d, dict(zip(names, combo))) for d in sorted(family.difficulties) for combo in combos]


def _pkey(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def plan(family: Family, report: Report, *, n: int, seed: int, strategy: Strategy = "targeted") -> Plan:
    """The plan for N instances of `family`. `report` must be grouped by family, difficulty and the
    family's declared parameters (see `report_by`), pooled over students."""
    if n < 0:
        raise ConfigError(f"-n {n}: must be 0 or more")
    if strategy not in STRATEGIES:
        raise ConfigError(f"--strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    cells = {(c.difficulty, _pkey(c.params)): c for c in report.cells if c.family == family.id}
    difficulties = sorted(family.difficulties)
    targets: dict[tuple, Target] = {}
    for difficulty, params in points(family):
        cell = cells.get((difficulty, _pkey(params)))
        targets[(difficulty, _pkey(params))] = Target(
            difficulty=difficulty, params=params, verdict=cell.verdict if cell else "unseen",
            pass_rate=cell.pass_rate if cell and cell.n else None, n=cell.n if cell else 0, weight=0)
    notes: list[str] = []
    for (difficulty, key), target in list(targets.items()):
        if strategy == "uniform":
            target.weight += 1
            target.why.append("uniform")
            continue
        verdict = target.verdict
        index = difficulties.index(difficulty)
        if verdict == "saturated":
            # Up to the next harder difficulty the student has not mastered too (a saturated rung
            # teaches no more than this one).
            harder = next((targets[(d, key)] for d in difficulties[index + 1:] if targets[(d, key)].verdict != "saturated"), None)
            if harder is not None:
                harder.weight += NEIGHBOUR
                harder.why.append(f"stepped up from saturated difficulty {difficulty}")
            elif index + 1 == len(difficulties):
                notes.append(f"{_describe(target)} is saturated at the hardest difficulty: nothing harder to step up to")
        elif verdict == "weak" and target.pass_rate == 0 and index > 0:
            target.weight += NEIGHBOUR
            target.why.append("weak (never passed)")
            easier = targets[(difficulties[index - 1], key)]
            easier.weight += NEIGHBOUR
            easier.why.append(f"stepped down from never-passed difficulty {difficulty}")
        else:
            target.weight += WEIGHT[verdict]
            if WEIGHT[verdict]:
                target.why.append(verdict)
    ordered = list(targets.values())
    counts = _apportion([t.weight for t in ordered], n)
    if n and not any(counts):
        notes.append("every cell is saturated at the hardest difficulty: no instances to generate")
    for target, count in zip(ordered, counts):
        target.count = count
    base = report.max_seed.get(family.id, -1) + 1
    rng = random.Random(f"proctor-generate/{family.id}/{seed}")
    # Small seeds, just above the runs' own: some generators hand the seed to numpy's legacy
    # RandomState, which refuses anything from 2**32 up, and a curriculum adds a window per round.
    seeds = rng.sample(range(base, base + max(SEED_WINDOW, 10 * sum(counts))), sum(counts))
    # Round robin over the targets, so the first lines of the file are already spread over them.
    slots = [target for round_ in range(max(counts, default=0)) for target in ordered if target.count > round_]
    specs = [InstanceSpec(family=family.id, seed=s, difficulty=t.difficulty, params=dict(t.params),
                          why=f"{_describe(t)}: " + "; ".join(t.why)) for s, t in zip(seeds, slots)]
    return Plan(family=family.id, strategy=strategy, seed=seed, targets=ordered, instances=specs, notes=notes)


def _describe(target: Target) -> str:
    params = " ".join(f"{k}={v!r}" for k, v in target.params.items())
    return f"difficulty {target.difficulty}" + (f" {params}" if params else "")


def _apportion(weights: list[int], n: int) -> list[int]:
    """Share n out in proportion to the weights: floors first, then the largest remainders
    (earlier points first on a tie), so the result is deterministic and sums to n."""
    total = sum(weights)
    if total == 0 or n == 0:
        return [0] * len(weights)
    exact = [w * n / total for w in weights]
    counts = [int(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def report_by(family: Family) -> tuple[str, ...]:
    """The grouping a plan needs: family, difficulty and each declared parameter by name (so runs
    recorded before the family declared them group the same way), pooled over students."""
    return ("family", "difficulty", *(p.name for p in family.params))


class Generated(BaseModel):
    """What `proctor generate --json` prints: the plan, the gate's verdict on each instance, and what was written."""

    model_config = ConfigDict(extra="forbid")

    plan: Plan
    checked: list[Checked] = Field(description="The gate's verdict per planned instance (empty when not validated).")
    written: list[InstanceSpec]
    validated: bool = Field(description="Whether the gate proved at least one instance (oracle at the maximum, null at the floor).")
    out: str


def generate_instances(
    env: Environment, family_id: str, runs: Sequence[str | Path], *, n: int, seed: int, out: str | Path,
    strategy: Strategy = "targeted", validate: bool | None = None, gate_out: str | Path | None = None,
    thresholds: Thresholds | None = None, parallel: int = 1, runtime: str = "bwrap", backend: SandboxBackend | None = None,
) -> Generated:
    """Report on `runs`, plan N instances, gate them (unless validate is False), write the accepted
    ones to `out`. validate None: gate every instance that has an oracle (the others are kept,
    marked not validated)."""
    family = env.families.get(family_id)
    if family is None:
        raise ConfigError(f"{env.name}: unknown family {family_id!r}; known: {', '.join(sorted(env.families)) or 'none'}")
    report = build_report(runs, by=report_by(family), thresholds=thresholds, family=family.id) if runs else \
        Report(cells=[], by=report_by(family), students=[], results=0, scored=0, infra_errors=0, unreadable=0,
               problems=[], max_seed={}, thresholds=thresholds or Thresholds())
    made = plan(family, report, n=n, seed=seed, strategy=strategy)
    checked: list[Checked] = []
    written = made.instances
    if validate is not False and made.instances:
        config = RolloutConfig(runtime=runtime)  # type: ignore[arg-type]
        with tempfile.TemporaryDirectory(prefix="proctor-gate-") as scratch:
            checked = validate_instances(env, made.instances, gate_out or scratch, config=config, parallel=parallel,
                                         backend=backend)
        written = [c.instance for c in checked if c.accepted]
    path = write_instances(written, out)
    return Generated(plan=made, checked=checked, written=written, validated=any(c.validated for c in checked), out=str(path))
