"""Instances files: one JSON object a line, `{"family", "seed", "difficulty", "params"}` (and the
`why` that `proctor generate` aimed it at). Read whole and checked before anything runs: a malformed
line names its number, an unknown family or parameter names itself."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from ..errors import ConfigError, describe_error
from ..results import write_atomically
from ..runner import InstanceSpec, instance_problem
from ..tasks.loading import Environment

MAX_LINE = 1 << 20  # a line longer than this is not an instance spec


def read_instances(path: str | Path, env: Environment | None = None) -> list[InstanceSpec]:
    """Every instance of the file, or a ConfigError naming the first bad line (nothing is half-read)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the instances file ({getattr(exc, 'strerror', None) or exc})") from None
    specs: list[InstanceSpec] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            raise ConfigError(f"{path}:{number}: line longer than {MAX_LINE} characters")
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno})") from None
        try:
            spec = InstanceSpec.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{path}:{number}: {describe_error(exc)} (want {{\"family\", \"seed\", \"difficulty\", \"params\"}})") from None
        if env is not None:
            problem = instance_problem(env, spec)
            if problem:
                raise ConfigError(f"{path}:{number}: {problem}")
        specs.append(spec)
    if not specs:
        raise ConfigError(f"{path}: no instances (one JSON object a line)")
    return specs


def write_instances(specs: Iterable[InstanceSpec], path: str | Path) -> Path:
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise ConfigError(f"{path}: directory {path.parent} does not exist")
    # `impossible` only where it is true: a plain instances file reads as it always did.
    write_atomically(path, "".join(spec.model_dump_json(exclude_none=True, exclude=None if spec.impossible else {"impossible"}) + "\n"
                                   for spec in specs))
    return path
