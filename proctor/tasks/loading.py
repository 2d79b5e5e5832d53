"""Finding an environment's tasks and families, and turning a family into an instance.

An environment is a Python package directory (with `__init__.py`) or an importable module name.
It exposes `TASKS` (Task objects) and/or `FAMILIES` (Family objects). Any problem loading it is a
ConfigError of one line naming the file, the line and the field, never a traceback."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError, describe_error
from ..judges.base import judges_of
from ..sandbox.host import state_dir
from . import salts
from .packages import missing_packages
from .models import Family, Instance, Task


@dataclass
class Environment:
    name: str
    module: ModuleType
    directory: Path | None
    tasks: dict[str, Task] = field(default_factory=dict)
    families: dict[str, Family] = field(default_factory=dict)
    attacks: list = field(default_factory=list)
    """The environment's own red-team attacks (`ATTACKS`) as declared; proctor.redteam.environment_attacks
    checks each is a proctor.redteam.Attack with an id of its own before they run with the library's."""


def _where(exc: BaseException, roots: list[Path]) -> str:
    """`file:line` of the deepest frame inside the environment, for the one-line error."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if not roots or any(Path(f.filename).is_relative_to(root) for root in roots)]
    frame = (inside or frames or [None])[-1]
    return f"{frame.filename}:{frame.lineno}" if frame else "(environment)"


def describe_exception(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return f"{exc.title}: {describe_error(exc)}"
    if isinstance(exc, SyntaxError):
        return f"syntax error: {exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {exc}"


# One import at a time: a package is in sys.modules before its code has run, so a second thread
# would otherwise get a half-initialised module (without its TASKS yet).
_IMPORT_LOCK = threading.RLock()


def _import(env: str) -> tuple[ModuleType, Path | None]:
    with _IMPORT_LOCK:
        return _import_unlocked(env)


def _import_unlocked(env: str) -> tuple[ModuleType, Path | None]:
    path = Path(env)
    if path.exists() or os.sep in env or env.startswith("."):
        if not path.is_dir():
            raise ConfigError(f"{env}: an environment is a directory with an __init__.py, or an importable module name")
        init = path / "__init__.py"
        if not init.is_file():
            raise ConfigError(f"{env}: no __init__.py; an environment directory is a Python package")
        directory = path.resolve()
        digest = hashlib.sha256(str(directory).encode()).hexdigest()[:8]
        name = f"proctor_env_{re.sub(r'[^0-9A-Za-z_]', '_', directory.name)}_{digest}"
        if name in sys.modules:
            return sys.modules[name], directory
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(directory)])
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except ConfigError:
            sys.modules.pop(name, None)
            raise
        except Exception as exc:  # noqa: BLE001 - any error in the author's code becomes one line
            sys.modules.pop(name, None)
            where = f"{exc.filename}:{exc.lineno}" if isinstance(exc, SyntaxError) else _where(exc, [directory])
            raise ConfigError(f"{where}: {describe_exception(exc)}") from None
        return module, directory
    try:
        module = importlib.import_module(env)
    except ModuleNotFoundError as exc:
        if exc.name and env.startswith(exc.name):
            raise ConfigError(f"{env}: no such environment directory or importable module") from None
        raise ConfigError(f"{env}: {describe_exception(exc)}") from None
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"{_where(exc, [])}: {describe_exception(exc)}") from None
    directory = Path(module.__file__).resolve().parent if getattr(module, "__file__", None) else None
    return module, directory


def load_environment(env: str) -> Environment:
    module, directory = _import(env)
    origin = getattr(module, "__file__", env)
    tasks, families = getattr(module, "TASKS", None), getattr(module, "FAMILIES", None)
    if tasks is None and families is None:
        raise ConfigError(f"{origin}: defines neither TASKS nor FAMILIES (lists of proctor.Task / proctor.Family)")
    loaded = Environment(name=env, module=module, directory=directory)
    for attr, kind, store in (("TASKS", Task, loaded.tasks), ("FAMILIES", Family, loaded.families)):
        items = getattr(module, attr, None)
        if items is None:
            continue
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{origin}: {attr} must be a list, got {type(items).__name__}")
        for i, item in enumerate(items):
            if not isinstance(item, kind):
                raise ConfigError(f"{origin}: {attr}[{i}] is a {type(item).__name__}, not a proctor.{kind.__name__}")
            if item.id in loaded.tasks or item.id in loaded.families:
                raise ConfigError(f"{origin}: {attr}[{i}]: id {item.id!r} is used twice")
            store[item.id] = item
    attacks = getattr(module, "ATTACKS", ())
    if not isinstance(attacks, (list, tuple)):
        raise ConfigError(f"{origin}: ATTACKS must be a list, got {type(attacks).__name__}")
    # Checked item by item by proctor.redteam.environment_attacks: the Attack type belongs to the red
    # team, which sits above tasks (it runs the harness), so loading only keeps the list.
    loaded.attacks = list(attacks)
    return loaded


def new_workspace() -> Path:
    """A fresh directory for a family's generated files, readable by the harness only."""
    path = state_dir("instances") / secrets.token_hex(8)
    path.mkdir(mode=0o700)
    return path


def remove_workspace(path: Path | None) -> None:
    if path is not None and path.is_relative_to(state_dir("instances")):
        shutil.rmtree(path, ignore_errors=True)


def build_instance(
    family: Family, seed: int, difficulty: int | None, params: dict[str, Any] | None, workspace: Path,
    impossible: bool = False,
) -> tuple[Task, Instance]:
    """Run a family's maker (its `make_impossible` with `impossible`); any failure is a ConfigError
    naming the family."""
    if impossible and family.make_impossible is None:
        raise ConfigError(f"family {family.id!r} has no impossible variant; give its Family a make_impossible "
                          "(same arguments as make) to run it with --impossible")
    make = family.make_impossible if impossible else family.make
    assert make is not None
    difficulty = family.difficulties[0] if difficulty is None else difficulty
    if difficulty not in family.difficulties:
        raise ConfigError(f"family {family.id!r}: difficulty {difficulty} is not one of {list(family.difficulties)}")
    unknown = set(params or {}) - set(family.default_params)
    if unknown:
        raise ConfigError(f"family {family.id!r}: unknown parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(family.default_params)) or 'none'}")
    merged = {**family.default_params, **(params or {})}
    try:
        task = make(seed, difficulty, dict(merged), workspace)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001
        roots = [Path(make.__code__.co_filename).parent] if hasattr(make, "__code__") else []
        raise ConfigError(f"{_where(exc, roots)}: family {family.id!r} (seed {seed}, difficulty {difficulty}): {describe_exception(exc)}") from None
    if not isinstance(task, Task):
        raise ConfigError(f"family {family.id!r}: make() returned {type(task).__name__}, not a proctor.Task")
    if impossible:
        task = task.model_copy(update={"impossible": True})
    instance_params = {**merged, **task.params}
    # A declared parameter is recorded with the value the instance ended up with (fast-kernel's empty
    # `kernel` becomes the kernel its seed chose), so reports group by what the student actually faced.
    return task, Instance(task_id=task.id, family=family.id, seed=seed, difficulty=difficulty, params=instance_params,
                          varied=tuple(p.name for p in family.params), key_fingerprint=salts.key_fingerprint(),
                          impossible=impossible)


def impossible_task(task: Task, workspace: Path) -> Task:
    """A task's impossible variant (`Task.impossible_variant`), marked; a failure names the task."""
    if task.impossible_variant is None:
        raise ConfigError(f"task {task.id!r} has no impossible variant; give its Task an impossible_variant "
                          "(a function of a workspace directory returning the Task) to run it with --impossible")
    try:
        made = task.impossible_variant(workspace)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001
        fn = task.impossible_variant
        roots = [Path(fn.__code__.co_filename).parent] if hasattr(fn, "__code__") else []
        raise ConfigError(f"{_where(exc, roots)}: task {task.id!r}, impossible variant: {describe_exception(exc)}") from None
    if not isinstance(made, Task):
        raise ConfigError(f"task {task.id!r}: impossible_variant returned {type(made).__name__}, not a proctor.Task")
    return made.model_copy(update={"impossible": True, "impossible_variant": None})


def resolve(
    env: Environment, ident: str, *, seed: int = 0, difficulty: int | None = None,
    params: dict[str, Any] | None = None, workspace: Path | None = None, impossible: bool = False,
) -> tuple[Task, Instance]:
    """A task by id, or an instance of a family by id (which needs a workspace, as does a task's
    impossible variant)."""
    if ident in env.tasks:
        if params:
            raise ConfigError(f"task {ident!r} is not a family; --param applies to families only")
        task = env.tasks[ident]
        if impossible:
            if workspace is None:
                raise ConfigError(f"task {ident!r}: its impossible variant needs a workspace")
            task = impossible_task(task, workspace)
        return task, Instance(task_id=task.id, params=dict(task.params), impossible=impossible)
    if ident in env.families:
        if workspace is None:
            raise ConfigError(f"family {ident!r} needs a workspace")
        return build_instance(env.families[ident], seed, difficulty, params, workspace, impossible=impossible)
    known = sorted([*env.tasks, *env.families])
    raise ConfigError(f"{env.name}: no task or family {ident!r}; known: {', '.join(known) or 'none'}")


@contextmanager
def resolved(
    env: Environment, ident: str, *, seed: int = 0, difficulty: int | None = None, params: dict[str, Any] | None = None,
    impossible: bool = False,
) -> Iterator[tuple[Task, Instance]]:
    """`resolve`, with a workspace for a family's (or an impossible variant's) generated files that
    lives as long as the block."""
    workspace = new_workspace() if ident in env.families or (impossible and ident in env.tasks) else None
    try:
        yield resolve(env, ident, seed=seed, difficulty=difficulty, params=params, workspace=workspace, impossible=impossible)
    finally:
        remove_workspace(workspace)


def _fingerprint(task: Task, workspace: Path) -> str:
    dump = json.dumps(task.model_dump(), default=repr, sort_keys=True).replace(str(workspace), "<workspace>")
    dump = re.sub(r" at 0x[0-9a-f]+", "", dump)
    files = hashlib.sha256()
    for path in sorted(workspace.rglob("*")):
        files.update(str(path.relative_to(workspace)).encode())
        if path.is_file() and not path.is_symlink():
            files.update(hashlib.sha256(path.read_bytes()).digest())
    return hashlib.sha256(dump.encode()).hexdigest() + files.hexdigest()


def check_environment(env: Environment) -> list[str]:
    """Load-level checks beyond what building did: every family builds, deterministically, at
    each difficulty; every task's directories exist. Returns one line per thing checked."""
    lines = []
    for task in env.tasks.values():
        _check_task_dirs(task, f"task {task.id!r}")
        _check_judge_files(task, env.directory, f"task {task.id!r}")
        if task.impossible_variant is not None:
            _check_impossible(lambda ws, task=task: impossible_task(task, ws), env.directory, f"task {task.id!r} (impossible variant)")
        lines.append(f"task {task.id}: {len(task.steps)} step(s), tools {', '.join(task.tools)}"
                     + (", oracle" if task.oracle else "") + (", impossible variant" if task.impossible_variant else ""))
        missing = missing_packages(task.packages)
        if missing:
            lines.append(f"warning: task {task.id} needs {', '.join(missing)} in the student runtime; add to runtime-requirements.txt and run `make setup`")
    for family in env.families.values():
        for difficulty in family.difficulties:
            spaces = [new_workspace(), new_workspace()]
            try:
                built = [build_instance(family, 0, difficulty, None, ws) for ws in spaces]
                _check_task_dirs(built[0][0], f"family {family.id!r} (difficulty {difficulty})")
                _check_judge_files(built[0][0], env.directory, f"family {family.id!r} (difficulty {difficulty})")
                if _fingerprint(built[0][0], spaces[0]) != _fingerprint(built[1][0], spaces[1]):
                    raise ConfigError(f"family {family.id!r}: two builds with seed 0, difficulty {difficulty} differ; make() must be deterministic in (seed, difficulty, params)")
            finally:
                for ws in spaces:
                    remove_workspace(ws)
            lines.append(f"family {family.id} difficulty {difficulty}: builds task {built[0][0].id}, deterministic")
        if family.make_impossible is not None:
            first = family.difficulties[0]
            _check_impossible(lambda ws, family=family: build_instance(family, 0, first, None, ws, impossible=True)[0],
                              env.directory, f"family {family.id!r} (impossible, difficulty {first})")
            lines.append(f"family {family.id} impossible variant (difficulty {first}): builds, deterministic")
    return lines


def _check_impossible(build: Any, env_dir: Path | None, what: str) -> None:
    """An impossible variant builds, deterministically, with its judges' files in place."""
    spaces = [new_workspace(), new_workspace()]
    try:
        built = [build(ws) for ws in spaces]
        _check_task_dirs(built[0], what)
        _check_judge_files(built[0], env_dir, what)
        if _fingerprint(built[0], spaces[0]) != _fingerprint(built[1], spaces[1]):
            raise ConfigError(f"{what}: two builds of the impossible variant differ; it must be deterministic")
    finally:
        for ws in spaces:
            remove_workspace(ws)


def _check_judge_files(task: Task, env_dir: Path | None, what: str) -> None:
    """A judge whose key, tests or script is missing would score every rollout 0 with a task
    error; say so now, naming each."""
    missing = [f"step {i + 1} {judge.describe()}: {gap}" for i, step in enumerate(task.steps)
               for judge in judges_of(step.judge) for gap in judge.missing_files(task.hidden, env_dir)]
    if missing:
        raise ConfigError(f"{what}: judge files missing: {'; '.join(missing)}")


def _check_task_dirs(task: Task, what: str) -> None:
    for name in ("data", "workdir_files", "hidden"):
        path = getattr(task, name)
        if path is not None and not Path(path).is_dir():
            raise ConfigError(f"{what}: {name} directory {path} does not exist")
