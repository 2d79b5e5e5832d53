"""A scripted model provider on loopback, speaking the OpenAI Chat Completions and the Anthropic
Messages wire formats over real HTTP, so the official SDKs are exercised end to end.

    with FakeProvider([openai_reply(tool="bash", arguments={"command": "ls"}), Fail(429, retry_after="0.2"),
                       openai_reply(text="done")]) as server:
        ModelConfig(model="m", base_url=server.openai_url)

Each request takes the next action from the script; every request is recorded (path, headers,
JSON body, arrival time) for the test to inspect. `on_request` runs inside the handler, while the
client waits, so a test can look at the machine mid-rollout."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    body: dict[str, Any]
    delay_s: float = 0.0


@dataclass
class Fail:
    status: int
    message: str = "scripted failure"
    retry_after: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Raw:
    """Answer with this status and body as they are (e.g. a 200 that is not JSON)."""

    status: int
    text: str


@dataclass
class Drop:
    """Close the connection without answering."""


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


Action = Reply | Fail | Drop | Raw


def openai_reply(text: str | None = None, *, tool: str | None = None, arguments: Any = None, calls: list | None = None,
                 reasoning: str | None = None, reasoning_details: Any = None, finish: str | None = None,
                 usage: tuple[int, int, int] = (100, 20, 0), token_ids: bool = False, delay_s: float = 0.0) -> Reply:
    """A chat.completion. `tool`/`arguments` make one call (arguments: a dict, or a raw string sent
    as is); `calls` several [(name, arguments)]."""
    calls = list(calls or ([(tool, arguments if arguments is not None else {})] if tool else []))
    tool_calls = [{"id": f"call_{i}_{time.monotonic_ns() % 10**8}", "type": "function",
                   "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                  for i, (name, args) in enumerate(calls)]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if reasoning_details is not None:
        message["reasoning_details"] = reasoning_details
    choice: dict[str, Any] = {"index": 0, "message": message,
                              "finish_reason": finish or ("tool_calls" if tool_calls else "stop")}
    body: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": "fake",
                            "choices": [choice],
                            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": usage[0] + usage[1],
                                      "prompt_tokens_details": {"cached_tokens": usage[2]}}}
    if token_ids:
        body["prompt_token_ids"] = [101, 102, 103]
        choice["token_ids"] = [7, 8]
        choice["logprobs"] = {"content": [{"token": "a", "logprob": -0.25, "bytes": [97], "top_logprobs": []},
                                          {"token": "b", "logprob": -1.5, "bytes": [98], "top_logprobs": []}]}
    return Reply(body, delay_s)


def anthropic_reply(text: str | None = None, *, tool: str | None = None, arguments: Any = None,
                    thinking: str | None = None, signature: str = "sig-opaque-123", stop: str | None = None,
                    usage: tuple[int, int, int] = (100, 20, 0), delay_s: float = 0.0) -> Reply:
    content: list[dict[str, Any]] = []
    if thinking is not None:
        content.append({"type": "thinking", "thinking": thinking, "signature": signature})
    if text is not None:
        content.append({"type": "text", "text": text})
    if tool:
        content.append({"type": "tool_use", "id": f"toolu_{time.monotonic_ns() % 10**8}", "name": tool,
                        "input": arguments if arguments is not None else {}})
    body = {"id": "msg_fake", "type": "message", "role": "assistant", "model": "fake", "content": content,
            "stop_reason": stop or ("tool_use" if tool else "end_turn"), "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1], "cache_read_input_tokens": usage[2],
                      "cache_creation_input_tokens": 0}}
    return Reply(body, delay_s)


class FakeProvider:
    def __init__(self, script: list[Action], *, on_request: Callable[[Recorded], None] | None = None,
                 respond: Callable[[Recorded], Action] | None = None) -> None:
        """`respond`, if given, answers every request once the script is used up (a fake model
        that reads the request, e.g. a stand-in grader behind a real HTTP endpoint)."""
        self.script: deque[Action] = deque(script)
        self.respond = respond
        self.requests: list[Recorded] = []
        self.on_request = on_request
        self.errors: list[str] = []
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = {"_unparsed": raw.decode("utf-8", "replace")}
                record = Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                with provider._lock:
                    provider.requests.append(record)
                    action = provider.script.popleft() if provider.script else None
                if action is None and provider.respond is not None:
                    action = provider.respond(record)
                if provider.on_request:
                    try:
                        provider.on_request(record)
                    except Exception as exc:  # noqa: BLE001 - reported to the test
                        provider.errors.append(f"on_request: {type(exc).__name__}: {exc}")
                if action is None:
                    provider.errors.append(f"request {len(provider.requests)} to {self.path}: the script is exhausted")
                    self._send(599, {"error": {"message": "fake provider: script exhausted"}})
                elif isinstance(action, Raw):
                    data = action.text.encode()
                    self.send_response(action.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif isinstance(action, Drop):
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                elif isinstance(action, Fail):
                    headers = dict(action.headers)
                    if action.retry_after is not None:
                        headers["retry-after"] = action.retry_after
                    kind = "overloaded_error" if action.status == 529 else "api_error"
                    self._send(action.status, {"type": "error", "error": {"type": kind, "message": action.message}}, headers)
                else:
                    if action.delay_s:
                        time.sleep(action.delay_s)
                    self._send(200, action.body)

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timed out) first

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
