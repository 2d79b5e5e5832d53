"""The `proctor redteam` table of a red-team run directory (its `redteam.json`, written by
`proctor redteam --out DIR`), with each row linked to its rollout."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..redteam.run import TABLE_FILE, RedteamRow
from .files import Unreadable, read_bounded, regular_stat


@dataclass
class RedteamTable:
    directory: Path
    rows: list[RedteamRow] = field(default_factory=list)
    note: str = ""


def read_table(directory: Path) -> RedteamTable:
    table = RedteamTable(directory)
    try:
        data = json.loads(read_bounded(directory / TABLE_FILE).decode("utf-8", errors="surrogateescape"))
    except (Unreadable, ValueError) as exc:
        table.note = f"{TABLE_FILE} cannot be read: {exc}"
        return table
    if not isinstance(data, list):
        table.note = f"{TABLE_FILE} is malformed: not a JSON list of rows"
        return table
    bad = 0
    for item in data:
        try:
            table.rows.append(RedteamRow.model_validate(item))
        except ValidationError:
            bad += 1
    if bad:
        table.note = f"{bad} malformed row(s) of {TABLE_FILE} not shown"
    return table


def find_tables(roots: list[Path]) -> list[RedteamTable]:
    """The tables of the run directories given (`proctor redteam --out DIR` writes DIR/redteam.json)."""
    return [read_table(root) for root in roots if regular_stat(root / TABLE_FILE) is not None]
