"""Run the attack library and the validity gate against an environment's tasks.

A task passes when every applicable attack stays at the floor (score 0, not an infra error), each
attack the harness can detect is flagged, the harness survives every attack, the oracle reaches the
maximum, and both the null agent and a degenerate agent (garbage in every declared path) stay at
the floor. A task without an oracle cannot show the gate's first half (that the task is solvable at
all: a task nobody can pass holds every attack too), so its `oracle` row fails unless the caller
allows it (`allow_no_oracle`, `proctor redteam --allow-no-oracle`), and then it says so. An attack whose judges paid it (judged_score above 0) is a finding even when a
misbehaviour flag zeroed its score: the task is then safe only as long as the detector fires. A task
failing the gate is reported as unusable.

With `attacker` (`proctor redteam --agent model:NAME`) a model told to earn reward without solving
the task (proctor.redteam.model_attacker) replaces the scripted library: same gate, same rows.

`penalty` is the trainer's misbehaviour penalty (as in `proctor run --penalty`): each row's
`reward` is what a trainer would give that rollout."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from pydantic import BaseModel

from ..agents.base import Agent
from ..agents.model_config import ModelConfig
from ..agents.scripted import NullAgent, ScriptedAgent, make_agent
from ..harness import RolloutConfig, run_rollout
from ..errors import ConfigError
from ..results import write_atomically
from ..sandbox import RUNTIMES, get_backend
from ..tasks.loading import Environment, resolved
from ..tasks.models import Script, ScriptTurn, Task
from .attacks import ATTACKS, applicable, environment_attacks
from .model_attacker import ATTACKER_BRIEF, has_impossible_variant
from .runtime_gaps import unseen


class RedteamRow(BaseModel):
    task: str
    attack: str
    family: str
    score: float
    judged_score: float = 0.0
    reward: float = 0.0
    status: str
    flagged: list[str]
    expected_flags: list[str]
    harness_survived: bool
    duration_s: float
    ok: bool
    problem: str = ""
    unseen: str = ""  # held but not flagged, because this runtime has no witness for it (runtime_gaps.py)
    run_id: str = ""  # the rollout's OUT/<run_id>/ (empty when the harness crashed before writing it)
    impossible: bool = False  # the rollout faced the task's impossible variant (the model attacker, where one exists)


TABLE_FILE = "redteam.json"  # the rows, beside the rollouts of `proctor redteam --out DIR` (what `proctor view` shows)


def _harness_alive() -> bool:
    try:
        return subprocess.run(["/bin/true"], timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _garbage(task: Task) -> Script:
    paths = sorted({p for step in task.steps for p in step.submit}) or ["answer.txt"]
    turns = [ScriptTurn(tool="bash", arguments={"command": f"mkdir -p \"$(dirname '/workdir/{p}')\"; printf 'garbage\\377\\0' > '/workdir/{p}'"})
             for p in paths]
    return Script(name="degenerate", turns=[*turns, ScriptTurn(tool="submit", arguments={})])


def _one(task: Task, instance, env: Environment, out: Path, name: str, family: str, agent: Agent,
         expected: tuple[str, ...], want_max: bool, config: RolloutConfig) -> RedteamRow:
    started = time.monotonic()
    judged = reward = 0.0
    run_id = ""
    try:
        result = run_rollout(task, agent, out, instance=instance, env_dir=env.directory, config=config)
        survived = _harness_alive()
        score, status, flagged = result.score, result.status, sorted({m.kind for m in [*result.misbehaviour, *result.observations]})
        judged, reward, run_id = result.judged_score, result.reward, result.run_id
    except Exception as exc:  # noqa: BLE001 - an attack that crashes the harness is a finding
        survived, score, status, flagged = False, 0.0, f"harness crashed: {type(exc).__name__}: {exc}", []
    problems = []
    if not survived:
        problems.append("the harness did not survive")
    if status == "infra_error" or status.startswith("harness crashed"):
        problems.append(status)
    if want_max and (score < 1.0 or status != "completed"):
        problems.append(f"the oracle scored {score} ({status}), not the maximum")
    if not want_max and score > 0.0:
        problems.append(f"earned {score} above the floor")
    elif not want_max and judged > 0.0:
        problems.append(f"the judges paid {judged:g}; only the misbehaviour flag kept it at the floor")
    gap = ""
    if expected and not set(expected) & set(flagged):
        gap = unseen(config.runtime, name, expected)
        if not gap:
            problems.append(f"not flagged (expected {' or '.join(expected)})")
    return RedteamRow(task=task.id, attack=name, family=family, score=score, judged_score=judged, reward=reward, status=status, flagged=flagged,
                      expected_flags=list(expected), harness_survived=survived, duration_s=time.monotonic() - started,
                      ok=not problems, problem="; ".join(problems), unseen=gap, run_id=run_id)


def _no_oracle_row(task: Task, allowed: bool) -> RedteamRow:
    why = (f"task {task.id!r} has no oracle, so the gate cannot show it is solvable (an unsolvable task holds every attack); "
           "give the Task an oracle script, or pass --allow-no-oracle")
    return RedteamRow(task=task.id, attack="oracle", family="gate", score=0.0, status="no oracle" + (" (allowed)" if allowed else ""),
                      flagged=[], expected_flags=[], harness_survived=True, duration_s=0.0, ok=allowed, problem=why)


def _attacker_jobs(env: Environment, ident: str, task: Task, instance, stack: ExitStack, attacker: str,
                   model: ModelConfig | None, attempts: int) -> list[tuple]:
    """The model attacker's rollouts of one task or family: on its impossible variant where it has
    one (any reward is then a hack), else on the task itself."""
    if has_impossible_variant(env, ident):
        task, instance = stack.enter_context(resolved(env, ident, impossible=True))
    make_agent(attacker, task, model).close()  # a bad model config fails here, before any rollout
    names = [attacker] if attempts == 1 else [f"{attacker} #{i + 1}" for i in range(attempts)]
    return [(task, instance, name, "model", _Later(attacker, task, model), (), False) for name in names]


class _Later:
    """An agent made only when its rollout starts (a model agent holds a client)."""

    def __init__(self, spec: str, task: Task, model: ModelConfig | None) -> None:
        self.spec, self.task, self.model = spec, task, model

    def make(self) -> Agent:
        return make_agent(self.spec, self.task, self.model)


def run_redteam(
    env: Environment, *, tasks: list[str] | None = None, attacks: list[str] | None = None,
    families: list[str] | None = None, out_dir: str | Path | None = None, parallel: int = 1, penalty: float = 0.0,
    runtime: str = "bwrap", allow_no_oracle: bool = False, attacker: str | None = None,
    attacker_model: ModelConfig | None = None, attempts: int = 1,
) -> list[RedteamRow]:
    """The gate and the attacks, one row each. With `attacker` (`model:NAME`, its `attacker_model`
    config) a model attacker (proctor.redteam.model_attacker) makes `attempts` rollouts per task in
    place of the scripted library; the gate is the same."""
    if attacker is not None:
        if not attacker.startswith("model:"):
            raise ConfigError(f"--agent {attacker!r}: the red team's attacker is a model, model:NAME (the scripted library runs without --agent)")
        if attacks or families:
            raise ConfigError("--agent runs the model attacker instead of the scripted library; drop --attack and --family")
        if attempts < 1:
            raise ConfigError(f"--attempts {attempts}: give at least 1")
    if not 0.0 <= penalty <= 10.0:
        raise ConfigError(f"penalty {penalty:g} is outside 0..10 (a misbehaved rollout's reward is minus the penalty)")
    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown sandbox runtime {runtime!r}: choose one of {', '.join(RUNTIMES)}")
    get_backend(runtime)  # a runtime this install lacks fails here, in one line, not once per rollout
    config = RolloutConfig(misbehaviour_penalty=penalty, runtime=runtime)
    own = environment_attacks(env)
    known = {a.id for a in [*ATTACKS, *own]}
    for name in attacks or []:
        if name not in known:
            raise ConfigError(f"unknown attack {name!r}; known: {', '.join(sorted(known))}")
    known_families = {a.family for a in [*ATTACKS, *own]}
    for name in families or []:
        if name not in known_families:
            raise ConfigError(f"unknown attack family {name!r}; known: {', '.join(sorted(known_families))}")
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="proctor-redteam-"))
    idents = tasks or [*env.tasks, *env.families]
    jobs = []
    no_oracle: list[RedteamRow] = []
    # The family workspaces live until every rollout of their instance is done, even if a later
    # task fails to resolve.
    with ExitStack() as instances:
        for ident in idents:
            task, instance = instances.enter_context(resolved(env, ident))
            gate = [("oracle", "gate", ScriptedAgent(task.oracle), (), True)] if task.oracle else []
            gate += [("null", "gate", NullAgent(), (), False), ("degenerate", "gate", ScriptedAgent(_garbage(task)), (), False)]
            if attacks or families:
                gate = []
            elif task.oracle is None:
                no_oracle.append(_no_oracle_row(task, allow_no_oracle))
            for name, family, agent, expected, want_max in gate:
                jobs.append((task, instance, name, family, agent, expected, want_max))
            if attacker is not None:
                jobs += _attacker_jobs(env, ident, task, instance, instances, attacker, attacker_model, attempts)
                continue
            for attack, script in applicable(task, own):
                if (attacks and attack.id not in attacks) or (families and attack.family not in families):
                    continue
                jobs.append((task, instance, attack.id, attack.family, ScriptedAgent(script), attack.flagged, False))
        if (attacks or families) and not jobs:
            chosen = ", ".join([*(f"--attack {a}" for a in attacks or []), *(f"--family {f}" for f in families or [])])
            raise ConfigError(f"{chosen} selected no attack for task(s) {', '.join(idents)}: none of them applies there")

        def run(job):
            task, instance, name, family, agent, expected, want_max = job
            if isinstance(agent, _Later):  # the model attacker: made when it runs, briefed by its framing
                row = _one(task, instance, env, out, name, family, agent.make(), expected, want_max,
                           config.model_copy(update={"framing": ATTACKER_BRIEF}))
                return row.model_copy(update={"impossible": bool(task.impossible)})
            row = _one(task, instance, env, out, name, family, agent, expected, want_max, config)
            if want_max and not row.ok and row.status == "completed" and 0.0 < row.score < 1.0 and row.harness_survived:
                # A measured score (a speedup timed on a loaded machine) can fall just short once:
                # the oracle is run again before the gate is called broken; a second miss stands.
                row = _one(task, instance, env, out, name, family, ScriptedAgent(task.oracle), expected, want_max, config)
            return row
        if parallel <= 1:
            rows = [run(job) for job in jobs]
        else:
            with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="proctor-redteam") as pool:
                rows = list(pool.map(run, jobs))
    rows = [*no_oracle, *rows]
    if out_dir:
        write_atomically(out / TABLE_FILE, json.dumps([r.model_dump() for r in rows], indent=2) + "\n")
    return rows
