"""Running the HTTP server (:mod:`beflow.web.server`) beside a watch, or alone (``beflow serve``).

Beside a watch it runs in a thread of its own, with an event loop of its own: a request, a slow client or a
stalled socket can never hold up the watch's loop, which only ever hands events over (:meth:`Hub.publish`).
The socket is bound before the thread starts, so that a port in use is an error at once, and port 0 gets its real
port for the address printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from beflow.config import Project
from beflow.errors import Interrupted, UsageError
from beflow.web.guard import Bind, Policy, Token, load_token
from beflow.web.live import Hub, WatchSource

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp

    from beflow.web.server import Server

#: Seconds the end of a watch waits for the server to stop.
STOP_WAIT = 5.0


@dataclass
class Serving:
    bind: Bind
    token: Token
    policy: Policy
    #: The forges whose webhooks it acts on: a secret named for them, and the project's tracker or code host.
    webhooks: tuple[str, ...] = ()
    #: Why the server stopped serving, when it failed (the watch goes on without it).
    failure: BaseException | None = None

    @property
    def url(self) -> str:
        return self.bind.url


def listen(bind: Bind) -> tuple[socket.socket, Bind]:
    """A listening socket on ``bind``, and the bind with its real port."""
    family = socket.AF_INET6 if ":" in bind.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind.host, bind.port))
    except OSError as error:
        sock.close()
        raise UsageError(
            f"cannot listen on {bind.host}:{bind.port}: {error.strerror or error}",
            fix="Pick another port (or 0 for any free one), or stop what listens there.",
        ) from None
    sock.listen(128)
    sock.setblocking(False)
    return sock, replace(bind, port=sock.getsockname()[1])


def webhooks_of(project: Project) -> tuple[str, ...]:
    """The forges whose webhooks the server acts on (the secrets' variables are checked at each delivery)."""
    config = project.config
    return tuple(forge for forge in config.webhooks.secret_env.named() if forge in config.webhook_forges())


def policy_for(project: Project, bind: Bind, token: Token) -> Policy:
    http = project.config.http
    hosts, origins = list(http.hosts), list(http.origins)
    return Policy(bind=bind, token=token.value, actions=http.actions, hosts=hosts, origins=origins)


def _config(app: ASGIApp) -> uvicorn.Config:
    import uvicorn

    # Bounded: connections at once, and the size of a request's head.
    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        server_header=False,
        timeout_graceful_shutdown=1,
        limit_concurrency=200,
        h11_max_incomplete_event_size=64 * 1024,
    )


@contextlib.contextmanager
def beside(
    project: Project, bind: Bind, hub: Hub, source: WatchSource | None, actor: str | None = None
) -> Iterator[Serving]:
    """The HTTP server in its own thread while the block runs. The socket is bound here (a port in use fails at
    once); the server is built in its thread (its imports take a second of CPU the watch need not wait for)."""
    token = load_token()
    sock, bound = listen(bind)
    policy = policy_for(project, bound, token)
    serving = Serving(bound, token, policy, webhooks_of(project))
    running: list[uvicorn.Server] = []
    stopping = threading.Event()

    def run() -> None:

        from beflow.web.asgi import build_app
        from beflow.web.server import Server

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            server = Server(project, policy, hub, source, actor=actor)
            http = _stopping_streams(server)(_config(build_app(server)))
            running.append(http)
            if not stopping.is_set():
                loop.run_until_complete(http.serve(sockets=[sock]))
        except BaseException as error:  # the watch goes on without its server; the caller says so at the end
            serving.failure = error
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="beflow-http", daemon=True)
    thread.start()
    try:
        yield serving
    finally:
        stopping.set()
        for http in running:
            http.should_exit = True
        thread.join(STOP_WAIT)
        if running:
            running[0].should_exit = True  # (made while joining)
        sock.close()


def serve_forever(project: Project, bind: Bind, actor: str | None, on_ready: Callable[[Serving], None]) -> None:
    """``beflow serve``: the server in this thread until SIGINT/SIGTERM (then :class:`Interrupted`)."""
    from beflow.web.asgi import build_app
    from beflow.web.server import Server

    token = load_token()
    sock, bound = listen(bind)
    policy = policy_for(project, bound, token)
    server = Server(project, policy, Hub(), None, actor=actor)
    on_ready(Serving(bound, token, policy, webhooks_of(project)))
    http = _stoppable(server)(_config(build_app(server)))
    http.run(sockets=[sock])
    stopped_by: int | None = getattr(http, "stopped_by", None)
    if stopped_by is not None:
        raise Interrupted(signal.Signals(stopped_by).name)  # after a graceful stop: exit 130, as a watch


def _stopping_streams(server: Server) -> type[uvicorn.Server]:
    """uvicorn's server, which ends the event streams as soon as it is asked to stop. uvicorn waits for the
    responses in flight (``timeout_graceful_shutdown``), then cancels them and logs each as an exception: an event
    stream never ends by itself, so a page left open would make every stop slow and loud."""
    import uvicorn

    class EndsStreams(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            server.stop()  # (on this server's loop, as its streams are)
            await super().shutdown(sockets)

    return EndsStreams


def _stoppable(server: Server) -> type[uvicorn.Server]:
    """uvicorn's server (ending its streams when it stops), stopped gracefully by SIGINT or SIGTERM, which it then
    reports (``stopped_by``) instead of raising the signal again: beflow exits 130 after cleanup, as every command
    does."""

    class Stoppable(_stopping_streams(server)):  # type: ignore[misc]
        stopped_by: int | None = None

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            def stop(signum: int, _frame: object) -> None:
                self.stopped_by = signum
                self.should_exit = True

            before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

    return Stoppable
