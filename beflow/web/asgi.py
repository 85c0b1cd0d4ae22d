"""The ASGI application of beflow's HTTP server (:class:`beflow.web.server.Server`): its pages, its API, its static
files and MCP, behind the guard."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from beflow.web.hooks import Hooks
from beflow.web.middleware import Guard
from beflow.web.pages import page_routes
from beflow.web.routes import api_routes
from beflow.web.server import Server
from beflow.web.transcripts import Transcripts
from beflow.web.views import Views

STATIC = Path(__file__).parent / "static"


def build_app(server: Server) -> ASGIApp:
    """The ASGI application: the pages and the API (which share their views, and the caches they keep), the
    static files, the forges' webhooks and MCP, behind the guard (Host, Origin, token, body size)."""
    views = Views(server, Transcripts(server.store, server.call))
    routes: list[BaseRoute] = [*page_routes(server, views), *api_routes(server, views), *Hooks(server).routes()]
    routes.append(Mount("/static", StaticFiles(directory=STATIC), name="static"))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        server.hub.attach(asyncio.get_running_loop())
        if server.mcp is None:
            yield
            return
        async with server.mcp.running():
            yield

    if server.mcp is not None:
        endpoint = _Asgi(server.mcp.asgi)  # (an ASGI app: Starlette calls a function with a Request)
        methods = ["GET", "POST", "DELETE"]
        routes[:0] = [Route("/mcp", endpoint, methods=methods), Route("/mcp/issues/{key}", endpoint, methods=methods)]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=_api_problems(server))
    return Guard(app, server)


def _api_problems(server: Server) -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    """Starlette's own 404 and 405 (no such path, a method a path does not take) as the API's other errors are,
    under ``/api/``: ``{"error": {...}}``; the pages keep Starlette's plain answers."""
    from starlette.exceptions import HTTPException
    from starlette.responses import PlainTextResponse

    async def answer(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        path = request.url.path
        if not (path == "/api" or path.startswith("/api/")):
            return PlainTextResponse(error.detail, error.status_code, headers=error.headers)
        shown = path if len(path) <= 80 else path[:79] + "…"
        if error.status_code == 405:
            problem = server.problem(405, "method", f"{shown} does not take {request.method}")
        else:
            problem = server.problem(404, "not_found", f"no endpoint {shown}", _ENDPOINTS_FIX)
        problem.headers.update(error.headers or {})
        return problem

    return {404: answer, 405: answer}


_ENDPOINTS_FIX = "GET /api/v1/openapi.json describes every endpoint (`beflow docs dashboard` too)."


class _Asgi:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
