"""What the index shows of the catalog: filtered, searched, sorted and cut into one page on the
server, so a browser gets 50 rows of a 10,000-rollout batch, never all of them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .catalog import RolloutRow

SortKey = Literal["started_at", "run_id", "task_id", "family", "agent", "status", "score", "reward", "kinds", "duration_s", "tokens"]
PER_PAGE = 50


class IndexQuery(BaseModel):
    """The index's query string. Unknown parameters are ignored (a bookmarked URL keeps working)."""

    model_config = ConfigDict(extra="ignore")

    status: str = ""
    kind: str = Field("", description="A misbehaviour kind, or `none` for rollouts without any.")
    task: str = ""
    family: str = ""
    agent: str = ""
    q: str = Field("", max_length=500, description="Case-insensitive text in the run id, task, agent, kinds, errors or notes.")
    sort: SortKey = "started_at"
    order: Literal["asc", "desc"] = "desc"
    page: int = Field(1, ge=1, le=10**9)
    per_page: int = Field(PER_PAGE, ge=1, le=500)

    def link(self, **changes: object) -> str:
        """The query string of this query with `changes` (a new page, sort or filter)."""
        from urllib.parse import urlencode

        values = {**self.model_dump(), **changes}
        defaults = IndexQuery().model_dump()
        return "?" + urlencode({k: v for k, v in values.items() if v != defaults[k]})


@dataclass
class IndexPage:
    rows: list[RolloutRow]
    matching: int
    total: int
    page: int
    pages: int


def _matches(row: RolloutRow, query: IndexQuery, needle: str) -> bool:
    if query.status and row.status != query.status:
        return False
    if query.kind == "none" and row.kinds:
        return False
    if query.kind and query.kind != "none" and query.kind not in row.kinds:
        return False
    if query.task and row.task_id != query.task:
        return False
    if query.family and row.family != query.family:
        return False
    if query.agent and row.agent != query.agent:
        return False
    return not needle or needle in row.search_text


def _sort_value(row: RolloutRow, key: str) -> tuple:
    value = getattr(row, key)
    if key == "kinds":
        value = " ".join(value)
    # Rows without the value (no result yet) sort after those with it, whichever the order.
    return (value is None or value == "", value if value is not None else 0)


def select(rows: list[RolloutRow], query: IndexQuery) -> IndexPage:
    needle = query.q.strip().lower()
    matching = [row for row in rows if _matches(row, query, needle)]
    present = [r for r in matching if not _sort_value(r, query.sort)[0]]
    absent = [r for r in matching if _sort_value(r, query.sort)[0]]
    present.sort(key=lambda r: (_sort_value(r, query.sort)[1], r.run_id), reverse=query.order == "desc")
    ordered = present + absent
    pages = max(1, -(-len(ordered) // query.per_page))
    page = min(query.page, pages)
    start = (page - 1) * query.per_page
    return IndexPage(ordered[start:start + query.per_page], len(ordered), len(rows), page, pages)


def facets(rows: list[RolloutRow]) -> dict[str, list[tuple[str, int]]]:
    """The values each filter offers, with how many rollouts have each."""
    counts: dict[str, Counter] = {name: Counter() for name in ("status", "kind", "task", "family", "agent")}
    for row in rows:
        counts["status"][row.status] += 1
        counts["task"][row.task_id] += 1
        counts["agent"][row.agent] += 1
        if row.family:
            counts["family"][row.family] += 1
        for kind in row.kinds or ["none"]:
            counts["kind"][kind] += 1
    return {name: sorted((k, n) for k, n in c.items() if k) for name, c in counts.items()}
