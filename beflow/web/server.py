"""beflow's HTTP server: the live page, the JSON API under ``/api/v1/`` and MCP at ``/mcp`` (docs/dashboard.md).

A presenter, not a core: what it shows comes from the watch's event stream (:class:`beflow.web.live.Hub`), the
dispatcher's snapshot (:class:`beflow.web.live.WatchSource`) and the operations registry (issues, runs,
transcripts); what it does (``http.actions``) goes through the registry too. Everything it sends is masked as run
records are (:class:`beflow.mcp.redact.Redactor`, with every secret beflow holds for the project).

Reading records, issues and transcripts runs in worker threads of the server's own loop, which runs in a thread
of its own (:mod:`beflow.web.serving`): no request ever runs on the watch's loop, which is only asked for its
snapshot (a copy of a few lists).

:class:`Server` holds what the server's parts share and how they answer; :mod:`beflow.web.asgi` puts the parts
together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from pydantic import BaseModel
from starlette.responses import HTMLResponse, Response

from beflow import __version__
from beflow.app import open_tracker
from beflow.config import Project
from beflow.errors import BeflowError, NotFoundError, UsageError
from beflow.mcpserver.results import for_remote
from beflow.ops.operations import Context
from beflow.web import api, filters
from beflow.web.guard import Policy
from beflow.web.highlight import highlight
from beflow.web.live import Hub, Said, WatchSource
from beflow.web.webhooks import Replays, Tally

if TYPE_CHECKING:
    from beflow.mcp.redact import Redactor
    from beflow.records.store import RunStore
    from beflow.trackers import Tracker

#: The page may run its own script and style only, and be framed by nobody.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Server:
    """What one HTTP server presents: a project, and a running watch if there is one. Its parts share what it
    holds — the registry, who acts, the masking — and answer through it (:meth:`json`, :meth:`html`,
    :meth:`problem`, :meth:`answer`)."""

    def __init__(
        self,
        project: Project,
        policy: Policy,
        hub: Hub | None = None,
        source: WatchSource | None = None,
        actor: str | None = None,
        mcp: bool = True,
    ) -> None:
        from beflow.mcpserver.schema import load_all

        self.project = project
        self.policy = policy
        self.hub = hub or Hub()
        self.source = source
        self.registry = load_all()
        #: Who acts (a status a person sets from the page is theirs): given, or git's user.name, asked when an action
        #: first needs it (a git process the watch's start need not wait for).
        self.context = Context(project=project, actor=actor or "user", opens_tracker=open_tracker)
        self._actor_known = actor is not None
        self._masking: tuple[Project, Redactor] | None = None
        assert self.redact is not None  # (the secrets read now, not at the first request)
        self.templates = filters.environment()
        self.templates.globals["highlight"] = highlight  # (the review's diff: it builds on the filters' plain text)
        #: The forges' webhooks (``/hooks/*``, :mod:`beflow.web.hooks`): the deliveries seen, what came of them.
        self.hook_replays = Replays()
        self.hook_tally = Tally()
        self.said = Said()  # (each event's text, serialized once for every stream that sends it)
        #: Actions taken so far (a state read before one is not given again after it).
        self.acted = 0
        #: The latest JSON answer's model, the masking it was said with, and its text.
        self._said_last: tuple[BaseModel, Redactor, str] | None = None
        self.mcp = None
        if mcp:
            from beflow.web.mcp_http import RemoteMcp

            self.mcp = RemoteMcp(project, self.hub, policy)

    @property
    def redact(self) -> Redactor:
        """What masks everything the server sends: every secret beflow holds for the project (the tracker's and
        code host's tokens) and the values of the MCP servers its runs inject — read again when the watch's config
        reloads (a secret the new config adds is masked from then on)."""
        project, tracker = self.watched()
        masking = self._masking
        if masking is None or masking[0] is not project:
            masking = self._masking = (project, _redactor(project, tracker))
        return masking[1]

    def watched(self) -> tuple[Project, Tracker]:
        """The project as the watch has it now (its config reloaded), or as the server was started with."""
        if self.source is not None:
            return self.source.dispatcher.project, self.source.dispatcher.tracker
        from beflow.ops.issues import tracker

        return self.project, tracker(self.context)

    def stop(self) -> None:
        """On the server's loop, when it is asked to stop: its event streams and MCP sessions end now."""
        self.hub.stop()
        if self.mcp is not None:
            self.mcp.stop()

    # -- reading, through the registry -------------------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The registry's operation ``name`` (as ``beflow`` and MCP call it), acted by this server's actor."""
        operation = self.registry[name]
        if operation.needs_actor and not self._actor_known:
            from beflow.repository.authors import user_name

            self.context.actor, self._actor_known = user_name(self.project.directory), True
        return operation.call(self.context, arguments)

    def store(self) -> RunStore:
        """The project's run records (as the registry's operations open them)."""
        from beflow.ops.runs import store

        return store(self.context)

    # -- answers -----------------------------------------------------------------------------------------------------

    def json(self, model: BaseModel, status: int = 200) -> Response:
        redact, kept = self.redact, self._said_last
        if kept is not None and kept[0] is model and kept[1] is redact:
            body = kept[2]  # (the state reading pages share: serialized and masked once for all of them)
        else:
            body = redact.text(model.model_dump_json())
            self._said_last = (model, redact, body)
        return Response(body, status_code=status, media_type="application/json")

    def problem(self, status: int, code: str, message: str, fix: str | None = None) -> Response:
        """An API error, in the words MCP over HTTP uses: no path of the server's disk (:func:`for_remote`)."""
        here = self.project.directory
        message, fix = for_remote(message, here), (for_remote(fix, here) if fix is not None else None)
        return self.json(api.Problem(error=api.ProblemDetail(code=code, message=message, fix=fix)), status)

    def html(self, template: str, **values: Any) -> HTMLResponse:
        page = self.templates.get_template(template).render(
            version=__version__, policy=self.policy, mask=self.redact.text, **values
        )
        return HTMLResponse(self.redact.text(page), headers=PAGE_HEADERS)

    async def off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread: reading files and asking the tracker never holds the loop."""
        return await anyio.to_thread.run_sync(fn, *args)

    async def answer(self, fn: Callable[[], Awaitable[Response]]) -> Response:
        """``fn``'s answer, or the problem its error is (404, 400, 409 or 500, with the error's fix)."""
        try:
            return await fn()
        except NotFoundError as error:
            return self.problem(404, error.code, error.message, error.fix)
        except UsageError as error:
            return self.problem(400, error.code, error.message, error.fix)
        except BeflowError as error:
            return self.problem(409 if error.code == "conflict" else 500, error.code, error.message, error.fix)


def _redactor(project: Project, tracker: Tracker) -> Redactor:
    from beflow.agent.agent_env import run_secrets
    from beflow.mcp.acp import resolve_servers
    from beflow.mcp.redact import Redactor

    servers = []
    with contextlib.suppress(BeflowError):  # (a cascade with a problem injects nothing: the watch says why)
        servers = resolve_servers(project) or []
    return Redactor(servers, secrets=run_secrets(project, tracker))
