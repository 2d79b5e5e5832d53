"""A warm pool: sandboxes built ahead of the rollouts that will use them, one rollout each.

    pool = SandboxPool(get_backend("bwrap"), size=8)      # a SandboxBackend itself
    box = pool.create(spec)                               # warm if one is ready, else built now (cold)
    ...
    box.close()                                           # returns at once; teardown runs behind

Builder threads keep up to `size` sandboxes ready per spec that rollouts have asked for: created by
the wrapped backend exactly as a cold one is (so every one passes the same confinement grant), then
`prepare()`d (namespaces, cgroups, view, the session's anchor waiting). They are handed out oldest
first. Each is handed out once and destroyed after: nothing one student leaves (files, processes,
keys, the uid) can reach the next, because the next never shares a sandbox with it. A sandbox that
was ever handed out is refused if it is offered back (`offer`), and a handle whose rollout closed it
refuses every further use. A drained pool never makes a rollout wait for a builder: the rollout
builds its own sandbox at once (cold), and result.json says which it got (`sandbox_start`).

Teardown (unmounting, cgroup removal, the uid's release) runs on teardown threads, off the
rollout's critical path; the number of sandboxes waiting for teardown is bounded (past it, close
tears down in the caller), so a burst cannot pile up host memory. A teardown that fails keeps the
sandbox's reclaim lock, and reclaim retries it, as for a cold sandbox."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError, ProctorError, SandboxError
from .backend import RuntimeName, SandboxBackend, StudentProcess, StudentSandbox
from .models import ConfinementReport, SandboxSpec

log = logging.getLogger(__name__)

SandboxStart = Literal["warm", "cold"]
# The bash tool's shell (tools/bash.py): started ahead in a warm sandbox, handed to the first spawn
# of exactly this command. It is the student's own process, entered like any other, and nothing of
# the student has run in the sandbox before it.
SHELL_ARGV = ("/bin/bash", "--norc", "--noprofile")
SHELL_CWD = "/workdir"
MAX_POOL_SIZE = 1000
# A failing build (a machine that cannot confine, no free uid) is retried after this long, not in a loop.
_BUILD_BACKOFF_S = 1.0


class PoolConfig(BaseModel):
    """How many sandboxes to keep ready, and how hard to work at it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    size: int = Field(4, ge=1, le=MAX_POOL_SIZE, description="Warm sandboxes kept ready for each sandbox spec in use (never more than MAX_POOL_SIZE in all).")
    refill: int = Field(1, ge=1, le=16, description="Builder threads refilling the pool at once.")
    teardown_threads: int = Field(1, ge=1, le=16, description="Threads tearing down used sandboxes behind the rollouts.")
    shell: bool = Field(True, description="Start the student's shell (the bash tool's `/bin/bash --norc --noprofile` in /workdir) in each warm sandbox ahead too; the rollout's first spawn of exactly that command gets it.")
    expected: int | None = Field(None, ge=0, description="Sandboxes the pool's users will ask for in all (a batch's rollouts); the builders stop once that many were handed out or are ready, so a batch's end wastes none. None: unbounded.")
    max_pending_teardown: int = Field(32, ge=0, le=MAX_POOL_SIZE, description="Used sandboxes that may wait for teardown; past it, close tears down in the caller.")


class PoolStats(BaseModel):
    """What the pool did, for benches and the report."""

    model_config = ConfigDict(extra="forbid")
    warm: int = Field(0, description="Sandboxes handed out warm.")
    cold: int = Field(0, description="Sandboxes built on demand because none was ready.")
    built: int = Field(0, description="Sandboxes the builders made ahead.")
    ready: int = Field(0, description="Warm sandboxes ready now.")
    pending_teardown: int = 0
    torn_down: int = 0
    refused: int = Field(0, description="Sandboxes refused because they had already served a rollout.")
    errors: list[str] = Field(default_factory=list, description="Build and teardown failures, one line each (last 20).")


def _key(spec: SandboxSpec, require: Iterable[str] | None, allow_degraded: bool) -> tuple[str, tuple[str, ...] | None, bool]:
    return spec.model_dump_json(), (tuple(sorted(require)) if require is not None else None), allow_degraded


# What a rollout may read or do before its first tool call without ending the waiting shell.
_LEAVES_SHELL = frozenset({"id", "backend", "spec", "confinement", "degraded_ok", "uid", "python_runtime", "workdir",
                           "copy_in", "usage", "full_places", "network_counters", "syscall_attempts"})


def _close_pipes(proc: StudentProcess) -> None:
    for stream in (proc.popen.stdin, proc.popen.stdout, proc.popen.stderr):
        if stream is not None and not stream.closed:
            with contextlib.suppress(OSError):
                stream.close()


def _waiting_shell(box: StudentSandbox) -> StudentProcess:
    """The student's shell, started and answering: one empty line echoed back, so it is idle at
    its prompt (a shell killed still half-way through its start could hold the namespace's end)."""
    shell = box.spawn(list(SHELL_ARGV), cwd=SHELL_CWD)
    try:
        shell.popen.stdin.write(b"echo\n")  # type: ignore[union-attr]
        shell.popen.stdin.flush()  # type: ignore[union-attr]
        ready, _, _ = select.select([shell.popen.stdout], [], [], 10.0)
        if not ready or os.read(shell.popen.stdout.fileno(), 16) != b"\n":  # type: ignore[union-attr]
            raise SandboxError(f"sandbox {box.id}: the waiting shell did not answer")
    except BaseException:
        _close_pipes(shell)
        raise
    return shell


class PooledSandbox:
    """One rollout's handle on a sandbox from the pool. Everything a sandbox does passes through to
    it; `close()` gives it to the pool's teardown and makes this handle refuse any further use."""

    def __init__(self, box: StudentSandbox, pool: SandboxPool, start: SandboxStart, shell: StudentProcess | None = None) -> None:
        self._box: StudentSandbox | None = box
        self._pool = pool
        self._shell = shell
        self.id = box.id
        self.sandbox_start: SandboxStart = start

    def spawn(self, argv: Sequence[str], *, cwd: str = "/workdir") -> StudentProcess:
        box = self._live()
        shell, self._shell = self._shell, None
        if shell is not None and tuple(argv) == SHELL_ARGV and cwd == SHELL_CWD and shell.alive():
            return shell
        if shell is not None:  # not what was asked for: never left running unseen
            self._shell = shell
            self._drop_shell()
        return box.spawn(argv, cwd=cwd)

    def _live(self) -> StudentSandbox:
        if self._box is None:
            raise SandboxError(f"sandbox {self.id} is closed: it served one rollout and is destroyed, never reused")
        return self._box

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        box = self._live()
        if name not in _LEAVES_SHELL:
            # Anything that runs or looks at processes ends the waiting shell first if the rollout
            # never asked for it, so no detector ever sees a process the student did not start.
            self._drop_shell()
        return getattr(box, name)

    def _drop_shell(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            shell.kill_tree()
            _close_pipes(shell)

    def close(self) -> None:
        if self._box is not None:
            self._drop_shell()
        box, self._box = self._box, None
        if box is not None:
            self._pool._retire(box)

    def __enter__(self) -> PooledSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SandboxPool:
    """A SandboxBackend that hands out sandboxes of `backend` built ahead. Use as a context manager
    (or call `close()`): closing destroys the warm sandboxes and waits for every teardown."""

    def __init__(self, backend: SandboxBackend, config: PoolConfig | None = None, **kwargs: Any) -> None:
        if isinstance(backend, SandboxPool):
            raise ConfigError("a sandbox pool cannot wrap another pool")
        self.backend = backend
        self.config = config or PoolConfig(**kwargs)
        self.name: RuntimeName = backend.name
        self._lock = threading.Condition()
        self._ready: dict[tuple, collections.deque[tuple[StudentSandbox, StudentProcess | None]]] = {}
        self._specs: dict[tuple, tuple[SandboxSpec, tuple[str, ...] | None, bool]] = {}
        self._building: dict[tuple, int] = collections.defaultdict(int)
        self._failed_until: dict[tuple, float] = {}
        self._handed: set[str] = set()
        self._stats = PoolStats()
        self._closed = False
        self._teardown = ThreadPoolExecutor(self.config.teardown_threads, thread_name_prefix="proctor-pool-teardown")
        self._pending: set[Future] = set()
        self._builders = [threading.Thread(target=self._build_loop, name=f"proctor-pool-build-{i}", daemon=True)
                          for i in range(self.config.refill)]
        for thread in self._builders:
            thread.start()

    # -- SandboxBackend ------------------------------------------------------------------------------
    def machine_confinement(self) -> ConfinementReport:
        return self.backend.machine_confinement()

    def reclaim_stale(self) -> list[str]:
        return self.backend.reclaim_stale()

    def warm_up(self, spec: SandboxSpec | None = None, *, require: Iterable[str] | None = None, allow_degraded: bool = False) -> None:
        """Start filling the pool for this spec before any rollout asks for it."""
        spec = spec or SandboxSpec()
        with self._lock:
            self._want(_key(spec, require, allow_degraded), spec, require, allow_degraded)

    def create(self, spec: SandboxSpec | None = None, *, require: Iterable[str] | None = None,
               allow_degraded: bool = False) -> PooledSandbox:
        """The oldest warm sandbox of this spec, or (none ready) one built now. Never waits for a builder."""
        spec = spec or SandboxSpec()
        key = _key(spec, require, allow_degraded)
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox pool is closed")
            self._want(key, spec, require, allow_degraded)
            taken = self._take(key)
        if taken is not None:
            return PooledSandbox(taken[0], self, "warm", taken[1])
        box = self.backend.create(spec, require=require, allow_degraded=allow_degraded)
        with self._lock:
            self._handed.add(box.id)
            self._stats.cold += 1
        return PooledSandbox(box, self, "cold")

    # -- refusing reuse --------------------------------------------------------------------------------
    def offer(self, box: StudentSandbox) -> None:
        """Add a sandbox built elsewhere to the ready sandboxes. Refused (SandboxError) if it ever
        served a rollout: a pool hands each sandbox to exactly one."""
        if isinstance(box, PooledSandbox) or box.id in self._handed:
            with self._lock:
                self._stats.refused += 1
            raise SandboxError(f"sandbox {box.id} already served a rollout; a sandbox is used by one rollout and destroyed, never handed to another")
        spec = box.spec
        key = _key(spec, None, box.degraded_ok)
        with self._lock:
            self._specs.setdefault(key, (spec, None, box.degraded_ok))
            self._ready.setdefault(key, collections.deque()).append((box, None))
            self._lock.notify_all()

    def _take(self, key: tuple) -> tuple[StudentSandbox, StudentProcess | None] | None:
        ready = self._ready.get(key)
        while ready:
            box, shell = ready.popleft()
            if box.id in self._handed:  # never: each is queued once; refused rather than handed twice
                self._stats.refused += 1
                continue
            self._handed.add(box.id)
            self._stats.warm += 1
            self._lock.notify_all()  # a builder may refill
            return box, shell
        return None

    # -- building ahead -------------------------------------------------------------------------------
    def _want(self, key: tuple, spec: SandboxSpec, require: Iterable[str] | None, allow_degraded: bool) -> None:
        if key not in self._specs:
            self._specs[key] = (spec, tuple(require) if require is not None else None, allow_degraded)
            self._ready.setdefault(key, collections.deque())
            self._lock.notify_all()

    def _total_ready(self) -> int:
        return sum(len(q) for q in self._ready.values()) + sum(self._building.values())

    def _next_to_build(self) -> tuple | None:
        now = time.monotonic()
        expected = self.config.expected
        if expected is not None and self._stats.warm + self._stats.cold + self._total_ready() >= expected:
            return None
        if self._total_ready() >= self.config.size * max(1, len(self._specs)) or self._total_ready() >= MAX_POOL_SIZE:
            return None
        best = None
        for key in self._specs:
            have = len(self._ready[key]) + self._building[key]
            if have < self.config.size and self._failed_until.get(key, 0.0) <= now and (best is None or have < best[0]):
                best = (have, key)
        return best[1] if best else None

    def _build_loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and (key := self._next_to_build()) is None:
                    self._lock.wait(timeout=_BUILD_BACKOFF_S)
                if self._closed:
                    return
                self._building[key] += 1
                spec, require, allow_degraded = self._specs[key]
            box = shell = None
            try:
                box = self.backend.create(spec, require=require, allow_degraded=allow_degraded)
                prepare = getattr(box, "prepare", None)
                if prepare is not None:
                    prepare()
                if self.config.shell:
                    shell = _waiting_shell(box)
            except Exception as exc:  # noqa: BLE001 - a rollout building cold meets the same error, with its name
                if box is not None:
                    self._destroy(box)
                    box = shell = None
                with self._lock:
                    self._failed_until[key] = time.monotonic() + _BUILD_BACKOFF_S
                    self._error(f"build: {type(exc).__name__}: {exc}")
            with self._lock:
                self._building[key] -= 1
                if box is not None:
                    if self._closed:
                        self._pending_destroy(box)
                        if shell is not None:
                            _close_pipes(shell)
                    else:
                        self._ready[key].append((box, shell))
                        self._stats.built += 1

    # -- teardown ---------------------------------------------------------------------------------------
    def _retire(self, box: StudentSandbox) -> None:
        with self._lock:
            if len(self._pending) < self.config.max_pending_teardown and not self._closed:
                self._pending_destroy(box)
                return
        self._destroy(box)

    def _pending_destroy(self, box: StudentSandbox) -> None:
        future = self._teardown.submit(self._destroy, box)
        self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future) -> None:
        with self._lock:
            self._pending.discard(future)
            self._lock.notify_all()

    def _destroy(self, box: StudentSandbox) -> None:
        try:
            box.close()
        except (ProctorError, OSError) as exc:
            with self._lock:
                self._error(f"teardown of {box.id}: {exc}")
            log.warning("teardown of %s failed (reclaim will retry): %s", box.id, exc)
        with self._lock:
            self._stats.torn_down += 1

    def _error(self, line: str) -> None:
        self._stats.errors = [*self._stats.errors, line[:500]][-20:]

    # -- the end ------------------------------------------------------------------------------------------
    def stats(self) -> PoolStats:
        with self._lock:
            return self._stats.model_copy(update={"ready": sum(len(q) for q in self._ready.values()),
                                                  "pending_teardown": len(self._pending)})

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait (at most `timeout_s`) until every used sandbox is torn down; whether they all are."""
        end = time.monotonic() + timeout_s
        with self._lock:
            while self._pending and time.monotonic() < end:
                self._lock.wait(timeout=min(0.5, max(0.0, end - time.monotonic())))
            return not self._pending

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop building, destroy the warm sandboxes, wait for every teardown. Safe to call twice."""
        with self._lock:
            already, self._closed = self._closed, True
            self._lock.notify_all()
            warm = [entry for q in self._ready.values() for entry in q]
            for q in self._ready.values():
                q.clear()
        if already:
            return
        for thread in self._builders:
            thread.join(timeout=timeout_s)
        for box, shell in warm:
            self._destroy(box)
            if shell is not None:
                _close_pipes(shell)
        self.drain(timeout_s)
        self._teardown.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sandbox_start(box: object) -> SandboxStart:
    """Whether a sandbox came warm from a pool or was built for its rollout."""
    return getattr(box, "sandbox_start", "cold")


__all__ = ["MAX_POOL_SIZE", "PoolConfig", "PoolStats", "PooledSandbox", "SandboxPool", "SandboxStart", "sandbox_start"]
