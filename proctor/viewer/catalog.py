"""The index: every rollout under the run directories, one summary row each, kept current.

A run directory may be one rollout (it holds result.json or transcript.jsonl), a batch (its children
are rollouts) or a curriculum (batches of batches); discovery goes `MAX_DEPTH` levels down. Rows are
cached by each result.json's (mtime, size, inode), so a refresh of 10,000 rollouts re-reads only
what changed: a batch still running shows new results as they land without re-parsing the rest.

A rollout whose result is missing (still running, or the harness died), malformed or partial gets
a row anyway, with a note saying so: one damaged rollout never breaks the index."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..errors import ConfigError
from .files import RESULT, TRANSCRIPT, Unreadable, read_bounded
from .transcript_pages import first_line

MAX_DEPTH = 3
# Rescans at most this often: a page view of a 10,000-rollout batch costs one directory walk, and a
# burst of requests (the live refresh of several tabs) shares it.
RESCAN_INTERVAL_S = 1.0
STATUSES = ("completed", "misbehaved", "infra_error", "abandoned")
# Statuses of rows without a readable result.
NO_RESULT = "no_result"
MALFORMED = "malformed"


class RolloutRow(BaseModel):
    """One line of the index."""

    key: str = Field(description="The rollout's id in URLs: its directory's name (unique in this viewer).")
    directory: Path
    run_id: str
    task_id: str = ""
    family: str = ""
    seed: int | None = None
    difficulty: int | None = None
    agent: str = ""
    status: str = Field(description=f"A result status, {NO_RESULT!r} (none written yet) or {MALFORMED!r}.")
    score: float | None = None
    reward: float | None = None
    kinds: list[str] = Field(default_factory=list, description="Misbehaviour kinds, sorted, each once.")
    duration_s: float | None = None
    tokens: int | None = None
    started_at: str = ""
    note: str = Field("", description="Why the row is incomplete, for a human; empty when the result is whole.")
    search_text: str = Field("", exclude=True)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def summarise(key: str, directory: Path) -> RolloutRow:
    """The row of one rollout directory, whatever state its files are in."""
    try:
        data = json.loads(read_bounded(directory / RESULT).decode("utf-8", errors="surrogateescape"))
    except Unreadable as exc:
        if not os.path.lexists(directory / RESULT):
            return _from_transcript(key, directory, NO_RESULT, "no result.json yet: the rollout is still running, or its harness died")
        return _from_transcript(key, directory, MALFORMED, str(exc))
    except ValueError as exc:
        return _from_transcript(key, directory, MALFORMED, f"result.json is not valid JSON ({exc})")
    if not isinstance(data, dict):
        return _from_transcript(key, directory, MALFORMED, "result.json is not a JSON object")
    status = data.get("status")
    if status not in STATUSES:
        row = _row(key, directory, data, MALFORMED, f"result.json has no valid status ({status!r})")
        return row if row.task_id else _from_transcript(key, directory, MALFORMED, row.note)
    return _row(key, directory, data, status, "")


def _row(key: str, directory: Path, data: dict, status: str, note: str) -> RolloutRow:
    instance = data.get("instance") if isinstance(data.get("instance"), dict) else {}
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    records = data.get("misbehaviour") if isinstance(data.get("misbehaviour"), list) else []
    kinds = sorted({r["kind"] for r in records if isinstance(r, dict) and isinstance(r.get("kind"), str)})
    tokens = [usage[k] for k in ("input_tokens", "output_tokens") if _number(usage.get(k)) is not None]
    row = RolloutRow(
        key=key, directory=directory, run_id=_text(data.get("run_id")) or directory.name,
        task_id=_text(data.get("task_id")) or _text(instance.get("task_id")), family=_text(instance.get("family")),
        seed=instance.get("seed") if type(instance.get("seed")) is int else None,
        difficulty=instance.get("difficulty") if type(instance.get("difficulty")) is int else None,
        agent=_text(data.get("agent")), status=status, score=_number(data.get("score")), reward=_number(data.get("reward")),
        kinds=kinds, duration_s=_number(timings.get("total_s")), tokens=int(sum(tokens)) if tokens else None,
        started_at=_text(timings.get("started_at")), note=note,
    )
    errors = [e for e in data.get("errors", []) if isinstance(e, str)] if isinstance(data.get("errors"), list) else []
    row.search_text = " ".join([row.run_id, row.task_id, row.family, row.agent, row.status, *row.kinds, *errors, note]).lower()
    return row


def _from_transcript(key: str, directory: Path, status: str, note: str) -> RolloutRow:
    """A row for a rollout without a usable result, named from its transcript's rollout_start
    (read from the first line only: a transcript can be huge)."""
    event = first_line(directory / TRANSCRIPT)
    start = event if isinstance(event, dict) and event.get("type") == "rollout_start" else {}
    return _row(key, directory, {k: start.get(k) for k in ("run_id", "task_id", "instance", "agent")}, status, note)


def _stat_key(path: str) -> tuple | None:
    """What identifies a file's version: (mtime, size, inode, type); None when it does not exist."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, stat.S_IFMT(st.st_mode))


def _signature(directory: str) -> tuple | None:
    """The version of a rollout directory's files, or None if it is not a rollout. One lstat in the
    common case (a result.json): the rescan of a 10,000-rollout batch is 10,000 system calls plus
    the directory listing. The transcript matters only while there is no result (its first line
    names the task)."""
    result = _stat_key(os.path.join(directory, RESULT))
    if result is not None:
        return (result,)
    transcript = _stat_key(os.path.join(directory, TRANSCRIPT))
    return None if transcript is None else (None, transcript)


def _scan(directory: str, depth: int):
    """(directory, signature) of every rollout at or under `directory`, in name order. Links are
    not followed: the walk stays in the tree it was given."""
    signature = _signature(directory)
    if signature is not None:
        yield directory, signature
        return
    if depth == 0:
        return
    try:
        entries = sorted((e for e in os.scandir(directory) if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)),
                         key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        yield from _scan(entry.path, depth - 1)


def check_roots(paths: list[str]) -> list[Path]:
    """The run directories to serve, or a ConfigError naming the first bad one."""
    if not paths:
        raise ConfigError("give at least one run directory (a rollout, a batch, a red-team run or a curriculum)")
    roots = []
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise ConfigError(f"{raw}: no such run directory")
        if not path.is_dir():
            raise ConfigError(f"{raw}: not a directory (give the directory holding <run_id>/result.json)")
        if not os.access(path, os.R_OK | os.X_OK):
            raise ConfigError(f"{raw}: cannot read this directory")
        roots.append(path.resolve())
    return roots


@dataclass
class _Cached:
    signature: tuple
    row: RolloutRow


@dataclass
class Catalog:
    """Every rollout under `roots`. The first read blocks; after it, a request is answered from the
    last scan at once while a stale scan is redone in a background thread (one at a time), so a
    page of a 10,000-rollout index never waits for the rescan. A scan is stale after
    `rescan_interval_s`, or ten times the last scan's own duration if longer: a batch whose rescan
    costs 0.2 s is rescanned at most every 2 s, however many tabs poll it."""

    roots: list[Path]
    rescan_interval_s: float = RESCAN_INTERVAL_S
    _cache: dict[str, _Cached] = field(default_factory=dict)
    _rows: list[RolloutRow] = field(default_factory=list)
    _by_key: dict[str, RolloutRow] = field(default_factory=dict)
    _scanned_at: float | None = None
    _scan_cost_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _background: threading.Thread | None = None
    generation: int = 0

    def rows(self) -> list[RolloutRow]:
        self._fresh_enough()
        return self._rows

    def get(self, key: str) -> RolloutRow | None:
        self._fresh_enough()
        row = self._by_key.get(key)
        if row is None and self._stale():  # a rollout that landed since the last scan
            self.refresh(force=True)
            row = self._by_key.get(key)
        return row

    def _stale(self) -> bool:
        interval = max(self.rescan_interval_s, 10 * self._scan_cost_s)
        return self._scanned_at is None or time.monotonic() - self._scanned_at >= interval

    def _fresh_enough(self) -> None:
        if self._scanned_at is None:
            self.refresh(force=True)
        elif self._stale() and (self._background is None or not self._background.is_alive()):
            self._background = threading.Thread(target=self.refresh, daemon=True, name="proctor-view-rescan")
            self._background.start()

    def refresh(self, force: bool = False) -> None:
        """Rescan now (if stale, or `force`), re-reading only the results that changed."""
        with self._lock:
            if not force and not self._stale():
                return
            started = time.monotonic()
            found = [item for root in self.roots for item in _scan(str(root), MAX_DEPTH)]
            cache, rows, by_key, changed = {}, [], {}, len(found) != len(self._cache)
            for directory, sig in found:
                old = self._cache.get(directory)
                if old is None or old.signature != sig or old.row.key in by_key:  # new, changed, or its key taken
                    changed = True
                    old = _Cached(sig, summarise(self._key(directory, by_key), Path(directory)))
                cache[directory] = old
                by_key[old.row.key] = old.row
                rows.append(old.row)
            # Swapped in whole: a request reading the old lists meanwhile sees a consistent scan.
            self._cache, self._rows, self._by_key = cache, rows, by_key
            self._scanned_at = time.monotonic()
            self._scan_cost_s = self._scanned_at - started
            if changed:
                self.generation += 1

    @staticmethod
    def _key(directory: str, taken: dict[str, RolloutRow]) -> str:
        # Run ids are unique within a batch; two roots may still share one, so later ones get a suffix.
        name = os.path.basename(directory)
        key, n = name, 2
        while key in taken:
            key, n = f"{name}~{n}", n + 1
        return key
