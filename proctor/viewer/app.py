"""The viewer's web app (starlette): the index, a page per rollout, the raw files, the red-team table.

Read-only by construction: no route writes, files are opened O_RDONLY, and a URL names a rollout
only by its key in the catalog, never by a path, so `/runs/../../etc/passwd` has nothing to join.
Every page is served with a Content-Security-Policy that allows scripts only from the viewer's own
static file: even if student text ever reached a page unescaped, an inline `<script>` or `onerror=`
would not run, and nothing could be sent anywhere but back to the viewer."""

from __future__ import annotations

import os
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .catalog import Catalog, STATUSES
from .files import RAW_FILES, Unreadable, open_regular
from .inert import pretty, visible
from .query import IndexQuery, facets, select
from .redteam_table import find_tables
from .rollout import load
from .transcript_pages import EVENTS_PER_PAGE

HERE = Path(__file__).resolve().parent
# No inline script or style anywhere, no frames, no plugins, no form posts elsewhere, and fetches
# only back to the viewer (what the live refresh needs).
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
# A raw file is shown as plain text in a sandboxed document: no script of any origin runs in it.
RAW_CSP = "default-src 'none'; sandbox"
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


class SecurityHeaders:
    """Adds the CSP and friends to every response, errors included."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-security-policy"]
                raw = scope["path"].startswith("/runs/") and "/raw/" in scope["path"]
                headers += [
                    (b"content-security-policy", (RAW_CSP if raw else CSP).encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                    (b"cache-control", b"no-store"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def _templates() -> Environment:
    # autoescape=True for every template, whatever its name: student text is escaped everywhere.
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined)
    env.filters["visible"] = visible
    env.filters["pretty"] = pretty
    # A malformed result may hold a string where a list or an object belongs; show nothing there.
    env.filters["L"] = lambda value: value if isinstance(value, list) else []
    env.filters["D"] = lambda value: value if isinstance(value, dict) else {}
    env.globals["STATUSES"] = STATUSES
    return env


def _number(value, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    value = value + 0.0 if isinstance(value, float) else value  # -0.0 (a zero penalty) reads as 0
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def create_app(roots: list[Path], *, host: str = "127.0.0.1") -> Starlette:
    catalog = Catalog(roots)
    facet_cache: dict = {}
    env = _templates()
    env.filters["num"] = _number
    env.filters["size"] = _size

    # The handlers are plain functions: starlette runs them in its thread pool, so reading a big
    # batch or a 100 MB transcript never stalls the event loop (and the other requests) meanwhile.
    def page(name: str, status_code: int = 200, **context) -> HTMLResponse:
        context.setdefault("roots", roots)
        context.setdefault("has_redteam", bool(find_tables(roots)))
        return HTMLResponse(env.get_template(name).render(**context), status_code=status_code)

    def problem(message: str, status_code: int) -> HTMLResponse:
        return page("error.html", status_code, message=message)

    def index(request: Request) -> Response:
        try:
            query = IndexQuery.model_validate(dict(request.query_params))
        except ValidationError as exc:
            first = exc.errors()[0]
            return problem(f"bad query parameter {'.'.join(map(str, first['loc']))}: {first['msg']}", 400)
        rows = catalog.rows()
        if facet_cache.get("generation") != catalog.generation:  # the filters' values change only with the rollouts
            facet_cache.update(generation=catalog.generation, facets=facets(rows))
        return page("index.html", query=query, result=select(rows, query), facets=facet_cache["facets"], generation=catalog.generation)

    def run(request: Request) -> Response:
        row = catalog.get(request.path_params["key"])
        if row is None:
            return problem("no rollout with that id in these run directories", 404)
        try:
            number = max(1, int(request.query_params.get("page", "1")))
        except ValueError:
            return problem("bad query parameter page: not a whole number", 400)
        return page("run.html", view=load(row, number), per_page=EVENTS_PER_PAGE)

    def raw(request: Request) -> Response:
        row, name = catalog.get(request.path_params["key"]), request.path_params["name"]
        if row is None or name not in RAW_FILES:
            return problem("no such raw file", 404)
        try:
            fd = open_regular(row.directory / name)
        except Unreadable as exc:
            return problem(str(exc), 404)

        def chunks():
            try:
                while chunk := os.read(fd, 1 << 20):
                    yield chunk
            finally:
                os.close(fd)

        return StreamingResponse(chunks(), media_type="text/plain; charset=utf-8",
                                 headers={"content-disposition": f'inline; filename="{name}"'})

    def redteam(request: Request) -> Response:
        return page("redteam.html", tables=find_tables(roots), known={r.key for r in catalog.rows()})

    def generation(request: Request) -> Response:
        rows = catalog.rows()
        return JSONResponse({"generation": catalog.generation, "rollouts": len(rows)})

    allowed = LOOPBACK_HOSTS + [host] if host in LOOPBACK_HOSTS else ["*"]
    app = Starlette(
        routes=[
            Route("/", index), Route("/runs/{key}", run), Route("/runs/{key}/raw/{name}", raw),
            Route("/redteam", redteam), Route("/api/generation", generation),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        # A web page the user visits could point a DNS name at 127.0.0.1 and read the viewer
        # (DNS rebinding); a request must name the viewer's own host.
        middleware=[Middleware(SecurityHeaders), Middleware(TrustedHostMiddleware, allowed_hosts=allowed)],
    )
    app.state.catalog = catalog
    return app
