"""The ASGI application of beflow's HTTP server (:class:`beflow.web.server.Server`): its pages, its API, its static
files and MCP, behind the guard."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from beflow.web.middleware import Guard
from beflow.web.pages import page_routes
from beflow.web.routes import api_routes
from beflow.web.server import Server
from beflow.web.transcripts import Transcripts
from beflow.web.views import Views

STATIC = Path(__file__).parent / "static"


def build_app(server: Server) -> ASGIApp:
    """The ASGI application: the pages and the API (which share their views, and the caches they keep), the
    static files and MCP, behind the guard (Host, Origin, token, body size)."""
    views = Views(server, Transcripts(server.store, server.call))
    routes: list[BaseRoute] = [*page_routes(server, views), *api_routes(server, views)]
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
    app = Starlette(routes=routes, lifespan=lifespan)
    return Guard(app, server)


class _Asgi:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
