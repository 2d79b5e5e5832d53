"""Every environment shipped in examples/ survives the whole red team: each attack of the library
and of the environment's own ATTACKS stays at the floor, the detectable ones are flagged, no judge
pays an attack, and the gate holds (oracle at the maximum, null and degenerate at the floor).

Environments are discovered, not listed: a package directory added to examples/ is attacked in CI
the day it lands. Each runs with two rollouts at once; the wall time is printed (`-s` shows it)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from proctor.redteam import run_redteam
from proctor.tasks.loading import load_environment

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ENVIRONMENTS = sorted(p.name for p in EXAMPLES.iterdir() if (p / "__init__.py").is_file())


def test_examples_are_discovered():
    assert {"quarterly_revenue", "essay_review"} <= set(ENVIRONMENTS)


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_every_attack_stays_at_the_floor_and_the_gate_holds(name, confinement, tmp_path):
    env = load_environment(str(EXAMPLES / name))
    started = time.monotonic()
    rows = run_redteam(env, out_dir=tmp_path, parallel=2)
    elapsed = time.monotonic() - started
    print(f"\nred team of examples/{name}: {len(rows)} rows in {elapsed:.1f} s")
    bad = [f"{r.task} {r.attack}: {r.problem} (score {r.score}, judged {r.judged_score}, {r.status}, flagged {r.flagged})" for r in rows if not r.ok]
    assert not bad, "\n".join(bad)
    names = {r.attack for r in rows}
    assert {"oracle", "null", "degenerate"} <= names, "every task needs an oracle for the gate"
    assert len(names) >= 60
