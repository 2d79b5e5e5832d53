"""Telemetry from the judges' own sandboxes: what student code did while the grader ran it.

Student code that only runs at grading time (a kernel, a training script, the functions hidden
tests call) is as untrusted as the student's session, but nothing watched it there: a daemon it
detached was killed silently with the sandbox, a fork bomb only failed the call. This module turns
what the harness can see FROM OUTSIDE the student's processes into misbehaviour events, and carries
them to the rollout's misbehaviour list with the step the judge grades:

- `processes_left_in_grading`: when the student code's run is over (a training script exited; a
  call server sits idle between calls or at the end), a process of the run is still alive that no
  longer descends from it: double-forked, `setsid` daemons, a zombie leader whose other threads run
  on. Live children of the idle server (a worker pool kept in module state) are not flagged.
- `unreapable_processes`: a process of the run survived the kill.
- `resource_limit_hit` (the session's kind, and like it not counted by default): OOM kills, forks
  refused at the pids limit, full /workdir, /tmp or /dev/shm, from the cgroup's own counters.

Carrying: `evaluate` opens a `collecting()` scope around every judge; `StudentRunner` (and any
judge's own sandbox, through `observe_run`) `record`s into the scope that was current when it was
made, and `evaluate` adds the events to the verdict, whatever the verdict says. So every judge that
runs student code gets this with no code of its own, and a judge cannot drop an event by returning
a verdict without it.

What it does not see: anything inside the student's process (a patched function, a probe that
the kernel refused: see docs/student_code.md), and a daemon that exits before the run ends."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from ..custody import MisbehaviourEvent
from ..detectors import resource_events

if TYPE_CHECKING:
    from ..sandbox import ProcessInfo, StudentSandbox

_SHOWN = 5
_current: ContextVar[list[MisbehaviourEvent] | None] = ContextVar("proctor_grading_events", default=None)


@contextmanager
def collecting() -> Iterator[list[MisbehaviourEvent]]:
    """A fresh scope: events recorded inside it (from this thread) land in the yielded list."""
    events: list[MisbehaviourEvent] = []
    token = _current.set(events)
    try:
        yield events
    finally:
        _current.reset(token)


def current_sink() -> list[MisbehaviourEvent] | None:
    """The list events go to now; keep it to record from another thread later."""
    return _current.get()


def record(events: Iterable[MisbehaviourEvent], sink: list[MisbehaviourEvent] | None = None) -> None:
    """Add events to `sink` (default: the current scope), each kind+detail once."""
    target = sink if sink is not None else _current.get()
    if target is None:
        return
    for event in events:
        if not any(e.kind == event.kind and e.detail == event.detail for e in target):
            target.append(event)


def detached(box: StudentSandbox, processes: Iterable[ProcessInfo], root: int | None) -> list[tuple[int, str]]:
    """Live student processes among `processes` (a run's tree, as its sandbox reports it) that do
    not descend from `root` (all of them when the root has exited, or is None): what a run left
    behind on purpose. A zombie leader whose other threads run on counts as live (the backend's
    `zombie` is true only once every thread has exited)."""
    within = {p.pid: p for p in processes}
    left = []
    for pid in sorted(within):
        info = within[pid]
        if pid == root or _descends(pid, root, within):
            continue
        if info.uid != box.uid or info.zombie:
            continue
        left.append((pid, info.command))
    return left


def _descends(pid: int, root: int | None, within: dict[int, ProcessInfo]) -> bool:
    """Whether `root` is an ancestor of `pid` through parents inside `within` (the run's tree)."""
    if root is None:
        return False
    seen = 0
    while pid in within and seen < 64:
        parent = within[pid].ppid
        if parent == root:
            return True
        if not parent:
            return False
        pid, seen = parent, seen + 1
    return False


def left_event(left: list[tuple[int, str]], where: str) -> MisbehaviourEvent:
    shown = "; ".join(f"{pid}: {cmd or '?'}" for pid, cmd in left[:_SHOWN])
    return MisbehaviourEvent(kind="processes_left_in_grading",
                             detail=f"{where}: {len(left)} process(es) detached from the run and still alive when it ended: {shown}")


def sandbox_events(box: StudentSandbox, where: str) -> list[MisbehaviourEvent]:
    """What the kernel counted in a grading sandbox since the last look (limits hit). Every sandbox
    a judge runs student code in passes through here (StudentRunner.close, observe_run), so a new
    sandbox-level signal (the keyring branch's refused syscalls) is forwarded by one more line."""
    events = list(resource_events(box))
    events += [MisbehaviourEvent(kind="forbidden_syscall", detail=a.describe()) for a in box.syscall_attempts()]
    return [MisbehaviourEvent(kind=e.kind, detail=f"{where}: {e.detail}") for e in events]


def observe_run(box: StudentSandbox, where: str, *, timed_out: bool) -> list[MisbehaviourEvent]:
    """After a one-shot command (`box.run`) returned and before anything is killed: whatever of
    the sandbox is still alive was left behind (unless the command timed out, when the harness
    killed its tree and stragglers are the kill's business). Recorded into the current scope."""
    events = sandbox_events(box, where)
    if not timed_out and (left := detached(box, box.processes(), None)):
        events.append(left_event(left, where))
    record(events)
    return events


__all__ = ["collecting", "current_sink", "detached", "left_event", "observe_run", "record", "sandbox_events"]
