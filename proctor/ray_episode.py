"""An Episode whose rollout runs on a Ray worker node (`RayEpisode`, and `proctor serve --ray`).

The driver (a trainer's loop, or `proctor serve`) steps it exactly like an `Episode`; each rollout
is one Ray actor on whatever node the cluster picks, which holds a real `Episode` over that node's
own sandboxes, with the node's own confinement check (a node that cannot confine refuses the
rollout, recorded as an `infra_error` like any setup failure). When the rollout ends (done, closed,
or reset into another), the actor's run directory comes back whole to the driver's `out_dir`,
result.json last and atomically, and its sandbox is torn down. The actor process itself is kept
idle for the driver's next reset (a new Ray worker and environment load cost seconds), as a
`proctor run` batch keeps its harness process: a sandbox is never reused, an actor is.

A worker or node that dies mid-rollout cannot be retried behind the driver's back (the driver
chose every action so far): the rollout ends there, the driver writes its result as an
`infra_error` naming the failure (mask it; nothing of its reward is real), the step that saw it
returns done, and the next `reset` starts a fresh actor. What the dead node held of the rollout
(its transcript) is lost with it; nothing is counted twice.

As for `proctor run --ray`: each node needs Proctor installed and the environment at the same path
as on the driver. The environment must be a directory or an importable module (`env_ref`)."""

from __future__ import annotations

import shutil
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .agents.base import AgentError
from .distributed import RayOutcome, connect, env_ref, system_failure, write_outcome
from .episode import Action, Episode, EpisodeError, EpisodeObservation, EpisodeState, EpisodeStep, RolloutConfig, new_run_id
from .errors import ConfigError, ProctorError
from .results import RolloutResult, Timings, Usage, write_result
from .tasks.loading import Environment
from .tasks.models import Instance


class EpisodeHost:
    """The worker's side (a Ray actor): one Episode at a time, each in a scratch directory of its
    own. The actor outlives its episodes (the environment stays loaded, as in a `proctor run`
    batch); each rollout still gets its own sandbox, torn down when it ends."""

    def __init__(self, env: str, config: RolloutConfig, agent_name: str) -> None:
        from .tasks.loading import load_environment

        self.env, self.config, self.agent_name = load_environment(env), config, agent_name
        self.scratch: str | None = None
        self.episode: Episode | None = None

    def reset(self, task: str, kwargs: dict[str, Any]) -> tuple[EpisodeObservation, dict[str, Any]]:
        if self.episode is not None:
            self.close("reset before the episode ended")
        self.scratch = tempfile.mkdtemp(prefix="proctor-ray-episode-")
        self.episode = Episode(self.scratch, env=self.env, config=self.config, agent_name=self.agent_name)
        try:
            obs = self.episode.reset(task, **kwargs)
        except BaseException:
            self._forget()
            raise
        return obs, self._where()

    def step(self, action: Action) -> tuple[EpisodeStep, dict[str, Any]]:
        return self.episode.step(action), self._where()

    def check_call(self, tool: Any, arguments: Any) -> str | None:
        return self.episode.check_call(tool, arguments)

    def state(self) -> EpisodeState:
        return self.episode.state()

    def close(self, reason: str) -> RayOutcome | None:
        """End the rollout (if it is still running) and hand back its run directory; the scratch goes."""
        if self.episode is None:
            return None
        try:
            result = self.episode.close(reason)
            run_dir = self.episode.run_dir
            if result is None or run_dir is None:
                return None
            files = {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
                     if p.is_file() and not p.is_symlink() and p.name != "result.json"}
            return RayOutcome(result=result, files=files, node=_node_id())
        finally:
            self._forget()

    def _forget(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch, self.episode = None, None

    def _where(self) -> dict[str, Any]:
        ep = self.episode
        return {"run_id": ep.run_id, "task_id": ep.task.id if ep.task else None, "instance": ep.instance,
                "done": ep.done, "tool_specs": ep.tool_specs, "result": ep.result}


def _node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - only a label
        return ""


class RayEpisode:
    """`Episode`'s API with the rollout on a Ray worker. `address` as for `proctor run --ray`
    ("auto", "local", HOST:PORT); an initialised Ray is used as is."""

    def __init__(self, out_dir: str | Path, *, env: Environment, config: RolloutConfig | None = None,
                 address: str = "auto", agent_name: str = "trainer") -> None:
        self.out_dir = Path(out_dir)
        self.env_ref = env_ref(env)
        self.config = config or RolloutConfig()
        self.address = address
        self.agent_name = agent_name
        self._actor: Any = None
        self._where: dict[str, Any] = {}
        self.result: RolloutResult | None = None
        self._ident: str | None = None

    # -- what a driver reads -----------------------------------------------------------------------
    @property
    def run_id(self) -> str | None:
        return self._where.get("run_id")

    @property
    def run_dir(self) -> Path | None:
        """Where the rollout's files are on the driver (once it has ended and come back)."""
        return self.out_dir / self.run_id if self.run_id else None

    @property
    def started(self) -> bool:
        return self._where.get("task_id") is not None or self.result is not None

    @property
    def done(self) -> bool:
        return self.result is not None

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        return list(self._where.get("tool_specs") or [])

    # -- the rollout ---------------------------------------------------------------------------
    def reset(self, task: str, **kwargs: Any) -> EpisodeObservation:
        """Start a rollout of `task` (an id of the environment) on a fresh actor; an unfinished one is
        closed first (abandoned) and its run directory brought back. The actor is one a previous
        episode of this driver left idle, or a new one."""
        if not isinstance(task, str):
            raise ConfigError("a RayEpisode takes a task id of its environment (a built Task does not travel to the worker)")
        self._finish_previous("reset before the episode ended")
        connect(self.address)  # a missing ray extra or an unreachable cluster: a ConfigError naming it
        import ray

        self._ident, self._where, self.result = task, {}, None
        for attempt in range(2):
            self._actor, pooled = _HOSTS.take(self._key())
            if self._actor is None:
                host = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(EpisodeHost)
                self._actor = host.remote(self.env_ref, self.config, self.agent_name)
            try:
                obs, where = ray.get(self._actor.reset.remote(task, kwargs))
            except Exception as exc:  # noqa: BLE001 - sorted below
                cause = _cause(exc)
                if isinstance(cause, ProctorError):  # a bad id or parameters: nothing started, as with Episode
                    self._release(healthy=True)
                    raise cause from None
                if pooled and attempt == 0 and system_failure(exc):  # it died while idle: nothing had started
                    self._release()
                    continue
                self._failed(exc, "reset")
                return EpisodeObservation(step=0, steps=0, turn=0)
            self._note(where)
            return obs
        raise AssertionError("unreachable")

    def _key(self) -> tuple[str, ...]:
        import ray

        return (ray.get_runtime_context().get_job_id(), self.env_ref, self.config.model_dump_json(), self.agent_name)

    def step(self, action: Action | dict[str, Any]) -> EpisodeStep:
        if self.result is not None:
            raise EpisodeError(f"the episode is done (status {self.result.status}); reset to start another")
        if self._actor is None:
            raise EpisodeError("step before reset")
        import ray

        if isinstance(action, dict):
            action = Action.model_validate(action)
        try:
            out, where = ray.get(self._actor.step.remote(action))
        except Exception as exc:  # noqa: BLE001 - sorted below
            self._failed(exc, "step")
            result = self.result
            return EpisodeStep(observation=EpisodeObservation(step=0, steps=0, turn=0), reward=result.reward if result else 0.0,
                               done=True, info={"run_id": self.run_id, "status": result.status if result else "infra_error",
                                                "result_path": str(self.out_dir / self.run_id / "result.json") if self.run_id else None})
        self._note(where)
        if out.done:
            self._collect("done")
            if self.result is not None:
                out.info["result_path"] = str(self.out_dir / self.result.run_id / "result.json")
        return out

    def agent_failed(self, exc: AgentError) -> EpisodeStep:
        raise EpisodeError("a RayEpisode is driven by its caller's actions; close it instead")

    def check_call(self, tool: Any, arguments: Any) -> str | None:
        if self._actor is None or self.result is not None:
            return None
        import ray

        try:
            return ray.get(self._actor.check_call.remote(tool, arguments))
        except Exception:  # noqa: BLE001 - the step itself will see the failure and record it
            return None

    def state(self) -> EpisodeState:
        if self._actor is not None and self.result is None:
            import ray

            try:
                return ray.get(self._actor.state.remote())
            except Exception as exc:  # noqa: BLE001
                self._failed(exc, "state")
        result = self.result
        return EpisodeState(run_id=self.run_id, task_id=self._where.get("task_id"), step=0, turns=result.usage.turns if result else 0,
                            done=self.done, status=result.status if result else None, reward=result.reward if result else None,
                            misbehaviour=list(result.misbehaviour) if result else [],
                            observations=list(result.observations) if result else [], usage=result.usage if result else Usage(),
                            result_path=str(self.out_dir / result.run_id / "result.json") if result else None)

    def close(self, reason: str = "closed before the rollout ended") -> RolloutResult | None:
        self._finish_previous(reason)
        return self.result

    def __enter__(self) -> RayEpisode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside ---------------------------------------------------------------------------------
    def _note(self, where: dict[str, Any]) -> None:
        self._where = where

    def _finish_previous(self, reason: str) -> None:
        if self._actor is not None and self.result is None:
            self._collect(reason)
        self._release()

    def _collect(self, reason: str) -> None:
        """Bring the rollout's run directory back (the actor writes nothing the driver cannot see)."""
        import ray

        try:
            outcome = ray.get(self._actor.close.remote(reason))
        except Exception as exc:  # noqa: BLE001
            self._failed(exc, "close")
            return
        if outcome is not None:
            self.result = write_outcome(self.out_dir, outcome)
        self._release(healthy=True)

    def _failed(self, exc: BaseException, where: str) -> None:
        """The actor's call failed: the rollout's own errors end it as `Episode` would; a dead worker
        or node ends it as an infra_error the driver writes."""
        cause = _cause(exc)
        why = f"{type(cause).__name__}: {str(cause).strip().splitlines()[0] if str(cause).strip() else ''}"
        kind = "its worker or node died" if system_failure(exc) else "the worker failed"
        run_id = self.run_id or new_run_id(self._ident or "episode")
        task_id = self._where.get("task_id") or self._ident or "episode"
        instance = self._where.get("instance") or Instance(task_id=task_id)
        self.result = RolloutResult(
            run_id=run_id, task_id=task_id, instance=instance, agent=self.agent_name, status="infra_error",
            score=0.0, judged_score=0.0, reward=0.0, errors=[f"ray: the episode's {where} failed, {kind}: {why}"[:2000]],
            timings=Timings(started_at=datetime.now(timezone.utc).isoformat(timespec="seconds")))
        self._where = {**self._where, "run_id": run_id, "task_id": task_id}
        run_dir = self.out_dir / run_id
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_result(self.result, run_dir)
        self._release()

    def _release(self, healthy: bool = False) -> None:
        """Let the actor go: back to the idle hosts when its episode ended cleanly, else killed."""
        if self._actor is not None:
            if not (healthy and _HOSTS.give(self._key(), self._actor)):
                _kill(self._actor)
            self._actor = None


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


class _IdleHosts:
    """Actors whose episode ended, kept for the next reset of the same environment and config in
    this driver (starting a Ray worker and loading the environment costs seconds; a sandbox is
    still made per rollout). Bounded; keyed by the Ray job too, so a restarted Ray never hands
    out an actor of the old one."""

    MAX = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, ...], list[Any]] = {}

    def take(self, key: tuple[str, ...]) -> tuple[Any, bool]:
        with self._lock:
            stack = self._idle.get(key)
            return (stack.pop(), True) if stack else (None, False)

    def give(self, key: tuple[str, ...], actor: Any) -> bool:
        with self._lock:
            for other in [k for k in self._idle if k[0] != key[0]]:
                del self._idle[other]  # a previous Ray job's handles: unusable
            stack = self._idle.setdefault(key, [])
            if sum(map(len, self._idle.values())) >= self.MAX:
                return False
            stack.append(actor)
            return True


_HOSTS = _IdleHosts()


def _cause(exc: BaseException) -> BaseException:
    """The rollout's own exception inside a Ray task error (RayTaskError wraps it as `.cause`)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


__all__ = ["EpisodeHost", "RayEpisode"]
