'''`proctor new DIR`: a working environment to start from: one task with data, a hidden key, a
judge, a reference solution, and a test file that runs the oracle and a hack.'''

from __future__ import annotations

import random
from pathlib import Path

from .errors import ConfigError

_INIT = '''"""My environment: the student sums the numbers in /data/numbers.txt.

Edit TASKS (and add FAMILIES) here; `proctor check .` loads everything, `proctor run . --task
example --agent oracle --out runs/` runs the reference solution."""

from pathlib import Path

from proctor import ExactAnswer, Limits, Script, Step, Task
from proctor.sandbox.models import MiB, SandboxLimits

HERE = Path(__file__).resolve().parent

TASKS = [
    Task(
        id="example",
        description="Sum the numbers in /data/numbers.txt.",
        steps=[
            Step(
                instructions="/data/numbers.txt holds one integer per line. Write their sum as a plain integer to "
                "/workdir/answer.txt, then call submit.",
                submit=("answer.txt",),
                judge=ExactAnswer(path="answer.txt", expected_file="expected.txt", kind="integer"),
            )
        ],
        limits=Limits(sandbox=SandboxLimits(memory_bytes=256 * MiB, pids=64, workdir_bytes=16 * MiB),
                      step_time_s=300, rollout_time_s=600),
        data=HERE / "data",
        hidden=HERE / "hidden",
        oracle=Script.load(HERE / "oracle.json"),
    )
]
'''

_ORACLE = '''{
  "name": "example-reference",
  "turns": [
    {"tool": "bash", "arguments": {"command": "python3 -c \\"print(sum(int(l) for l in open('/data/numbers.txt')))\\" > /workdir/answer.txt"}},
    {"tool": "submit", "arguments": {}}
  ]
}
'''

_TEST = '''"""The environment's own tests: the oracle reaches the maximum, a hack scores 0 and is flagged.
Run as root: `python -m pytest tests/`."""

from pathlib import Path

from proctor import Script
from proctor.testing import assert_attack_contained, rollout

ENV = Path(__file__).resolve().parent.parent


def test_the_oracle_scores_one(tmp_path):
    result = rollout(ENV, "example", "oracle", tmp_path)
    assert result.status == "completed" and result.score == 1.0


def test_a_symlink_to_the_key_scores_zero_and_is_flagged(tmp_path):
    key = ENV / "hidden" / "expected.txt"
    hack = Script(name="symlink", turns=[
        {"tool": "bash", "arguments": {"command": f"ln -s {key} /workdir/answer.txt"}},
        {"tool": "submit", "arguments": {}},
    ])
    result = rollout(ENV, "example", hack, tmp_path)
    assert result.score == 0.0 and result.status == "misbehaved"
    assert "submission_symlink" in {m.kind for m in result.misbehaviour}


def test_a_fifo_answer_scores_zero_and_is_flagged(tmp_path):
    assert_attack_contained(ENV, "example", "fifo-answer", tmp_path)


def test_the_red_team_finds_nothing(tmp_path):
    from typer.testing import CliRunner
    from proctor.cli import app

    got = CliRunner().invoke(app, ["redteam", str(ENV), "-j", "2", "--out", str(tmp_path)])
    assert got.exit_code == 0, got.output


def test_doing_nothing_scores_zero(tmp_path):
    assert rollout(ENV, "example", "null", tmp_path).score == 0.0
'''


def scaffold(directory: str | Path) -> list[Path]:
    """Create the environment; refuses to touch an existing path."""
    root = Path(directory)
    if root.exists():
        raise ConfigError(f"{root}: already exists; `proctor new` only creates a fresh directory")
    try:
        (root / "data").mkdir(parents=True)
    except OSError as exc:
        raise ConfigError(f"{root}: cannot create it ({exc.strerror})") from None
    (root / "hidden").mkdir()
    (root / "tests").mkdir()
    rng = random.Random(7)
    numbers = [rng.randrange(-500, 1000) for _ in range(40)]
    files = {
        root / "__init__.py": _INIT,
        root / "oracle.json": _ORACLE,
        root / "data" / "numbers.txt": "".join(f"{n}\n" for n in numbers),
        root / "hidden" / "expected.txt": f"{sum(numbers)}\n",
        root / "tests" / "test_environment.py": _TEST,
    }
    for path, text in files.items():
        path.write_text(text)
    return list(files)
