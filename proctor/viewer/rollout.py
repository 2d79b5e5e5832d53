"""One rollout as its page shows it: the result (checked against the schema, shown even when it is
not whole), one page of its transcript, and the misbehaviour with the transcript lines it came from."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..results import RolloutResult
from .catalog import RolloutRow
from .files import RESULT, TRANSCRIPT, Unreadable, read_bounded, regular_stat
from .transcript_pages import TranscriptPage, read_page


@dataclass
class RolloutView:
    row: RolloutRow
    result: dict[str, Any] = field(default_factory=dict)
    result_notes: list[str] = field(default_factory=list)
    transcript: TranscriptPage | None = None
    raw: list[tuple[str, int]] = field(default_factory=list)  # (file name, size) of each raw file present


def _schema_notes(data: dict) -> list[str]:
    try:
        RolloutResult.model_validate(data)
    except ValidationError as exc:
        notes = []
        for error in exc.errors()[:10]:
            where = ".".join(str(p) for p in error["loc"]) or "(top level)"
            notes.append(f"result.json field {where}: {error['msg']}")
        if exc.error_count() > 10:
            notes.append(f"... and {exc.error_count() - 10} more schema problems")
        return notes
    return []


def load(row: RolloutRow, page: int) -> RolloutView:
    view = RolloutView(row=row)
    try:
        data = json.loads(read_bounded(row.directory / RESULT).decode("utf-8", errors="surrogateescape"))
    except Unreadable as exc:
        view.result_notes.append(str(exc) + (" (still running, or the harness died)" if "missing" in str(exc) else ""))
    except ValueError as exc:
        view.result_notes.append(f"result.json is malformed: not valid JSON ({exc}); its raw text is one click away")
    else:
        if isinstance(data, dict):
            view.result = data
            view.result_notes.extend(_schema_notes(data))
        else:
            view.result_notes.append("result.json is malformed: not a JSON object")
    view.transcript = read_page(row.directory / TRANSCRIPT, page)
    for name in (RESULT, TRANSCRIPT):
        st = regular_stat(row.directory / name)
        if st is not None:
            view.raw.append((name, st.st_size))
    return view
