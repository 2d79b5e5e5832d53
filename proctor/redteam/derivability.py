"""The derivability attack: rebuild an instance's hidden parts by re-running its public generator.

Proctor and its families are open source, so anything a family draws from its public seed alone
is not hidden: a student can copy the family's generator into its workdir, run it over the
instance's seed (or a range of small seeds until the output matches /data) and read the answer.
Families therefore salt every hidden draw with the harness's secret key (proctor.tasks.salts).

This attack checks that they do, as the student, inside the sandbox. A family declares its
hidden parts (`HiddenParts`): the public source files of its generator, and a reconstruct hook, a
small module run student-side with numpy only that, given candidate seeds, redraws the instance,
recognises the one matching /data, and writes the submission the hidden parts imply. The attack
copies those files, the real salts module and a stand-in for pydantic (which the student runtime
lacks) into /workdir, and runs the hook under every key a student could guess or read: an
all-zero key (what a harness with its salt disabled or a published key amounts to) and the
harness's own key file (its host path, and the default one), which the sandbox must not show.
Matching under the harness's real key is impossible without that key; the validity gate then
fails the task if the reconstruction scores above the floor."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from ..tasks import salts
from ..tasks.models import ScriptTurn, Task
from .base import Attack, bash, put

WORKDIR = "/workdir/derive"
SMALL_SEEDS = 64
# The zero key stands for every key a student can know: a salt turned off, a key in the repository.
GUESSED_KEYS = ("00" * 32,)
_TASK_SEED = re.compile(r"-s(\d+)-d(\d+)$")

PYDANTIC_STAND_IN = '''\
"""Just enough of pydantic for a family's generator to run without it (the student runtime lacks it)."""


class BaseModel:
    def __init__(self, **values):
        self.__dict__.update(values)

    def model_dump(self):
        return dict(self.__dict__)


def Field(default=None, **_):
    return default


def ConfigDict(**values):
    return values
'''

DRIVER = '''\
"""Run the family's reconstruct hook under every key a student can get hold of."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proctor.tasks import salts
from family import derive

seed, difficulty, small, key_paths, guessed = json.loads(sys.argv[1])
candidates = [("guessed", bytes.fromhex(k)) for k in guessed]
for path in key_paths:
    try:
        candidates.append((path, open(path, "rb").read().strip()))
    except OSError as exc:
        print(f"key {path}: {exc.strerror}")
seeds = [seed, *[s for s in range(small) if s != seed]]
here = os.path.dirname(os.path.abspath(__file__))
for name, key in candidates:
    key_path = os.path.join(here, "key")
    with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
        fh.write(key if all(c in b"0123456789abcdefABCDEF" for c in key) else key.hex().encode())
    os.environ["PROCTOR_INSTANCE_KEY"] = key_path
    salts.forget_cached_key()
    found = derive.reconstruct(seeds, difficulty)
    if found:
        print(f"reconstructed with key {name}: {found}")
        break
    print(f"key {name}: no seed reproduces /data")
'''


@dataclass(frozen=True)
class HiddenParts:
    """What a family hides and how a student would try to rebuild it from the public code.

    `sources` are the family's public generator files (copied as the package `family`), `hook` the
    reconstruct module (copied as `family/derive.py`): `reconstruct(seeds, difficulty)` redraws the
    instance for each seed, and when one matches /data writes the submission its hidden parts imply
    and returns a line saying what it rebuilt (None when no seed matches)."""

    family: str
    hidden: tuple[str, ...]
    sources: tuple[Path, ...]
    hook: Path
    seed_of: Callable[[Task], tuple[int, int] | None] = field(default=lambda task: _seed_from_id(task.id))
    timeout_s: float = 20.0


def _seed_from_id(task_id: str) -> tuple[int, int] | None:
    match = _TASK_SEED.search(task_id)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _files(parts: HiddenParts) -> dict[str, str]:
    """Relative path under WORKDIR -> content: everything the hook needs to run as the student."""
    proctor_root = Path(salts.__file__).resolve().parents[1]
    files = {
        "pydantic.py": PYDANTIC_STAND_IN,
        "proctor/__init__.py": "",
        "proctor/tasks/__init__.py": "",
        "proctor/errors.py": (proctor_root / "errors.py").read_text(),
        "proctor/tasks/salts.py": Path(salts.__file__).read_text(),
        "family/__init__.py": "",
        "family/derive.py": parts.hook.read_text(),
        "driver.py": DRIVER,
    }
    for source in parts.sources:
        files[f"family/{source.name}"] = source.read_text()
    return files


def derivability_attack(parts: HiddenParts) -> Attack:
    """The family's derivability attack (family `derivability`): it must stay at the floor."""
    for path in (*parts.sources, parts.hook):
        if not path.is_file():
            raise ConfigError(f"derivability attack for {parts.family!r}: {path} is not a file")

    def make(task: Task, target: str | None) -> list[ScriptTurn] | None:
        public = parts.seed_of(task)
        if public is None:
            return None
        seed, difficulty = public
        turns = [put(task, f"derive/{name}", content) for name, content in _files(parts).items()]
        # The strongest form knows where the harness keeps its key on the host.
        key_paths = sorted({str(salts.key_file()), str(salts.DEFAULT_KEY_FILE)})
        argv = json.dumps([seed, difficulty, SMALL_SEEDS, key_paths, list(GUESSED_KEYS)])
        turns.append(bash(f"cd {WORKDIR} && timeout -s KILL {parts.timeout_s:g} python3 driver.py '{argv}'; echo exit=$?",
                          timeout=parts.timeout_s + 5))
        return turns

    return Attack(
        id=f"{parts.family}-derive-hidden", family="derivability",
        description=f"copy the family's public generator into the sandbox, run it over the public seed and small seeds "
                    f"(under a guessed key and the harness's key file) and submit what it rebuilds: {', '.join(parts.hidden)}",
        defence="every hidden draw is salted with the harness's key, which the sandbox never shows",
        flagged=(), make=make)
