"""``beflow serve`` (the dashboard, the API and MCP over HTTP for a project with no watch running) and the part of
``beflow watch --http`` that starts the same server beside the watch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from beflow.cli.common import App, err, escape, pass_app
from beflow.errors import Interrupted
from beflow.paths import TOKEN_ENV

if TYPE_CHECKING:
    from beflow.watch.dispatcher import Dispatcher
    from beflow.web.live import Hub, WatchSource
    from beflow.web.serving import Serving


def announce(serving: Serving) -> None:
    """Where the server listens, on stderr; the token once, when beflow has just made it."""
    token = serving.token
    url = escape(serving.url)
    err.print(f"beflow: serving {url}/ (API {url}/api/v1/, MCP {url}/mcp)")
    if serving.webhooks:
        err.print(f"beflow: webhooks at {', '.join(f'{url}/hooks/{forge}' for forge in serving.webhooks)}")
    if token.created:
        err.print(
            f"beflow: a token was made for this server and stored in {escape(str(token.path))} (said once): "
            f"{escape(token.value)}"
        )
    if serving.policy.token_required:
        # Where the token is, never the token itself (a terminal's output is kept, shared and pasted).
        where = f"${TOKEN_ENV}" if token.path is None else escape(str(token.path))
        err.print(
            f"beflow: not loopback: every request needs the token, which is in {where}; open {url}/?token=<token>"
        )


@contextlib.contextmanager
def stopped_as_a_service() -> Iterator[None]:
    """A server stopped by SIGTERM or SIGINT — how systemd, docker and Ctrl-C stop a service — says "stopped" (one
    line) and exits as a signal does (130, after cleanup), not "error: interrupted by SIGTERM": it was asked to
    stop, and did. Any other signal (SIGHUP: the terminal went away) stays the error it is."""
    try:
        yield
    except Interrupted as stop:
        if stop.signal_name not in ("SIGTERM", "SIGINT"):
            raise
        with contextlib.suppress(OSError):
            err.print("beflow: stopped")
        raise SystemExit(stop.exit_code) from None


@contextlib.contextmanager
def beside_watch(app: App, where: str, dispatcher: Dispatcher, hub: Hub) -> Iterator[WatchSource]:
    """``beflow watch --http``: the server runs in its own thread while the watch runs."""
    from beflow.web.guard import parse_bind
    from beflow.web.live import WatchSource
    from beflow.web.serving import beside

    source = WatchSource(dispatcher, hub)
    with beside(dispatcher.project, parse_bind(where), hub, source, actor=app.actor) as serving:
        announce(serving)
        try:
            yield source
        finally:
            if serving.failure is not None:
                why = f"{type(serving.failure).__name__}: {serving.failure}"
                err.print(f"beflow: warning: the HTTP server stopped: {escape(why)}")


@click.command(
    "serve",
    short_help="Serve the dashboard, the HTTP API and MCP over HTTP (no watch).",
    epilog="Examples:\n\n  beflow serve 8765\n\n  BEFLOW_HTTP_TOKEN=$(openssl rand -hex 24) beflow serve 0.0.0.0:8765",
)
@click.argument("where", metavar="[HOST:]PORT")
@pass_app
def command(app: App, where: str) -> None:
    """Serve the project's issues, runs and records over HTTP — the page, /api/v1/ and /mcp — with nothing live
    (`beflow watch --http` serves the same beside a running watch). Host 127.0.0.1 unless given; any other needs
    the token. Ctrl-C stops."""
    from beflow.system import hardening
    from beflow.web.guard import parse_bind
    from beflow.web.serving import serve_forever

    hardening.keep_private()
    project = app.project()
    with stopped_as_a_service():
        serve_forever(project, parse_bind(where), app.actor, announce)
