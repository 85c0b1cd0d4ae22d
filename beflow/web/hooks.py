"""``POST /hooks/{github,gitlab,linear,jira}``: a forge's webhook deliveries, verified (:mod:`beflow.web.webhooks`),
counted, and — for the forge of the project's tracker or code host, an event that may change what is ready — a wake-up
of the watch: its next tick runs now instead of ``watch.interval`` later (docs/webhooks.md).

No token of beflow's is asked for (a forge cannot send it): the signature is the authentication, so a forge with
no secret configured is refused. The body is read up to :data:`~beflow.web.webhooks.MAX_BODY` and no further.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from beflow.run import session_reporter
from beflow.web import api
from beflow.web.endpoints import HOOKS
from beflow.web.webhooks import FORGES, MAX_BODY, Delivery, Forge, Refused, verify

if TYPE_CHECKING:
    from beflow.web.server import Server

#: The routes' prefix (the guard asks no token under it).
PREFIX = "/hooks/"


class Hooks:
    """The webhooks' routes, over what the server keeps of them: the delivery ids seen, and the tally."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.replays = server.hook_replays
        self.tally = server.hook_tally

    def routes(self) -> list[Route]:
        """A route for each endpoint :data:`~beflow.web.endpoints.HOOKS` declares (and the OpenAPI document says)."""
        forges = {f"{PREFIX}{forge}": forge for forge in FORGES}
        return [Route(e.path, self._endpoint(forges[e.path]), methods=[e.method]) for e in HOOKS]

    def _endpoint(self, forge: Forge) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self.receive(forge, request)

        return endpoint

    async def receive(self, forge: Forge, request: Request) -> Response:
        try:
            delivery = await self._verified(forge, request)
        except Refused as refused:
            self.tally.refuse(refused.reason)
            return self.server.problem(refused.status, refused.reason, f"{forge} delivery refused: {refused.message}")
        project = self.server.watched()[0]
        if forge not in project.config.webhook_forges():
            self.tally.ignored += 1
            said = f"{forge} is neither this project's tracker nor its code host: nothing done"
            return self.server.json(api.Accepted(message=said), 202)
        if delivery.stops:
            session_reporter.look_now()  # the running runs' sessions are asked now, not at their next look
        if not delivery.wakes:
            self.tally.ignored += 1
            said = f"{delivery.event or 'this event'} changes nothing ready"
            return self.server.json(api.Accepted(message=said), 202)
        source = self.server.source
        if source is None:  # (beflow serve)
            self.tally.ignored += 1
            return self.server.json(api.Accepted(message="no watch is running: nothing to wake"), 202)
        self.tally.woke += 1
        await self.server.off_loop(source.hooked, forge)
        return self.server.json(api.Accepted(message="the watch looks at the tracker now"), 202)

    async def _verified(self, forge: Forge, request: Request) -> Delivery:
        project = self.server.watched()[0]
        name = project.config.webhooks.secret_env.named().get(forge)
        secret = os.environ.get(name, "").strip() if name else ""
        if not secret:
            raise Refused("off", f"no secret is configured for {forge}'s webhooks (webhooks.secret_env.{forge})")
        body = await _body(request)
        delivery = verify(forge, {k.lower(): v for k, v in request.headers.items()}, body, secret, time.time())
        if not self.replays.first_time(forge, delivery.id):
            raise Refused("replayed", "this delivery was received before")
        return delivery


async def _body(request: Request) -> bytes:
    """The raw body, refused as soon as it passes :data:`MAX_BODY` (a declared length past it before any is read)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise Refused("too_large", f"deliveries are {MAX_BODY} bytes at most")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                raise Refused("too_large", f"deliveries are {MAX_BODY} bytes at most")
            chunks.append(chunk)
    except ClientDisconnect:  # (the guard cuts a body without a length off at the limit: it looks like a disconnect)
        raise Refused("too_large", f"deliveries are {MAX_BODY} bytes at most") from None
    return b"".join(chunks)
