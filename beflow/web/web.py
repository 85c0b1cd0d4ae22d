"""beflow's HTTP server: the live page, the JSON API under ``/api/v1/`` and MCP at ``/mcp`` (docs/dashboard.md).

A presenter, not a core: what it shows comes from the watch's event stream (:class:`beflow.web.live.Hub`), the
dispatcher's snapshot (:class:`beflow.web.live.WatchSource`) and the operations registry (issues, runs,
transcripts); what it does (``http.actions``) goes through the registry too. Everything it sends is masked as run
records are (:class:`beflow.mcp.redact.Redactor`, with every secret beflow holds for the project).

Reading records, issues and transcripts runs in worker threads of the server's own loop, which runs in a thread
of its own (:mod:`beflow.web.serving`): no request ever runs on the watch's loop, which is only asked for its
snapshot (a copy of a few lists).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import anyio
import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from beflow import __version__, guardrails
from beflow.agent import acpx
from beflow.config import Project
from beflow.errors import BeflowError, NotFoundError, UsageError
from beflow.ops.operations import Context
from beflow.system import files
from beflow.trackers.base import MetersRequests, Status
from beflow.web import api, lists
from beflow.web.guard import COOKIE, Policy, bearer
from beflow.web.live import Dropped, Hub, Stopping, Subscriber, WatchData, WatchSource

if TYPE_CHECKING:
    from beflow.mcp.redact import Redactor
    from beflow.trackers import Tracker

HERE = Path(__file__).parent
#: Bytes of a request body, at most (the API's bodies are a status and a note).
MAX_BODY = 64 * 1024
#: Bytes of the end of a transcript a lane's tail is read from: these first, then at most TAIL_BYTES.
TAIL_FIRST = 8 * 1024
TAIL_BYTES = 64 * 1024
#: Lanes' tails kept between reads (one a lane; a few more while lanes change).
TAILS_KEPT = 64
TAIL_LINES = 8
#: Characters of one text shown, at most: a huge line is cut, with a note.
MAX_TEXT = 4000
#: Seconds a write to an SSE client may take before the client is dropped.
SEND_TIMEOUT = 5.0
#: Seconds the recent runs are kept between state reads when no run finished here meanwhile.
RECENT_FOR = 2.0
#: Seconds between keep-alive comments on a quiet event stream.
PING = 15.0
#: Events an SSE client may fall behind the newest before it is dropped.
BEHIND = 1000
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as plain text for a page: terminal escape sequences and control characters removed, a huge text
    cut (escaping for HTML is the templates' and the browser's ``textContent``)."""
    value = _CONTROL.sub("", _ANSI.sub("", str(text)))
    if len(value) > limit:
        value = value[:limit] + f"… [{len(value) - limit} more characters]"
    return value


class Server:
    """What one HTTP server presents: a project, and a running watch if there is one."""

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
        self.context = Context(project=project, actor=actor or "user")
        self._actor_known = actor is not None
        #: Titles of issues whose lane has no record yet (asked of the tracker once).
        self._titles: dict[str, str] = {}
        self._recent: tuple[int, float, list[api.RecentRun]] | None = None
        self._tails: dict[str, tuple[tuple[int, int], list[api.TranscriptLine]]] = {}
        self._masking: tuple[Project, Redactor] | None = None
        assert self.redact is not None  # (the secrets read now, not at the first request)
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.templates.filters["plain"] = plain
        self.templates.filters["when"] = lambda t: time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"
        self.templates.filters["seconds"] = _seconds
        self.templates.filters["usage"] = usage_text
        self.templates.filters["totals"] = totals_text
        self.templates.filters["query"] = lambda values: urlencode({k: v for k, v in values.items() if v})
        self.mcp = None
        if mcp:
            from beflow.web.mcp_http import RemoteMcp

            self.mcp = RemoteMcp(project, self.hub, policy)

    @property
    def redact(self) -> Redactor:
        """What masks everything the server sends: every secret beflow holds for the project (the tracker's and
        code host's tokens) and the values of the MCP servers its runs inject — read again when the watch's config
        reloads (a secret the new config adds is masked from then on)."""
        project, tracker = self._watched()
        masking = self._masking
        if masking is None or masking[0] is not project:
            masking = self._masking = (project, _redactor(project, tracker))
        return masking[1]

    def _watched(self) -> tuple[Project, Tracker]:
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
        operation = self.registry[name]
        if operation.needs_actor and not self._actor_known:
            from beflow.repository.authors import user_name

            self.context.actor, self._actor_known = user_name(self.project.directory), True
        return operation.call(self.context, arguments)

    def state(self) -> api.State:
        """The live state (a watch's), or what the records and the tracker say (``beflow serve``)."""
        data = self.source.data() if self.source is not None else None
        now = time.time()
        store = self._store()
        lanes: list[api.Lane] = []
        queue: list[api.Queued]
        backoffs: list[api.Backoff] = []
        held: list[api.HeldIssue] = []
        if data is not None:
            for lane in data.lanes:
                title, progress = self._titles.get(lane.key, ""), [lane.progress] if lane.progress else []
                if lane.run_id is None and not title:  # (dispatched, its record not written yet)
                    with contextlib.suppress(BeflowError, OSError):
                        title = self._titles[lane.key] = self.call("issue.show", {"key": lane.key}).title
                if lane.run_id is not None:
                    with contextlib.suppress(BeflowError, OSError, ValueError):
                        record = store.get(lane.run_id)
                        title = record.title
                        progress = [note.text for note in store.progress(lane.run_id)][-10:] or progress
                lanes.append(
                    api.Lane(
                        issue=lane.key,
                        title=title,
                        run=lane.run_id,
                        attempt=lane.attempt,
                        round=lane.round,
                        started=lane.started,
                        elapsed=max(0.0, now - lane.started),
                        latest=lane.latest,
                        progress=progress,
                        tail=self.tail(lane.run_id) if lane.run_id else [],
                        cancelling=lane.cancelling,
                        reason=lane.reason,
                        usage=api.Usage.of(lane.usage),
                    )
                )
            hold = _queue_hold(data)
            queue = [api.Queued(issue=k, title=t, priority=p, held=hold) for k, t, p in data.queue]
            queued = len(queue)
            held = self._held(data, {q.issue for q in queue} | {lane.key for lane in data.lanes})
            backoffs = [api.Backoff(issue=k, attempt=a, due=d, reason=r) for k, a, d, r in data.backoffs]
        else:
            try:
                ready = self.call("issue.list", {"status": "ready"}).issues
            except BeflowError:
                ready = []
            ready.sort(key=lambda i: (-i.priority, i.created))
            queue = [api.Queued(issue=i.key, title=i.title, priority=i.priority) for i in ready]
            queued = len(queue)
        recent = self.recent()
        return api.State(
            project=str(self.project.directory),
            lanes=lanes,
            queue=queue[: api.MAX_QUEUE],  # the state is read on every event: 10k ready issues must not go each time
            backoffs=backoffs,
            held=held,
            recent=recent,
            totals=api.Totals(
                running=len(lanes),
                queued=queued,
                backing_off=len(backoffs),
                concurrency=data.concurrency if data else self.project.config.watch.concurrency,
                ticks=data.tick if data else 0,
                next_tick=data.next_tick if data else None,
                used=_used(data),
                budget=_budget(data),
            ),
            health=self._health(data),
            actions=self.policy.actions,
            time=now,
        )

    def recent(self) -> list[api.RecentRun]:
        """The last 20 finished runs. Kept between reads — the live page reads the state after every event, and
        reading the records was most of a read's work — until a run finishes here (a ``finished`` event), and
        for :data:`RECENT_FOR` seconds at most (a run another process finished)."""
        key, now = self.hub.finished, time.monotonic()
        kept = self._recent
        if kept is not None and kept[0] == key and now - kept[1] < RECENT_FOR:
            return kept[2]
        runs = [api.RecentRun.of(r) for r in self.call("run.list", {"limit": 30}).runs if r.finished][:20]
        self._recent = (key, now, runs)
        return runs

    def _held(self, data: WatchData, shown: set[str]) -> list[api.HeldIssue]:
        """The issues the watch skips: unreadable ones (the tracker's last listing), then those whose last start
        was skipped (its ``skipped`` events; an issue queued or running here again is not held)."""
        held = [
            api.HeldIssue(issue=key, held=api.Hold(check="unreadable", message=why, fix=_UNREADABLE_FIX))
            for key, why in sorted(data.unreadable.items())
        ]
        self.hub.forget(set(data.unreadable))
        for key, (why, since) in sorted(self.hub.skips().items(), key=lambda item: -item[1][1]):
            if key not in shown:
                held.append(api.HeldIssue(issue=key, held=api.Hold(check="skipped", message=why, since=since)))
        return held

    def _health(self, data: WatchData | None) -> api.Health:
        reachable: bool | None = None
        rate: api.RateLimit | None = None
        if data is not None:
            reachable = data.tracker_reachable  # (the watch's own look: another error is not the tracker's)
            if isinstance(data.tracker, MetersRequests):
                budget = data.tracker.rate_budget()
                rate = api.RateLimit(remaining=budget.remaining, reset=budget.reset, limited=budget.limited)
        return api.Health(
            live=data is not None,
            tracker=self._watched()[0].config.tracker.kind,
            tracker_reachable=reachable,
            blocked=data.blocked if data else None,
            blocked_fix=data.blocked_fix if data else None,
            config_reloaded=self.hub.config_reloaded,
            errors=list(self.hub.errors),
            rate_limit=rate,
        )

    def _store(self) -> Any:
        from beflow.ops.runs import store

        return store(self.context)

    def tail(self, run_id: str) -> list[api.TranscriptLine]:
        """The last readable lines of a run's transcript, read from its end only: its last few KiB first (its
        last lines are short messages and tool calls, most of the time), more only when they do not hold enough
        lines. A transcript that did not change since the last read is not read again (the live page reads the
        state after every event, each lane's tail with it)."""
        runs = self._store()
        path = runs.file(run_id, "transcript.jsonl")
        try:  # (through no symlink, never a FIFO: an agent without the sandbox can write the record)
            with os.fdopen(files.open_regular(path, below=runs.project_dir), "rb") as file:
                stat = os.fstat(file.fileno())
                stamp = (stat.st_size, stat.st_mtime_ns)
                kept = self._tails.get(run_id)
                if kept is not None and kept[0] == stamp:
                    return kept[1]
                for size in (TAIL_FIRST, TAIL_BYTES):
                    file.seek(max(0, stat.st_size - size))
                    lines = file.read(size).decode("utf-8", errors="replace").splitlines()
                    if stat.st_size > size:
                        lines = lines[1:]  # the first is cut
                    shown = acpx.readable(lines)[-TAIL_LINES:]
                    if len(shown) >= TAIL_LINES or stat.st_size <= size:
                        break
        except OSError:
            return []
        tail = [api.TranscriptLine(kind=line.kind, text=line.text) for line in shown]
        if len(self._tails) >= TAILS_KEPT:
            self._tails.pop(next(iter(self._tails)))
        self._tails[run_id] = (stamp, tail)
        return tail

    def transcript(self, run_id: str, offset: int, limit: int) -> api.TranscriptPage:
        """A page of the readable transcript, file edits included as unified diffs (``diff`` lines)."""
        from beflow.records.record import TRANSCRIPT_LIMIT
        from beflow.web import diffs

        record = self.call("run.show", {"id": run_id})
        raw = self._store().log_text(record.id, "transcript.jsonl", TRANSCRIPT_LIMIT).splitlines()
        lines = [api.TranscriptLine(kind=line.kind, text=line.text) for line in acpx.readable(raw, diffs.reader())]
        page = lines[offset : offset + limit]
        end = offset + len(page)
        return api.TranscriptPage(
            run=record.id, offset=offset, total=len(lines), lines=page, next=end if end < len(lines) else None
        )

    def issues(self, status: str | None, page: int, per_page: int) -> api.IssuePage:
        return lists.issues(self.call, status, page, per_page)

    def runs(self, issue: str | None, page: int, per_page: int) -> api.RunPage:
        return lists.runs(self.call, issue, page, per_page)

    def issue(self, key: str) -> api.IssueDetail:
        issue = self.call("issue.show", {"key": key})
        runs = [api.RecentRun.of(r) for r in self.call("run.list", {"issue": issue.key, "limit": 20}).runs]
        return api.IssueDetail(issue=issue, runs=runs)

    # -- answers -----------------------------------------------------------------------------------------------------

    def json(self, model: BaseModel, status: int = 200) -> Response:
        body = self.redact.text(model.model_dump_json())
        return Response(body, status_code=status, media_type="application/json")

    def problem(self, status: int, code: str, message: str, fix: str | None = None) -> Response:
        return self.json(api.Problem(error=api.ProblemDetail(code=code, message=message, fix=fix)), status)

    def html(self, template: str, **values: Any) -> HTMLResponse:
        page = self.templates.get_template(template).render(version=__version__, policy=self.policy, **values)
        return HTMLResponse(self.redact.text(page), headers=PAGE_HEADERS)

    async def off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    async def answer(self, fn: Callable[[], Awaitable[Response]]) -> Response:
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


class Conflict(BeflowError):
    """What an action asks cannot be done now (409)."""

    code = "conflict"


#: The page may run its own script and style only, and be framed by nobody.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


_UNREADABLE_FIX = "Fix the issue as the message says (its labels, its text); the watch reads it again at its next look."


def _queue_hold(data: WatchData) -> api.Hold | None:
    """What holds every ready issue back, if anything: a check every run would fail, or the day's budget."""
    if data.blocked is not None:
        return api.Hold(check="config", message=data.blocked, fix=data.blocked_fix)
    if data.budget_held and data.budget is not None:
        return api.Hold(
            check="budget",
            message=data.budget.describe(),
            fix="Raise limits.cost_per_day in the config, or wait for tomorrow.",
        )
    return None


def _used(data: WatchData | None) -> api.UsageTotals | None:
    if data is None or data.used is None:
        return None
    used = data.used
    return api.UsageTotals(runs=used.runs, reported=used.reported, tokens=used.tokens, cost=dict(used.cost))


def _budget(data: WatchData | None) -> api.DayBudget | None:
    if data is None or data.budget is None:
        return None
    budget = data.budget
    return api.DayBudget(
        day=budget.day.isoformat(),
        spent=round(budget.spent, 6),
        limit=budget.limit,
        currency=budget.currency,
        held=data.budget_held,
        message=budget.describe() if data.budget_held else None,
    )


def usage_text(usage: api.Usage | None) -> str:
    """``context 2,500/100,000 · 3,400 tokens · 0.40 USD``: what the agent reported, and nothing else."""
    if usage is None:
        return ""
    parts = []
    if usage.context_used is not None:
        window = f"/{usage.context_size:,}" if usage.context_size else ""
        parts.append(f"context {usage.context_used:,}{window}")
    if usage.tokens is not None:
        parts.append(f"{usage.tokens:,} tokens")
    if usage.cost is not None:
        parts.append(f"{usage.cost:.2f} {usage.currency or ''}".strip())
    return " · ".join(parts)


def totals_text(used: api.UsageTotals | None) -> str:
    """``12,345 tokens, 0.42 USD over 3 runs`` (as ``beflow runs`` says it)."""
    if used is None:
        return ""
    return guardrails.Totals(used.runs, used.reported, used.tokens, dict(used.cost)).describe()


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    value = max(0.0, float(value))
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.0f}m"
    return f"{value / 3600:.1f}h"


# -- the application ---------------------------------------------------------------------------------------------------


def build_app(server: Server) -> ASGIApp:
    """The ASGI application: routes behind the guard (Host, Origin, token, body size)."""

    async def index(request: Request) -> Response:
        token = request.query_params.get("token")
        if token is not None:  # the link `beflow watch --http` prints: keep the token as a cookie, drop it from the URL
            if not server.policy.token_ok(token):
                return server.problem(401, "unauthorized", "that token is not this server's")
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
            return response

        async def page() -> Response:
            state = await server.off_loop(server.state)
            return server.html("index.html", state=state, now=time.time())

        return await server.answer(page)

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["id"]
        offset = _int(request.query_params.get("offset"), 0)

        async def page() -> Response:
            record = await server.off_loop(server.call, "run.show", {"id": run_id})
            transcript = await server.off_loop(server.transcript, record.id, offset, api.MAX_PAGE)
            fields = record.model_dump(mode="json", exclude={"progress", "final_message", "usage"})
            used = guardrails.describe(record.usage)  # what the agent reported, as `beflow runs show` says it
            return server.html("run.html", record=record, fields=fields, used=used, transcript=transcript)

        return await server.answer(page)

    async def issue_page(request: Request) -> Response:
        async def page() -> Response:
            detail = await server.off_loop(server.issue, request.path_params["key"])
            return server.html("issue.html", detail=detail)

        return await server.answer(page)

    def listed(request: Request) -> tuple[int, int]:
        """The page asked for (from 1) and its size (at most api.MAX_PER_PAGE)."""
        page = max(1, _int(request.query_params.get("page"), 1))
        per_page = min(api.MAX_PER_PAGE, max(1, _int(request.query_params.get("per_page"), api.PER_PAGE)))
        return page, per_page

    async def issues_page(request: Request) -> Response:
        status = request.query_params.get("status") or None

        async def page() -> Response:
            listed_page = await server.off_loop(server.issues, status, *listed(request))
            return server.html("issues.html", listing=listed_page, statuses=[s.value for s in Status])

        return await server.answer(page)

    async def runs_page(request: Request) -> Response:
        issue = request.query_params.get("issue") or None

        async def page() -> Response:
            return server.html("runs.html", listing=await server.off_loop(server.runs, issue, *listed(request)))

        return await server.answer(page)

    async def get_issues(request: Request) -> Response:
        status = request.query_params.get("status") or None
        return await server.answer(lambda: _json(server, server.issues, status, *listed(request)))

    async def get_runs(request: Request) -> Response:
        issue = request.query_params.get("issue") or None
        return await server.answer(lambda: _json(server, server.runs, issue, *listed(request)))

    async def get_state(request: Request) -> Response:
        return await server.answer(lambda: _json(server, server.state))

    async def get_issue(request: Request) -> Response:
        return await server.answer(lambda: _json(server, server.issue, request.path_params["key"]))

    async def get_run(request: Request) -> Response:
        return await server.answer(lambda: _json(server, server.call, "run.show", {"id": request.path_params["id"]}))

    async def get_transcript(request: Request) -> Response:
        offset = _int(request.query_params.get("offset"), 0)
        limit = min(api.MAX_PAGE, max(1, _int(request.query_params.get("limit"), api.MAX_PAGE)))
        return await server.answer(lambda: _json(server, server.transcript, request.path_params["id"], offset, limit))

    async def refresh(request: Request) -> Response:
        if server.source is None:
            return server.json(api.Accepted(message="no watch is running: nothing to refresh"), 202)
        await server.off_loop(server.source.refresh)
        return server.json(api.Accepted(message="the watch looks at the tracker now"), 202)

    async def events(request: Request) -> Response | EventStream:
        last = _int(request.headers.get("last-event-id") or request.query_params.get("since"), -1)
        try:
            subscriber = server.hub.subscribe(None if last < 0 else last)
        except OverflowError as error:
            return server.problem(503, "too_many_clients", str(error), "Close another page or client, then retry.")
        except Stopping as error:
            return server.problem(503, "stopping", str(error))
        return EventStream(server, subscriber)

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document())

    async def action(request: Request) -> Response:
        if not server.policy.actions:
            return server.problem(
                403, "actions_off", "actions are off on this server", 'Set "http": {"actions": true} in the config.'
            )
        kind = request.path_params["action"]
        allowed = ("cancel",) if request.url.path.startswith("/api/v1/runs/") else ("retry", "status")
        if kind not in allowed:
            return server.problem(404, "not_found", f"no action {kind[:40]!r} here; there are: {', '.join(allowed)}")
        try:
            body = await request.json() if kind == "status" else {}
            change = api.SetStatusBody.model_validate(body) if kind == "status" else None
        except (ValueError, ValidationError):
            return server.problem(400, "usage", 'the body must be JSON: {"status": …, "note": …}')

        def act() -> api.ActionDone:
            target = request.path_params["target"]
            if kind == "cancel":  # a run: its issue moves back to open, and the watch cancels it
                record = server.call("run.show", {"id": target})
                if record.finished:
                    raise Conflict(
                        f"run {record.id} has ended ({record.outcome}): there is nothing to cancel",
                        fix="Cancel a running run; set the issue's status to change what happens to it next.",
                    )
                if server.call("issue.show", {"key": record.issue}).status == "in_progress":
                    # (in_progress cannot go to open: through ready, as a person would; the run holds the issue's
                    # claim, so nothing starts it meanwhile)
                    server.call("issue.set_status", {"key": record.issue, "status": "ready"})
                arguments = {"key": record.issue, "status": "open", "note": "Cancelled from beflow's dashboard."}
            elif kind == "retry":
                arguments = {"key": target, "status": "ready", "note": "Retried from beflow's dashboard."}
            else:
                assert change is not None
                arguments = {"key": target, "status": change.status, "note": change.note}
            result = server.call("issue.set_status", arguments)
            if server.source is not None:
                server.source.refresh()
            return api.ActionDone(operation="issue.set_status", result=result.model_dump(mode="json"))

        async def done() -> Response:
            return server.json(await server.off_loop(act))

        return await server.answer(done)

    routes: list[Route | Mount] = [
        Route("/", index),
        Route("/runs", runs_page),
        Route("/runs/{id}", run_page),
        Route("/issues", issues_page),
        Route("/issues/{key}", issue_page),
        Route("/api/v1/state", get_state),
        Route("/api/v1/issues", get_issues),
        Route("/api/v1/runs", get_runs),
        Route("/api/v1/issues/{key}", get_issue),
        Route("/api/v1/runs/{id}", get_run),
        Route("/api/v1/runs/{id}/transcript", get_transcript),
        Route("/api/v1/events", events),
        Route("/api/v1/refresh", refresh, methods=["POST"]),
        Route("/api/v1/openapi.json", openapi),
        Route("/api/v1/runs/{target}/{action:str}", action, methods=["POST"]),
        Route("/api/v1/issues/{target}/{action:str}", action, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        import asyncio

        server.hub.attach(asyncio.get_running_loop())
        if server.mcp is None:
            yield
            return
        async with server.mcp.running():
            yield

    if server.mcp is not None:
        endpoint = _Asgi(server.mcp.asgi)  # (an ASGI app: Starlette calls a function with a Request)
        methods = ["GET", "POST", "DELETE"]
        routes[:0] = [Route("/mcp", endpoint, methods=methods), Route("/mcp/issues/{key}", endpoint, methods=methods)]
    app = Starlette(routes=routes, lifespan=lifespan)
    return Guard(app, server)


async def _json(server: Server, fn: Callable[..., Any], *args: Any) -> Response:
    return server.json(await server.off_loop(fn, *args))


def _int(text: str | None, default: int) -> int:
    try:
        return max(0, int(text)) if text is not None else default
    except ValueError:
        return default


class EventStream:
    """``/api/v1/events``: server-sent events from the hub's ring, for one client. A write the client does not
    take within :data:`SEND_TIMEOUT`, or a client :data:`BEHIND` events behind, ends the stream (the client may
    reconnect and resume with ``Last-Event-ID``); the client going away ends it too."""

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
                    identifier = event.pop("id")
                    text = self.server.redact.text(json.dumps(event, ensure_ascii=False, default=str))
                    await write(f"id: {identifier}\ndata: {text}\n\n")

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


class _Asgi:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


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
        declared = request.headers.get("content-length", "0")
        if not declared.isdigit() or int(declared) > MAX_BODY:
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
                if received > MAX_BODY:
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
        first_visit = path == "/" and "token" in request.query_params
        if mcp:
            if not policy.token_ok(presented):
                return server.problem(401, "unauthorized", "/mcp needs the server's token", _TOKEN_FIX)
        elif policy.token_required and not first_visit and not (policy.token_ok(presented) or policy.token_ok(cookie)):
            return server.problem(401, "unauthorized", "this server needs its token", _TOKEN_FIX)
        acting = request.method == "POST" and path.startswith("/api/v1/") and path != "/api/v1/refresh"
        if acting:
            if not (policy.token_ok(presented) or policy.token_ok(cookie)):
                return server.problem(401, "unauthorized", "actions need the server's token", _TOKEN_FIX)
            if not cross and not policy.same_origin(origin, host, request.headers.get("sec-fetch-site")):
                return server.problem(403, "bad_origin", "actions come from this server's own page only")
        if request.method not in ("GET", "HEAD", "POST", "DELETE", "OPTIONS"):
            return server.problem(405, "method", "method not allowed")
        return None


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
            message = {**message, "headers": headers}
        await send(message)

    return sending


_HOST_FIX = "Open the address `beflow watch --http` printed, or name this host in http.hosts."
_ORIGIN_FIX = "Call the API from this server's own page, or name the origin in http.origins."
_TOKEN_FIX = "Send `Authorization: Bearer <token>` ($BEFLOW_HTTP_TOKEN, or the token beflow printed when it made it)."


def openapi_document() -> dict[str, Any]:
    """``/api/v1/openapi.json``: the paths and, from the response models, their schemas."""
    from pydantic.json_schema import models_json_schema

    models: list[type[BaseModel]] = [
        api.State,
        api.IssueDetail,
        api.IssuePage,
        api.RunPage,
        api.TranscriptPage,
        api.Accepted,
        api.ActionDone,
        api.Problem,
        api.SetStatusBody,
    ]
    from beflow.records.record import RunRecord

    models.append(RunRecord)
    events = api.event_models()
    models += events.values()
    _, schemas = models_json_schema([(m, "serialization") for m in models], ref_template="#/components/schemas/{model}")
    components = schemas.get("$defs", {})
    # Each `data:` line of the event stream is one of them (a run's `finished` and the watch's share the kind).
    components["Event"] = {
        "title": "Event",
        "description": "One `data:` line of /api/v1/events: an event of the `--json` stream, or the server's notice.",
        "anyOf": [{"$ref": f"#/components/schemas/{name}"} for name in events],
    }

    def ok(model: str, status: str = "200", description: str = "OK") -> dict[str, Any]:
        return {
            status: {
                "description": description,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}},
            },
            "default": {
                "description": "An error",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
            },
        }

    key = {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}
    run = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
    paging = [
        {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": api.MAX_PAGE}},
    ]
    listing = [
        {"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1}},
        {"name": "per_page", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": api.MAX_PER_PAGE}},
    ]
    return {
        "openapi": "3.1.0",
        "info": {"title": "beflow", "version": __version__, "description": "A watch's state, issues and runs."},
        "paths": {
            "/api/v1/state": {"get": {"summary": "The live state", "responses": ok("State")}},
            "/api/v1/issues": {
                "get": {
                    "summary": "A page of the project's issues, by key (issue.list)",
                    "parameters": [
                        {
                            "name": "status",
                            "in": "query",
                            "schema": {"type": "string", "enum": [s.value for s in Status]},
                        },
                        *listing,
                    ],
                    "responses": ok("IssuePage"),
                }
            },
            "/api/v1/runs": {
                "get": {
                    "summary": "A page of the project's runs, newest first (run.list)",
                    "parameters": [{"name": "issue", "in": "query", "schema": {"type": "string"}}, *listing],
                    "responses": ok("RunPage"),
                }
            },
            "/api/v1/issues/{key}": {
                "get": {"summary": "An issue and its runs", "parameters": [key], "responses": ok("IssueDetail")}
            },
            "/api/v1/runs/{id}": {
                "get": {"summary": "A run's record", "parameters": [run], "responses": ok("RunRecord")}
            },
            "/api/v1/runs/{id}/transcript": {
                "get": {
                    "summary": "A page of a run's readable transcript",
                    "parameters": [run, *paging],
                    "responses": ok("TranscriptPage"),
                }
            },
            "/api/v1/events": {
                "get": {
                    "summary": "The watch's event stream (the `--json` events) as server-sent events, resumable with "
                    "Last-Event-ID",
                    "parameters": [
                        {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer", "minimum": 0}}
                    ],
                    "responses": {
                        "200": {
                            "description": "Server-sent events: `id: N` and `data: <Event as JSON>` each",
                            "content": {"text/event-stream": {"schema": {"$ref": "#/components/schemas/Event"}}},
                        }
                    },
                }
            },
            "/api/v1/refresh": {
                "post": {"summary": "Look at the tracker now", "responses": ok("Accepted", "202", "Accepted")}
            },
            "/api/v1/runs/{id}/cancel": {
                "post": {"summary": "Cancel a run (http.actions)", "parameters": [run], "responses": ok("ActionDone")}
            },
            "/api/v1/issues/{key}/retry": {
                "post": {
                    "summary": "Make an issue ready again (http.actions)",
                    "parameters": [key],
                    "responses": ok("ActionDone"),
                }
            },
            "/api/v1/issues/{key}/status": {
                "post": {
                    "summary": "Set an issue's status (http.actions)",
                    "parameters": [key],
                    "requestBody": {
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SetStatusBody"}}}
                    },
                    "responses": ok("ActionDone"),
                }
            },
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
