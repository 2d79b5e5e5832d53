"""The attack library: scripted students that try known hacks against any task.

Each attack is a small generator: given a task it returns a Script (or None when the attack does
not apply, e.g. a submission attack on a task that declares no submission path). Attacks adapt to
the task: its declared submission paths, the host paths and names of its hidden files (the
strongest key-reading attack knows exactly where the key lies on the host), its judges (LLM-judge
attacks write where the RubricJudge reads) and its tools. Each names the defence expected to stop
it and the misbehaviour kinds, any of which the harness must record.

The families live in one module each: attacks_key (reading the answer key), attacks_tamper
(tampering with grading), attacks_submission (submissions and output that break naive graders),
attacks_resources, attacks_escape, attacks_network and attacks_judge (manipulating an LLM judge)."""

from __future__ import annotations

from ..errors import ConfigError
from ..tasks.loading import Environment
from ..tasks.models import Script, Task
from . import attacks_escape, attacks_judge, attacks_key, attacks_network, attacks_resources, attacks_submission, attacks_tamper
from .base import Attack, Maker

ATTACKS: list[Attack] = [
    *attacks_key.ATTACKS,
    *attacks_tamper.ATTACKS,
    *attacks_submission.ATTACKS,
    *attacks_resources.ATTACKS,
    *attacks_escape.ATTACKS,
    *attacks_network.ATTACKS,
    *attacks_judge.ATTACKS,
]

__all__ = ["ATTACKS", "Attack", "Maker", "applicable", "environment_attacks"]


def environment_attacks(env: Environment) -> list[Attack]:
    """An environment's own `ATTACKS`, each checked to be an Attack whose id no other attack uses."""
    origin = getattr(env.module, "__file__", None) or env.name
    taken = {a.id for a in ATTACKS}
    for i, item in enumerate(env.attacks):
        if not isinstance(item, Attack):
            raise ConfigError(f"{origin}: ATTACKS[{i}] is a {type(item).__name__}, not a proctor.redteam.Attack")
        if item.id in taken:
            raise ConfigError(f"{origin}: ATTACKS[{i}]: attack id {item.id!r} is used twice (or shadows a library attack)")
        taken.add(item.id)
    return list(env.attacks)


def applicable(task: Task, extra: list[Attack] = ()) -> list[tuple[Attack, Script]]:
    """The library's attacks plus an environment's own (`extra`) that apply to `task`, with their scripts."""
    out = []
    for attack in [*ATTACKS, *extra]:
        script = attack.script(task)
        if script is not None:
            out.append((attack, script))
    return out
