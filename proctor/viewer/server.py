"""Serving the viewer with uvicorn, on loopback unless told otherwise."""

from __future__ import annotations

import socket
import time

from ..errors import ConfigError
from .app import LOOPBACK_HOSTS, create_app
from .catalog import check_roots


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or a ConfigError saying why not (a port in use is the common case)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    except (socket.gaierror, UnicodeError) as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc}") from None
    return sock


def indexed_app(roots, host: str):
    """The app with every result already read once, so the first page a user opens is quick."""
    app = create_app(roots, host=host)
    app.state.catalog.refresh(force=True)
    return app


def serve(paths: list[str], host: str = "127.0.0.1", port: int = 8765, *, announce=print) -> None:
    import uvicorn

    roots = check_roots(paths)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    if host not in LOOPBACK_HOSTS:
        announce(f"warning: serving on {host}, not loopback: anyone who can reach it can read these transcripts")
    started = time.monotonic()
    app = indexed_app(roots, host)
    found = len(app.state.catalog.rows())
    announce(f"indexed {found} rollouts in {time.monotonic() - started:.1f} s; viewing them on http://{host}:{bound}/ (read-only; Ctrl-C stops)")
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


class BackgroundViewer:
    """A viewer served from a thread of this process (for tests, benchmarks and notebooks):
    `url` is where it listens; `close()` stops it."""

    def __init__(self, roots, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 10.0, index_first: bool = True) -> None:
        import threading
        import time

        import uvicorn

        sock = bind(host, port)
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        roots = check_roots([str(r) for r in roots])
        app = indexed_app(roots, host) if index_first else create_app(roots, host=host)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="proctor-view")
        self._thread.start()
        deadline = time.monotonic() + start_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the viewer did not start on {self.url}")
            time.sleep(0.01)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    def __enter__(self) -> "BackgroundViewer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
