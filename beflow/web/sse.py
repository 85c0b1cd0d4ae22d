"""``/api/v1/events``: the watch's event stream as server-sent events, from the hub's ring (:class:`Hub`), one
stream a client, resumable with ``Last-Event-ID``; every event masked as the rest of what the server sends."""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from beflow.web.lists import number
from beflow.web.live import Dropped, Stopping, Subscriber

if TYPE_CHECKING:
    from beflow.web.server import Server

#: Seconds a write to an SSE client may take before the client is dropped.
SEND_TIMEOUT = 5.0
#: Seconds between keep-alive comments on a quiet event stream.
PING = 15.0
#: Events an SSE client may fall behind the newest before it is dropped.
BEHIND = 1000


async def events(server: Server, request: Request) -> Response | EventStream:
    """A stream for this client, from after the event it names (``Last-Event-ID``, or ``?since=``), else from the
    oldest the ring keeps; a problem when the hub takes no more clients or is stopping."""
    last = number(request.headers.get("last-event-id") or request.query_params.get("since"), -1)
    try:
        subscriber = server.hub.subscribe(None if last < 0 else last)
    except OverflowError as error:
        return server.problem(503, "too_many_clients", str(error), "Close another page or client, then retry.")
    except Stopping as error:
        return server.problem(503, "stopping", str(error))
    return EventStream(server, subscriber)


class EventStream:
    """One client's stream. A write the client does not take within :data:`SEND_TIMEOUT`, or a client
    :data:`BEHIND` events behind, ends the stream (the client may reconnect and resume with ``Last-Event-ID``);
    the client going away ends it too."""

    def __init__(self, server: Server, subscriber: Subscriber) -> None:
        self.server = server
        self.subscriber = subscriber

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hub = self.server.hub
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]

        async def write(text: str) -> None:
            with anyio.fail_after(SEND_TIMEOUT):
                await send({"type": "http.response.body", "body": text.encode(), "more_body": True})

        async def stream() -> None:
            with anyio.fail_after(SEND_TIMEOUT):
                await send({"type": "http.response.start", "status": 200, "headers": headers})
            await write(": beflow events\nretry: 1000\n\n")
            while True:
                got: tuple[int, list[dict[str, Any]]] | None = None
                with anyio.move_on_after(PING):
                    got = await hub.next_batch(self.subscriber, BEHIND)
                if got is None:
                    await write(": ping\n\n")  # a proxy keeps the connection; a dead client is found out
                    continue
                missed, batch = got
                if missed:
                    notice = {"event": "notice", "issue": None, "time": time.time()}
                    notice["message"] = f"{missed} events are no longer kept: read /api/v1/state"
                    await write(f"data: {json.dumps(notice)}\n\n")
                for event in batch:
                    await write(self.server.said.text(self.server.redact, event))

        try:
            async with anyio.create_task_group() as tasks:

                async def disconnected() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tasks.cancel_scope.cancel()

                tasks.start_soon(disconnected)
                try:
                    await stream()
                except (Dropped, Stopping, TimeoutError, OSError):
                    # A client that does not keep up is let go (the watch never waits for one), and every client
                    # when the server stops: the response is ended if the client takes that much, else the
                    # connection is closed.
                    with anyio.move_on_after(1), contextlib.suppress(Exception):
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                tasks.cancel_scope.cancel()
        finally:
            hub.unsubscribe(self.subscriber)
