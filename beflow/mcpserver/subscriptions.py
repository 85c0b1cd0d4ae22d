"""What a client of beflow's MCP server hears without asking: a subscribed resource that changed
(``notifications/resources/updated``) and, on a server bound to an issue, its issue changing and a new run of it
(``notifications/resources/list_changed``). The watched resources are looked at every ``poll`` seconds; listen
streams hear through the SDK's subscription bus, a client of an older protocol through its own session: each
session hears of what it subscribed to, however many clients share the server (MCP over HTTP)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from beflow.mcpserver.schema import ISSUE_URI

#: The most handshake-era sessions one server remembers (the HTTP session manager allows 64).
MAX_SESSIONS = 64


class ResourceWatch:
    """The subscriptions of one server. ``stamp(uri)``: what the resource says now (None when unreadable);
    ``run_uris()``: the runs listed as resources; ``bound_issue``: the issue the server is bound to, if any."""

    def __init__(
        self,
        *,
        bound_issue: str | None,
        poll: float,
        stamp: Callable[[str], Any],
        run_uris: Callable[[], list[str]],
    ) -> None:
        self.bound_issue = bound_issue
        self.poll = poll
        self._stamp = stamp
        self._run_uris = run_uris
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        #: The handshake-era sessions and what each subscribed to, for notifications nobody asked for in a
        #: request; newest last, at most MAX_SESSIONS (a session that went away is dropped when a send fails).
        self._sessions: dict[Any, set[str]] = {}
        self._listened: set[str] = set()  # subscribed to by clients of the modern protocol: they hear on the bus

    @property
    def subscribed(self) -> set[str]:
        """Every resource some client subscribed to: what :meth:`run` looks at."""
        return self._listened.union(*self._sessions.values())

    def remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and ctx.session not in self._sessions:
            self._sessions[ctx.session] = set()
            while len(self._sessions) > MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]

    def subscribe(self, ctx: ServerRequestContext[Any, Any], uri: str) -> None:
        self.remember(ctx)
        self._sessions.get(ctx.session, self._listened).add(uri)

    def unsubscribe(self, ctx: ServerRequestContext[Any, Any], uri: str) -> None:
        self._sessions.get(ctx.session, self._listened).discard(uri)

    async def run(self) -> None:
        """Look at the watched resources every ``poll`` seconds; announce what changed."""
        seen: dict[str, Any] = {}
        listing: Any = None
        while True:
            uris = set(self.subscribed)
            if self.bound_issue is not None:
                uris.add(ISSUE_URI.format(key=self.bound_issue))
            for uri in sorted(uris):
                stamp = await anyio.to_thread.run_sync(self._stamp, uri)
                if uri in seen and stamp != seen[uri]:
                    await self.announce(uri)
                seen[uri] = stamp
            if self.bound_issue is not None:
                runs = await anyio.to_thread.run_sync(self._run_uris)
                if listing is not None and runs != listing:
                    await self.announce(None)
                listing = runs
            await anyio.sleep(self.poll)

    async def announce(self, uri: str | None) -> None:
        """``uri`` changed (None: the list of resources did): tell listen streams and each session that
        subscribed to it (every session, for the list)."""
        with contextlib.suppress(Exception):  # the bus has no client that could make it fail; be sure
            await self.bus.publish(ResourcesListChanged() if uri is None else ResourceUpdated(uri=uri))
        for session, uris in list(self._sessions.items()):
            try:
                if uri is None:
                    await session.send_resource_list_changed()
                elif uri in uris:
                    await session.send_resource_updated(uri)
            except Exception:  # a client that went away: it hears nothing more
                self._sessions.pop(session, None)
