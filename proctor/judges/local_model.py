"""`IsolatedJudgeModel`: a local (in-process Python) judge model run in a worker process, so the
judge's time bound holds whatever the student's text makes it do.

`evaluate` bounds a judge with a thread join. A provider model waits on the network with the GIL
released, so the bound fires; a local model that computes holds the GIL, and one slow regex on
the student's text (a backtracking pattern on `("㌖" * 36 + "mark") * 400` ran 645 s) keeps
every other thread, the bound included, from running. A process can be killed: the model is run
in a forked worker (it needs no pickling and keeps what it loaded), each call waits for the reply
at most `timeout_s` with the GIL released, and a call that runs past it kills the worker (the
next call forks a fresh one) and fails as the content's fault, as does a worker that dies (a
score of 0, never an infra error that would mask the rollout and reward the derailing text). A
local model has no provider: only its own JudgeModelError is an infra error."""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.connection import Connection
from typing import Any

from .rubric import JudgeModel, JudgeModelError

_FORK = multiprocessing.get_context("fork")


class LocalModelTimeout(Exception):
    """The local model ran past the call's time limit on this text (the content's fault)."""


def _serve(model: JudgeModel, conn: Connection) -> None:
    while True:
        try:
            system, user, timeout_s = conn.recv()
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = ("ok", model.complete(system, user, timeout_s))
        except JudgeModelError as exc:
            reply = ("provider", str(exc)[:500])
        except Exception as exc:  # noqa: BLE001 - reported to the caller, as the content's failure
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:500]}")
        conn.send(reply)


class IsolatedJudgeModel(JudgeModel):
    """`model`, run in a worker process that is killed when a call runs past its `timeout_s`."""

    def __init__(self, model: JudgeModel) -> None:
        self.model = model
        self._lock = threading.Lock()  # one call at a time per worker (judge-eval grades in threads)
        self._worker: Any = None
        self._conn: Connection | None = None

    def describe(self) -> str:
        return self.model.describe()

    def complete(self, system: str, user: str, timeout_s: float) -> str:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._start()
            assert self._conn is not None
            try:
                self._conn.send((system, user, timeout_s))
                ready = self._conn.poll(max(timeout_s, 0.0))
            except (BrokenPipeError, EOFError, OSError) as exc:
                self._stop()
                raise RuntimeError(f"the local model's worker died on this text: {exc}") from None
            if not ready:
                self._stop()
                raise LocalModelTimeout(f"the local model ran past {timeout_s:.1f}s on this text; its worker was killed")
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._stop()
                raise RuntimeError(f"the local model's worker died on this text: {exc}") from None
        if kind == "provider":
            raise JudgeModelError(value)
        if kind == "error":
            raise RuntimeError(value)
        return value

    def _start(self) -> None:
        parent, child = _FORK.Pipe()
        self._worker = _FORK.Process(target=_serve, args=(self.model, child), name="proctor-local-judge-model", daemon=True)
        self._worker.start()
        child.close()
        self._conn = parent

    def _stop(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker.join(5)
        if self._conn is not None:
            self._conn.close()
        self._worker = self._conn = None
