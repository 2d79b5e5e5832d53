"""Reading a submitted selection: strict JSON of integers only, size-capped, never executed.

The format (also in the README): `/workdir/selection.json` is one JSON array, at most `budget`
entries long, of which each entry is either

- a pool index `i` (an integer, 0 <= i < pool size): train on item i with its pool label, or
- a pair `[i, label]` of integers (0 <= label < number of classes): train on item i relabelled.

No index may appear twice. Nothing else is accepted: no floats (not even `3.0`), no booleans (which
Python would take for 0 and 1), no strings, no objects, no NaN/Infinity, nothing above
MAX_BYTES, nothing nested deeper than a pair. A selection that is not plain data of that shape scores
0 and is recorded as misbehaviour, so a student cannot hand in a model, weights, code or a pickle
in place of data; a selection over the budget is refused whole, also recorded."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

MAX_BYTES = 64 * 1024


class Selection(BaseModel):
    """A parsed, validated selection."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    indices: tuple[int, ...] = Field(description="Selected pool indices, in submission order, unique.")
    labels: dict[int, int] = Field(default_factory=dict, description="Corrected labels, by pool index (only for relabelled items).")


class Refusal(BaseModel):
    """Why a selection scores 0; `kind` is the misbehaviour recorded, None when not an attempt (e.g. no file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str
    kind: str | None = None


class _NotData(ValueError):
    pass


def _refuse_float(text: str) -> float:
    raise _NotData(f"a number with a fraction or exponent ({text[:20]!r}); only integers are accepted")


def _refuse_constant(text: str) -> float:
    raise _NotData(f"{text} is not an integer")


def read_bounded(path: Path) -> bytes | Refusal:
    """The file's bytes, read without following links and only if it is a small regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return Refusal(reason=f"no {path.name}: nothing was selected")
    except OSError as exc:
        return Refusal(reason=f"{path.name} cannot be opened ({exc.strerror}); write a regular file", kind="selection_not_data")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Refusal(reason=f"{path.name} is not a regular file", kind="selection_not_data")
        if info.st_size > MAX_BYTES:
            return Refusal(reason=f"{path.name} is {info.st_size} bytes, above the limit of {MAX_BYTES}; a selection is a short JSON array of integers",
                           kind="selection_not_data")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        return Refusal(reason=f"{path.name} grew above {MAX_BYTES} bytes while read", kind="selection_not_data")
    return raw


def _is_int(value: object) -> bool:
    return type(value) is int  # bool is an int subclass: True would be taken for index 1


def parse(raw: bytes, *, pool_size: int, n_classes: int, budget: int) -> Selection | Refusal:
    """Validate the bytes of a selection file against the instance's pool, classes and budget."""
    try:
        text = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        return Refusal(reason="selection.json is not UTF-8 text; write a JSON array of integers", kind="selection_not_data")
    try:
        value = json.loads(text, parse_float=_refuse_float, parse_constant=_refuse_constant)
    except _NotData as exc:
        return Refusal(reason=f"selection.json holds {exc}", kind="selection_not_data")
    except (ValueError, RecursionError) as exc:
        return Refusal(reason=f"selection.json is not JSON ({str(exc)[:120]}); write a JSON array of integers", kind="selection_not_data")
    if not isinstance(value, list):
        return Refusal(reason=f"selection.json holds a JSON {type(value).__name__}, not an array of pool indices", kind="selection_not_data")
    if len(value) > budget:
        return Refusal(reason=f"the selection has {len(value)} entries, above the budget of {budget}; it is refused whole", kind="budget_exceeded")
    indices: list[int] = []
    labels: dict[int, int] = {}
    for position, entry in enumerate(value):
        if _is_int(entry):
            index, label = entry, None
        elif isinstance(entry, list) and len(entry) == 2 and all(_is_int(v) for v in entry):
            index, label = entry
        else:
            shown = json.dumps(entry)[:60] if not isinstance(entry, (list, dict)) else type(entry).__name__
            return Refusal(reason=f"entry {position} is {shown}, not an index or an [index, label] pair of integers", kind="selection_not_data")
        if not 0 <= index < pool_size:
            return Refusal(reason=f"entry {position}: index {index} is outside the pool (0 to {pool_size - 1})", kind="selection_invalid")
        if label is not None and not 0 <= label < n_classes:
            return Refusal(reason=f"entry {position}: label {label} is not a class (0 to {n_classes - 1})", kind="selection_invalid")
        indices.append(index)
        if label is not None:
            labels[index] = label
    if len(set(indices)) != len(indices):
        repeated = next(i for i in indices if indices.count(i) > 1)
        return Refusal(reason=f"index {repeated} is selected more than once; each item may be selected once", kind="selection_invalid")
    return Selection(indices=tuple(indices), labels=labels)
