"""`proctor serve`: an environment over OpenEnv's WebSocket protocol, so a trainer's own loop (any
`openenv-core` client, `GenericEnvClient` included) drives the student one tool call at a time.

    GET /health, /metadata, /schema
    WS  /ws   {"type": "reset", "data": {"task": ID, "seed": 0, "difficulty": 1, "params": {},
                                        "impossible": false, "framing": "strict"}}   (the last two optional)
              {"type": "step",  "data": ACTION}      ACTION: {"type": "list_tools"},
                                                     {"type": "call_tool", "tool_name": NAME, "arguments": {...}},
                                                     or a Proctor Action {"tool": ..., "arguments": ..., "text": ...}
              {"type": "state"}, {"type": "close"}
    answered  {"type": "observation", "data": {"observation": {...}, "reward": R, "done": D}},
              {"type": "state", "data": {...}}, or {"type": "error", "data": {"message": ONE_LINE, "code": CODE}}

One WebSocket owns one Episode (proctor/episode.py), the same rollout `proctor run` drives. Every
bad frame gets an error frame and the session goes on; a client that disconnects, or goes silent
past the idle timeout, has its sandbox torn down and its result written as `abandoned`.

It runs student code, so it listens on loopback unless told otherwise, and any other address
needs a bearer token (named by --token-env, never given on the command line)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .episode import Action, AsyncEpisode, EpisodeError, EpisodeObservation, EpisodeStep, RolloutConfig
from .errors import ConfigError, ProctorError
from .framing import SHIPPED as SHIPPED_FRAMINGS
from .tasks.loading import Environment
from .tools.base import describe_validation_error
from .tools.registry import make_tools

MAX_FRAME_BYTES = 1024 * 1024
# Frames above MAX_FRAME_BYTES get an error frame; the transport refuses (and drops the
# connection of) anything above this, so a flood cannot make the server hold more.
TRANSPORT_MAX_BYTES = 16 * MAX_FRAME_BYTES


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    out_dir: Path = Field(description="Where each episode's OUT/<run_id>/ goes.")
    max_sessions: int = Field(32, ge=1, le=4096, description="WebSocket sessions at once; more are refused with an error frame.")
    token: str | None = Field(None, description="Bearer token every request must carry (required off loopback).")
    idle_timeout_s: float = Field(900.0, gt=0, description="A session silent this long is closed (its episode abandoned).")
    rollout: RolloutConfig = RolloutConfig()
    ray: str | None = Field(None, description="Run each session's rollout on a Ray cluster (auto, local, HOST:PORT): see proctor/ray_episode.py.")


class ResetRequest(BaseModel):
    """The data of a reset frame."""

    model_config = ConfigDict(extra="forbid", strict=True)

    task: str = Field(description="Task id, or family id (then seed, difficulty, params).")
    seed: int = 0
    difficulty: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    impossible: bool = Field(False, description="Run the impossible variant (a cheating-rate probe: any pass is a hack).")
    framing: str | None = Field(None, description="A shipped framing (neutral, strict, inoculation) for this episode, over the server's --framing.")


class FrameError(Exception):
    """A frame the server answers with an error frame (the session goes on)."""

    def __init__(self, message: str, code: str = "VALIDATION_ERROR") -> None:
        super().__init__(" ".join(message.split())[:500])
        self.code = code


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token_off_loopback(host: str, token: str | None, token_env: str | None) -> None:
    """A server that runs student code must not be open to the network by accident."""
    if token_env and not token:
        raise ConfigError(f"--token-env {token_env}: that environment variable is empty or not set")
    if not is_loopback(host) and not token:
        raise ConfigError(f"--host {host} is not loopback: name the environment variable holding a bearer token with --token-env VAR")
    if token is not None and len(token) < 16:
        raise ConfigError(f"--token-env {token_env}: the token is {len(token)} characters; use at least 16")


def _tool_listing(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MCP's tool shape: name, description, input_schema."""
    return [{"name": s["name"], "description": s["description"], "input_schema": s["parameters"]} for s in specs]


def _observation_data(obs: EpisodeObservation, reward: float | None, done: bool, **extra: Any) -> dict[str, Any]:
    body = obs.model_dump(mode="json", exclude={"tools", "system_prompt"})
    body["text"] = obs.text
    body.update(extra)
    return {"observation": body, "reward": reward, "done": done}


@dataclass
class _Session:
    episode: AsyncEpisode


class ProctorServer:
    """The ASGI application: one environment, many sessions."""

    def __init__(self, env: Environment, config: ServeConfig) -> None:
        self.env = env
        self.config = config
        self.sessions = 0
        self._env_tools = self._environment_tools()

    def _environment_tools(self) -> list[dict[str, Any]]:
        """The tools any of the environment's tasks offers, for a list_tools before reset."""
        names: list[str] = []
        for task in self.env.tasks.values():
            names += [n for n in task.tools if n not in names]
        return [tool.spec() for tool in make_tools(names or ("bash", "read_file", "write_file", "submit"))]

    # -- HTTP ----------------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        return {"name": self.env.name,
                "description": "A Proctor environment: " + ", ".join([*self.env.tasks, *self.env.families]),
                "readme_content": None, "version": None, "author": None, "documentation_url": None}

    def schema(self) -> dict[str, Any]:
        from .episode import EpisodeState

        return {"action": Action.model_json_schema(), "observation": EpisodeObservation.model_json_schema(),
                "state": EpisodeState.model_json_schema()}

    def authorized(self, headers: dict[bytes, bytes] | list[tuple[bytes, bytes]]) -> bool:
        if self.config.token is None:
            return True
        given = dict(headers).get(b"authorization", b"").decode("latin-1")
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(value.strip().encode(), self.config.token.encode())

    # -- WebSocket -----------------------------------------------------------------------------
    async def serve_socket(self, ws: Any) -> None:
        if not self.authorized(ws.scope.get("headers", [])):
            await ws.close(code=1008)
            return
        await ws.accept()
        if self.sessions >= self.config.max_sessions:
            await self._send_error(ws, FrameError(f"the server is at its limit of {self.config.max_sessions} sessions; try again later", "CAPACITY_REACHED"))
            await ws.close(code=1013)
            return
        self.sessions += 1
        session = _Session(self._new_episode())
        reason = "the client disconnected"
        try:
            while True:
                try:
                    message = await asyncio.wait_for(ws.receive(), timeout=self.config.idle_timeout_s)
                except asyncio.TimeoutError:
                    reason = f"the client was silent for {self.config.idle_timeout_s:.0f} s"
                    await self._send_error(ws, FrameError(f"closing: {reason}", "SESSION_ERROR"))
                    break
                if message["type"] == "websocket.disconnect":
                    break
                try:
                    frame = self._parse(message)
                    if frame.get("type") == "close":
                        reason = "the client closed the session before the episode ended"
                        break
                    reply = await self._handle(session, frame)
                except FrameError as exc:
                    await self._send_error(ws, exc)
                    continue
                await ws.send_text(json.dumps(reply, default=str))
        except Exception:  # noqa: BLE001 - a broken connection ends this session only
            reason = "the connection broke"
        finally:
            self.sessions -= 1
            if not session.episode.done:
                await session.episode.close(reason)
            try:
                await ws.close()
            except Exception:  # noqa: BLE001 - already closed
                pass

    def _new_episode(self) -> AsyncEpisode:
        if self.config.ray is None:
            return AsyncEpisode(self.config.out_dir, env=self.env, config=self.config.rollout)
        from .ray_episode import RayEpisode

        return AsyncEpisode(episode=RayEpisode(self.config.out_dir, env=self.env, config=self.config.rollout, address=self.config.ray))

    @staticmethod
    async def _send_error(ws: Any, exc: FrameError) -> None:
        await ws.send_text(json.dumps({"type": "error", "data": {"message": str(exc), "code": exc.code}}))

    @staticmethod
    def _parse(message: dict[str, Any]) -> dict[str, Any]:
        text = message.get("text")
        if text is None:
            size = len(message.get("bytes") or b"")
            if size > MAX_FRAME_BYTES:
                raise FrameError(f"frame of {size} bytes is over the {MAX_FRAME_BYTES}-byte limit", "INVALID_JSON")
            raise FrameError("binary frame: send JSON as a text frame", "INVALID_JSON")
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if size > MAX_FRAME_BYTES:
            raise FrameError(f"frame of {size} bytes is over the {MAX_FRAME_BYTES}-byte limit", "INVALID_JSON")
        try:
            frame = json.loads(text)
        except ValueError as exc:
            raise FrameError(f"frame is not JSON: {exc}", "INVALID_JSON") from None
        if not isinstance(frame, dict):
            raise FrameError(f"frame is a JSON {type(frame).__name__}; send an object with a `type`", "INVALID_JSON")
        return frame

    async def _handle(self, session: _Session, frame: dict[str, Any]) -> dict[str, Any]:
        kind = frame.get("type")
        ep = session.episode
        if kind == "reset":
            data = frame.get("data", {})
            try:
                request = ResetRequest.model_validate(data)
            except ValidationError as exc:
                raise FrameError(describe_validation_error("reset", exc)) from None
            if request.framing is not None and request.framing not in SHIPPED_FRAMINGS:
                # Only shipped names: a client must not make the server read a file of its choosing.
                raise FrameError(f"reset: framing {request.framing!r} is not one of {', '.join(SHIPPED_FRAMINGS)}")
            try:
                obs = await ep.reset(request.task, seed=request.seed, difficulty=request.difficulty, params=request.params or None,
                                     impossible=request.impossible, framing=request.framing)
            except ProctorError as exc:
                raise FrameError(f"reset: {exc}") from None
            done = ep.done
            data = _observation_data(obs, ep.episode.result.reward if done else None, done,
                                     tools=_tool_listing(obs.tools), system_prompt=obs.system_prompt,
                                     run_id=ep.episode.run_id, status=ep.episode.result.status if done else None)
            return {"type": "observation", "data": data}
        if kind == "step":
            return {"type": "observation", "data": await self._step(ep, frame.get("data"))}
        if kind == "state":
            state = (await ep.state()).model_dump(mode="json")
            return {"type": "state", "data": {"episode_id": state["run_id"], "step_count": state["turns"], **state}}
        raise FrameError(f"unknown frame type {kind!r}; use reset, step, state or close", "UNKNOWN_TYPE")

    async def _step(self, ep: AsyncEpisode, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise FrameError(f"step data is a JSON {type(data).__name__}; send an action object")
        kind = data.get("type")
        if kind == "list_tools":
            specs = ep.episode.tool_specs if ep.episode.started else self._env_tools
            return {"observation": {"tools": _tool_listing(specs)}, "reward": None, "done": ep.done}
        episode = ep.episode
        if not episode.started:
            raise FrameError("step before reset: send a reset frame with the task first", "SESSION_ERROR")
        if episode.done:
            raise FrameError(f"the episode is done (status {episode.result.status}); send reset to start another", "SESSION_ERROR")
        if kind == "call_tool":
            extra = set(data) - {"type", "tool_name", "arguments", "metadata"}
            if extra:
                raise FrameError(f"call_tool: unknown field(s) {', '.join(sorted(extra))}")
            tool, arguments = data.get("tool_name"), data.get("arguments", {})
            problem = await ep.check_call(tool, arguments)
            if problem:
                raise FrameError(problem)
            action = Action(tool=tool, arguments=arguments)
        elif kind is None:
            try:
                action = Action.model_validate(data)
            except ValidationError as exc:
                raise FrameError(describe_validation_error("action", exc)) from None
            if action.tool is not None:
                problem = await ep.check_call(action.tool, action.arguments)
                if problem:
                    raise FrameError(problem)
        else:
            raise FrameError(f"unknown action type {kind!r}; use list_tools, call_tool, or a Proctor action (tool/arguments/text)")
        try:
            out: EpisodeStep = await ep.step(action)
        except EpisodeError as exc:
            raise FrameError(str(exc), "SESSION_ERROR") from None
        last = out.observation.messages[-1] if out.observation.messages else None
        extra: dict[str, Any] = {"info": out.info}
        if action.tool is not None:
            extra |= {"tool_name": action.tool, "result": last.text if last and last.kind == "tool_result" else None}
        return _observation_data(out.observation, out.reward, out.done, **extra)


def make_app(env: Environment, config: ServeConfig):
    """The Starlette application serving `env`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route, WebSocketRoute

    server = ProctorServer(env, config)

    def guarded(body):
        async def endpoint(request: Request) -> JSONResponse:
            if not server.authorized(request.scope.get("headers", [])):
                return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
            return JSONResponse(body())
        return endpoint

    app = Starlette(routes=[
        Route("/health", guarded(lambda: {"status": "healthy"})),
        Route("/metadata", guarded(server.metadata)),
        Route("/schema", guarded(server.schema)),
        WebSocketRoute("/ws", server.serve_socket),
    ])
    app.state.proctor = server
    return app


def serve(env: Environment, config: ServeConfig, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    import uvicorn

    uvicorn.run(make_app(env, config), host=host, port=port, log_level="warning", ws_max_size=TRANSPORT_MAX_BYTES,
                ws_ping_interval=20.0, ws_ping_timeout=20.0)
