"""The two ways a client of beflow's MCP server hears of a change, as the SDK's own client speaks them: a
``2026-07-28`` client listens (``subscriptions/listen``, SEP-2575); a client of an earlier revision subscribes
(``resources/subscribe``) and hears ``notifications/resources/updated``. The SDK's helper for the latter warns that
the request is gone from the new revision: the request is sent as such, as a client of its revision sends it."""

from __future__ import annotations

import mcp_types as types
from mcp import ClientSession

#: What a client that speaks both negotiates with beflow, and what one of the handshake era does.
MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"


async def subscribe(session: ClientSession, uri: str) -> None:
    """``resources/subscribe`` to ``uri``, as a client of a handshake-era revision sends it."""
    await session.send_request(types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)), types.EmptyResult)
