"""The end of a connection's input held back until every request received has been answered: stdin EOF and signals
end the input, but a call in flight still finishes and its answer is written (the SDK would cancel it); and no
more than :data:`MAX_PENDING` requests are read ahead of their answers."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

logger = logging.getLogger("beflow.mcp")

#: Requests received and not yet answered, at most: beyond, the server reads no more until one is answered.
MAX_PENDING = 64


class Drain:
    """Stream wrappers that hold back the end of input until every request received has been answered: stdin EOF
    and signals end the input, but a call in flight still finishes and its answer is written (the SDK would cancel
    it). ``on_draining`` runs when the input ends (long-lived streams are closed there)."""

    def __init__(
        self,
        read: Any,
        write: Any,
        on_draining: Callable[[], None],
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._read = read
        self._max_pending = max_pending
        self._write = write
        self._on_draining = on_draining
        self._pending: set[types.RequestId] = set()
        self._changed = anyio.Event()
        self.reader = _Reader(self)
        self.writer = _Writer(self)

    def received(self, item: Any) -> None:
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, types.JSONRPCRequest):
                self._pending.add(message.id)
            elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                # A cancelled request is never answered: nothing to wait for.
                self._settle((message.params or {}).get("requestId"))

    def sent(self, item: Any) -> None:
        if isinstance(item, SessionMessage) and isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self._settle(item.message.id)

    async def room(self) -> None:
        """Wait while :data:`MAX_PENDING` requests are unanswered: what is queued for a client that does not read
        stays bounded (the client's own writes block instead)."""
        while len(self._pending) >= self._max_pending:
            await self._changed.wait()

    def _settle(self, request_id: Any) -> None:
        self._pending.discard(request_id)
        self._changed.set()
        self._changed = anyio.Event()

    async def drained(self) -> None:
        self._on_draining()
        if self._pending:
            logger.info("beflow mcp: input ended; answering %d call(s) in flight, then stopping", len(self._pending))
        while self._pending:
            await self._changed.wait()


class _Reader:
    def __init__(self, drain: Drain) -> None:
        self._drain = drain

    @property
    def last_context(self) -> Any:
        return getattr(self._drain._read, "last_context", None)

    async def receive(self) -> Any:
        await self._drain.room()
        try:
            item = await self._drain._read.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            await self._drain.drained()
            raise anyio.EndOfStream from None
        self._drain.received(item)
        return item

    async def aclose(self) -> None:
        await self._drain._read.aclose()

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Reader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Writer:
    def __init__(self, drain: Drain) -> None:
        self._drain = drain

    async def send(self, item: Any) -> None:
        await self._drain._write.send(item)
        self._drain.sent(item)

    async def aclose(self) -> None:
        await self._drain._write.aclose()

    async def __aenter__(self) -> _Writer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
