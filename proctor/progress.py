"""The progress bar of a long `proctor run` batch: done/total, rate, elapsed, ETA, infra errors.

Drawn only on a terminal: piped or redirected output, and `--json`, get nothing from it, so what
a script reads stays the table or the JSON alone. A resumed batch starts the bar at what was
already finished; the rate and ETA count only the rollouts run now."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from .results import RolloutResult


class _Rate(ProgressColumn):
    """Rollouts per second (rich's own speed columns speak bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.2f}/s" if speed else "-/s", style="progress.data.speed")


class _InfraErrors(ProgressColumn):
    def render(self, task: Task) -> Text:
        count = task.fields.get("infra_errors", 0)
        return Text(f"{count} infra error{'' if count == 1 else 's'}", style="yellow" if count else "dim")


class BatchProgress:
    """`with BatchProgress(console, label, total, done) as bar: ... bar.advance(result)`; thread-safe."""

    def __init__(self, console: Console, label: str, total: int, done: int = 0) -> None:
        self.infra_errors = 0
        self._lock = threading.Lock()
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _Rate(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), _InfraErrors(),
            console=console, transient=True, disable=not console.is_terminal,
        )
        self._task = self.progress.add_task(label, total=total, completed=done, infra_errors=0)

    def advance(self, result: RolloutResult) -> None:
        with self._lock:
            if result.status == "infra_error":
                self.infra_errors += 1
            self.progress.update(self._task, advance=1, infra_errors=self.infra_errors)

    def __enter__(self) -> BatchProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
