"""What a client of beflow's MCP server hears without asking: a subscribed resource that changed
(``notifications/resources/updated``) and, on a server bound to an issue, its issue changing and a new run of it
(``notifications/resources/list_changed``). The watched resources are looked at every ``poll`` seconds; listen
streams hear through the SDK's subscription bus, a client of an older protocol through the session of its
handshake."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

ISSUE_URI = "beflow://issue/{key}"


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
        self.subscribed: set[str] = set()
        self._session: Any = None  # the handshake-era session, for notifications nobody asked for in a request

    def remember(self, ctx: ServerRequestContext[Any, Any]) -> None:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self._session = ctx.session

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
        """``uri`` changed (None: the list of resources did): tell listen streams and a subscribed session."""
        with contextlib.suppress(Exception):  # a client that went away
            if uri is None:
                await self.bus.publish(ResourcesListChanged())
                if self._session is not None:
                    await self._session.send_resource_list_changed()
                return
            await self.bus.publish(ResourceUpdated(uri=uri))
            if self._session is not None and uri in self.subscribed:
                await self._session.send_resource_updated(uri)
