"""What every request passes before any route: its Host, its Origin, the token, its body's size, and CORS for the
origins ``http.origins`` names — as :class:`beflow.web.guard.Policy` decides (docs/dashboard.md#security). The
forges' webhooks (``/hooks/*``) need no token (their signature is checked by their route) and take larger bodies,
up to their own limit; the Host check holds for them too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from beflow.web.guard import COOKIE, RESOURCE_METADATA, bearer, challenge
from beflow.web.hooks import PREFIX as HOOKS
from beflow.web.webhooks import MAX_BODY as HOOK_MAX_BODY

if TYPE_CHECKING:
    from beflow.web.server import Server

#: Bytes of a request body, at most (the API's bodies are a status and a note).
MAX_BODY = 64 * 1024


class Guard:
    """Host, Origin, token and body size, checked before any route (docs/dashboard.md#security)."""

    def __init__(self, app: ASGIApp, server: Server) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        policy = self.server.policy
        if policy.origins:  # CORS, for the origins http.origins names only
            origin, host = request.headers.get("origin"), request.headers.get("host")
            cross = policy.cross_origin(origin, host)
            send = _cors(send, origin, cross)
            preflight = request.method == "OPTIONS" and "access-control-request-method" in request.headers
            if preflight and cross and policy.host_allowed(host):
                # (a browser's preflight carries no token: it is told what it may send, and the request itself
                # then needs the token where every request does)
                await Response(status_code=204, headers=PREFLIGHT)(scope, receive, send)
                return
        refusal = self.refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        # (a forge's delivery may be larger than the API's bodies: its route refuses one past its own limit, and
        # counts it)
        hook = request.url.path.startswith(HOOKS)
        limit = HOOK_MAX_BODY if hook else MAX_BODY
        declared = request.headers.get("content-length", "0")
        if not hook and (not declared.isdigit() or int(declared) > MAX_BODY):
            await self.server.problem(413, "too_large", f"request bodies are {MAX_BODY} bytes at most")(
                scope, receive, send
            )
            return
        received = 0

        async def bounded() -> Message:
            # A body sent without a length (chunked) is counted as it comes, and cut off at the limit.
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    return {"type": "http.disconnect"}
            return message

        await self.app(scope, bounded, send)

    def refusal(self, request: Request) -> Response | None:
        policy, server = self.server.policy, self.server
        host = request.headers.get("host")
        origin = request.headers.get("origin")
        path = request.url.path
        if not policy.host_allowed(host):
            return server.problem(421, "bad_host", "this server does not answer to that Host", _HOST_FIX)
        if not policy.origin_allowed(origin, host):
            return server.problem(403, "bad_origin", "requests from that origin are refused", _ORIGIN_FIX)
        presented = bearer(request.headers.get("authorization"))
        cross = policy.cross_origin(origin, host)
        # Another origin's page presents the token itself: the cookie a browser may send along is never taken.
        cookie = None if cross else request.cookies.get(COOKIE)
        mcp = path == "/mcp" or path.startswith("/mcp/")
        # (the page's first visit brings its token in the query; a client reads how to authenticate before it can)
        open_to_all = (path == "/" and "token" in request.query_params) or path.startswith(RESOURCE_METADATA)
        # (a forge cannot send the token: a delivery's signature is checked instead, by its route)
        open_to_all = open_to_all or path.startswith(HOOKS)
        if mcp:
            if not policy.token_ok(presented):
                return self.unauthorized(request, presented, "/mcp needs the server's token")
        elif policy.token_required and not open_to_all and not (policy.token_ok(presented) or policy.token_ok(cookie)):
            return self.unauthorized(request, presented, "this server needs its token")
        acting = request.method == "POST" and path.startswith("/api/v1/") and path != "/api/v1/refresh"
        if acting:  # who may act: docs/dashboard.md#who-may-act
            if not (policy.token_ok(presented) or policy.token_ok(cookie)):
                return self.unauthorized(request, presented, "actions need the server's token")
            if not cross and not policy.same_origin(origin, host, request.headers.get("sec-fetch-site")):
                return server.problem(403, "bad_origin", "actions come from this server's own page only", _ACT_FIX)
            fetch_site = request.headers.get("sec-fetch-site")
            if origin is None and fetch_site != "same-origin" and not policy.token_ok(presented):
                # The server's own page says where it comes from: its Origin, or (a browser that leaves a
                # same-origin Origin out) Sec-Fetch-Site. A request that says neither is a script's, which holds the
                # token itself: the cookie a browser adds by itself acts for the server's own page only.
                return server.problem(
                    403,
                    "bad_origin",
                    "an action from no page (no Origin) takes the token in Authorization; the cookie is the page's",
                    _ACT_FIX,
                )
        if request.method not in ("GET", "HEAD", "POST", "DELETE", "OPTIONS"):
            return server.problem(405, "method", "method not allowed")
        return None

    def unauthorized(self, request: Request, presented: str | None, message: str) -> Response:
        """A 401 saying how to authenticate (RFC 6750's ``WWW-Authenticate``, with the resource's metadata)."""
        answer = self.server.problem(401, "unauthorized", message, _TOKEN_FIX)
        answer.headers["WWW-Authenticate"] = challenge(str(request.base_url), request.url.path, presented)
        return answer


#: What a preflight of an origin ``http.origins`` names is told it may send (no credentials: the token goes in
#: ``Authorization``, never in a cookie).
PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, HEAD, POST",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, Last-Event-ID",
    "Access-Control-Max-Age": "600",
}


_CORS_OWN = (b"access-control-allow-origin", b"access-control-allow-credentials")


def _cors(send: Send, origin: str | None, allowed: bool) -> Send:
    """``send``, with ``Vary: Origin`` on every response (what it says depends on the origin) and, for an origin
    ``http.origins`` names, ``Access-Control-Allow-Origin`` for it (never credentials)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _CORS_OWN]
            headers.append((b"vary", b"Origin"))
            if allowed and origin is not None:
                headers.append((b"access-control-allow-origin", origin.encode("latin-1")))
                # (a page of that origin, an MCP client in a browser, reads how to authenticate from a 401)
                headers.append((b"access-control-expose-headers", b"WWW-Authenticate"))
            message = {**message, "headers": headers}
        await send(message)

    return sending


_HOST_FIX = "Open the address `beflow watch --http` printed, or name this host in http.hosts."
_ORIGIN_FIX = "Call the API from this server's own page, or name the origin in http.origins."
_ACT_FIX = (
    "Act from this server's own page, or send `Authorization: Bearer <token>` and no Origin (a script), "
    "or from an origin http.origins names with the token as a bearer token."
)
_TOKEN_FIX = "Send `Authorization: Bearer <token>` ($BEFLOW_HTTP_TOKEN, or the token beflow printed when it made it)."
