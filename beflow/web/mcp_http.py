"""MCP over Streamable HTTP at ``/mcp``: the same server as ``beflow mcp serve``
(:class:`beflow.mcpserver.server.BeflowServer`, its tools from the registry and its resources), served by the SDK's
``StreamableHTTPSessionManager``.

``/mcp`` is unbound (the agent-safe tools, as ``beflow mcp serve`` without ``--allow``); ``/mcp/issues/<key>`` is a
server bound to that issue, as ``beflow mcp serve --issue <key>`` is: no tool argument can reach another issue.
Resource updates are pushed from the watch's events (a run's progress announces ``beflow://run/<id>`` and
``beflow://issue/<key>``), not polled. The token is checked before any of this (:class:`beflow.web.middleware.Guard`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from beflow.app import open_tracker
from beflow.config import Project
from beflow.errors import BeflowError
from beflow.mcpserver.schema import ISSUE_URI, RUN_URI
from beflow.web.guard import Policy
from beflow.web.live import Hub

if TYPE_CHECKING:  # the MCP SDK's server costs a second of CPU to load: only the first /mcp request pays for it
    from beflow.mcpserver.launch import Launch
    from beflow.mcpserver.server import BeflowServer

#: The resources a watch's events touch (beflow.mcpserver.server's URIs).

#: Servers bound to an issue kept at once, at most.
MAX_BOUND = 32


class RemoteMcp:
    """The MCP servers of one HTTP server: the unbound one and those bound to an issue, made on first use."""

    def __init__(self, project: Project, hub: Hub, policy: Policy) -> None:
        self.project = project
        self.hub = hub
        self.policy = policy
        self.servers: dict[str | None, tuple[BeflowServer, Any]] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        self._making = anyio.Lock()
        self._cursor = 0
        hub.observers.append(self._on_events)

    def _manager(self, launch: Launch) -> tuple[BeflowServer, Any]:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        from beflow.mcpserver.server import BeflowServer

        server = BeflowServer(launch)
        # The guard has checked Host, Origin and the token; the manager checks the body's size.
        return server, StreamableHTTPSessionManager(server.server, session_idle_timeout=600, max_sessions=64)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            self._cursor = self.hub.newest
            try:
                yield
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    def stop(self) -> None:
        """When the server is asked to stop: every session ends now, and with it its open streams (a client's GET
        stream would otherwise hold the server's shutdown until its timeout cancels it, loudly)."""
        tasks, self._tasks = self._tasks, None
        if tasks is not None:
            tasks.cancel_scope.cancel()

    async def _start(self, key: str | None, launch: Launch) -> tuple[BeflowServer, Any]:
        assert self._tasks is not None
        server, manager = self._manager(launch)

        async def serve(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            async with manager.run():
                task_status.started()
                await anyio.sleep_forever()

        await self._tasks.start(serve)
        self.servers[key] = (server, manager)
        return server, manager

    async def _unbound(self) -> tuple[BeflowServer, Any]:
        async with self._making:
            if None not in self.servers:
                from beflow.mcpserver.launch import Launch, check_launch

                # (no run's channel here: its clients are people's, and what they write is signed as theirs)
                launch = Launch(project=self.project, opens_tracker=open_tracker, remote=True)
                await self._start(None, await anyio.to_thread.run_sync(check_launch, launch))
            return self.servers[None]

    async def _bound(self, key: str) -> tuple[BeflowServer, Any] | Refusal:
        from beflow.mcpserver.launch import Launch, check_launch

        async with self._making:
            try:
                launch = await anyio.to_thread.run_sync(
                    check_launch, Launch(project=self.project, issue=key, opens_tracker=open_tracker, remote=True)
                )
            except BeflowError as error:
                fix = "The issues are at /api/v1/issues: connect to /mcp/issues/KEY with one of their keys."
                return Refusal(404, error.code, error.message, fix)
            if launch.issue in self.servers:
                return self.servers[launch.issue]
            if len(self.servers) > MAX_BOUND:
                return Refusal(503, "too_many", "too many bound servers", "Try again later, or use /mcp.")
            return await self._start(launch.issue, launch)

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._tasks is None:
            await Refusal(503, "stopping", "the server is stopping").answer(scope, receive, send)
            return
        key = scope.get("path_params", {}).get("key")
        found = await self._unbound() if key is None else await self._bound(str(key))
        if isinstance(found, Refusal):
            await found.answer(scope, receive, send)
            return
        _, manager = found
        await manager.handle_request(scope, receive, send)

    # -- pushed notifications ---------------------------------------------------------------------------------------

    def _on_events(self) -> None:
        """New events from the watch (on the server's loop): the resources they touch are announced."""
        _, events = self.hub.since(self._cursor)
        if not events:
            return
        self._cursor = events[-1]["id"]
        if self._tasks is None:
            return
        uris: list[str] = []
        for event in events:
            if event.get("run"):
                uris.append(RUN_URI.format(id=event["run"]))
            if event.get("issue") and event.get("event") in ("progress", "finished", "started", "dispatched"):
                uris.append(ISSUE_URI.format(key=event["issue"]))
        for server, _ in list(self.servers.values()):
            bound = server.context.bound_issue
            for uri in dict.fromkeys(uris):
                if bound is None or uri == ISSUE_URI.format(key=bound) or _run_of(uri, bound, events):
                    self._tasks.start_soon(server.announce, uri)


@dataclass(frozen=True)
class Refusal:
    """A request ``/mcp`` cannot serve, answered as MCP answers an error: a JSON-RPC error (``-32602`` for what does
    not exist here, as for a resource; ``-32603`` otherwise), beflow's code and fix in its ``data``, with the id of
    the request it answers."""

    status: int
    code: str
    message: str
    fix: str | None = None

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = None
        if scope.get("method") == "POST":
            body = await Request(scope, receive).body()  # (the guard bounded its size)
            with contextlib.suppress(ValueError):
                sent = json.loads(body)
                if isinstance(sent, dict) and isinstance(sent.get("id"), str | int):
                    request_id = sent["id"]
        rpc_code = -32602 if self.status == 404 else -32603
        data = {"code": self.code, "fix": self.fix}
        error = {"code": rpc_code, "message": self.message, "data": data}
        answer = JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, self.status)
        await answer(scope, receive, send)


def _run_of(uri: str, issue: str, events: list[dict[str, Any]]) -> bool:
    """Whether ``uri`` is a run of ``issue`` (a bound server hears of its own issue's runs only)."""
    return any(RUN_URI.format(id=e.get("run")) == uri and e.get("issue") == issue for e in events)
