"""The JSON API under ``/api/v1/``: a handler for each endpoint :data:`beflow.web.endpoints.ENDPOINTS` declares,
routed as the list says (its path and method), so that what is served and what the OpenAPI document says are one.
Reading runs in the server's worker threads; actions (``http.actions``) go through the operations registry."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from beflow.errors import BeflowError, UsageError
from beflow.validation import messages_of
from beflow.web import api, endpoints, openapi, sse
from beflow.web.guard import RESOURCE_METADATA
from beflow.web.lists import number, paging

if TYPE_CHECKING:
    from beflow.web.server import Server
    from beflow.web.views import Views

Handler = Callable[[Request], Awaitable[Any]]


class Conflict(BeflowError):
    """What an action asks cannot be done now (409)."""

    code = "conflict"


def api_routes(server: Server, views: Views) -> list[Route]:
    """The routes of :data:`endpoints.ENDPOINTS`, then the ones that tell a client which actions there are."""

    async def json(fn: Callable[..., Any], *args: Any) -> Response:
        """``fn(*args)``'s model, read off the loop, as JSON (or the problem its error is)."""

        async def answered() -> Response:
            return server.json(await server.off_loop(fn, *args))

        return await server.answer(answered)

    async def state(request: Request) -> Response:
        return await json(views.state)

    async def issues(request: Request) -> Response:
        return await json(views.issues, request.query_params.get("status") or None, *paging(request.query_params))

    async def runs(request: Request) -> Response:
        return await json(views.runs, request.query_params.get("issue") or None, *paging(request.query_params))

    async def issue(request: Request) -> Response:
        return await json(views.issue, request.path_params["key"])

    async def run(request: Request) -> Response:
        return await json(server.call, "run.show", {"id": request.path_params["id"]})

    async def review(request: Request) -> Response:
        return await json(server.call, "review.show", {"key": request.path_params["key"]})

    async def transcript(request: Request) -> Response:
        offset = number(request.query_params.get("offset"), 0)
        limit = min(api.MAX_PAGE, max(1, number(request.query_params.get("limit"), api.MAX_PAGE)))
        return await json(views.transcripts.page, request.path_params["id"], offset, limit)

    async def events(request: Request) -> Response | sse.EventStream:
        return await sse.events(server, request)

    async def refresh(request: Request) -> Response:
        if server.source is None:
            return server.json(api.Accepted(message="no watch is running: nothing to refresh"), 202)
        await server.off_loop(server.source.refresh)
        return server.json(api.Accepted(message="the watch looks at the tracker now"), 202)

    async def document(request: Request) -> Response:
        return JSONResponse(openapi.document())

    async def resource(request: Request) -> Response:
        # (the resource is the path after the well-known one: "" for the server itself, /mcp, /mcp/issues/{key})
        path = request.url.path.removeprefix(RESOURCE_METADATA)
        return server.json(api.ProtectedResource(resource=str(request.base_url).rstrip("/") + (path or "/")))

    actions = Actions(server)
    handlers: dict[str, Handler] = {
        "state": state,
        "issues": issues,
        "runs": runs,
        "issue": issue,
        "run": run,
        "transcript": transcript,
        "events": events,
        "refresh": refresh,
        "openapi": document,
        "resource": resource,
        "resource_mcp": resource,
        "resource_mcp_issue": resource,
        "cancel": functools.partial(actions.answer, kind="cancel"),  # (partials of coroutines: awaited as such)
        "retry": functools.partial(actions.answer, kind="retry"),
        "status": functools.partial(actions.answer, kind="status"),
        "new": functools.partial(actions.answer, kind="new"),
        "priority": functools.partial(actions.answer, kind="priority"),
        "answer": functools.partial(actions.answer, kind="answer"),
        "confirm": functools.partial(actions.answer, kind="confirm"),
        "review_show": review,
        "review": functools.partial(actions.answer, kind="review"),
    }
    assert {e.name for e in endpoints.ENDPOINTS} == set(handlers), "an endpoint without its handler, or the reverse"
    routes = [Route(e.path, handlers[e.name], methods=[e.method]) for e in endpoints.ENDPOINTS]
    # An action that does not exist is told which do (rather than a bare 404).
    routes += [
        Route("/api/v1/runs/{target}/{action:str}", actions.unknown, methods=["POST"]),
        Route("/api/v1/issues/{target}/{action:str}", actions.unknown, methods=["POST"]),
    ]
    return routes


class Actions:
    """What a person does from the page or a client (``http.actions``): file an issue, cancel a run, retry an
    issue, set an issue's status or its priority, answer its agent's question, choose among its best-of-N
    candidates, comment on its branch — each an operation of the registry (``issue.new``, ``issue.set_status``,
    ``issue.set_priority``, ``issue.answer``, ``candidate.confirm``, ``review.comment``), which the watch then acts
    on.
    Who may ask is the guard's to decide (:mod:`beflow.web.middleware`), before any of this runs."""

    #: The body each action takes (none: an empty one, or none at all).
    BODIES: ClassVar[dict[str, type[BaseModel]]] = {
        "status": api.SetStatusBody,
        "new": api.NewIssueBody,
        "priority": api.PriorityBody,
        "answer": api.AnswerBody,
        "confirm": api.ConfirmBody,
        "review": api.ReviewBody,
    }

    def __init__(self, server: Server) -> None:
        self.server = server

    def off(self) -> Response | None:
        if self.server.policy.actions:
            return None
        return self.server.problem(
            403, "actions_off", "actions are off on this server", 'Set "http": {"actions": true} in the config.'
        )

    async def unknown(self, request: Request) -> Response:
        refused = self.off()
        if refused is not None:
            return refused
        kind = request.path_params["action"]
        side = "runs" if request.url.path.startswith("/api/v1/runs/") else "issues"
        allowed = [
            e.path.rsplit("/", 1)[1]
            for e in endpoints.ENDPOINTS
            if e.method == "POST" and e.path.startswith(f"/api/v1/{side}/")
        ]
        return self.server.problem(404, "not_found", f"no action {kind[:40]!r} here; there are: {', '.join(allowed)}")

    async def answer(self, request: Request, kind: str) -> Response:
        server = self.server
        refused = self.off()
        if refused is not None:
            return refused
        model = self.BODIES.get(kind)
        body: BaseModel | None = None
        if model is not None:
            try:
                data = await request.json()
            except ValueError:
                fields = ", ".join(f'"{name}": …' for name in model.model_fields)
                return server.problem(400, "usage", f"the body of {kind} must be JSON: {{{fields}}}")
            try:
                body = model.model_validate(data)
            except ValidationError as error:
                said = "; ".join(messages_of(error, model=model, data=data))
                return server.problem(400, "usage", f"{kind}: {said}")
        target = request.path_params.get("id" if kind == "cancel" else "key", "")

        async def done() -> Response:
            try:
                return server.json(await server.off_loop(self.act, kind, target, body))
            finally:  # (done or not, it may have changed something: the state is read afresh)
                server.acted += 1

        return await server.answer(done)

    def act(self, kind: str, target: str, body: BaseModel | None) -> api.ActionDone:
        call = self.server.call
        operation = "issue.set_status"
        if kind == "cancel":  # a run: its issue moves back to open, and the watch cancels it
            record = call("run.show", {"id": target})
            if record.finished:
                raise Conflict(
                    f"run {record.id} has ended ({record.outcome}): there is nothing to cancel",
                    fix="Cancel a running run; set the issue's status to change what happens to it next.",
                )
            if call("issue.show", {"key": record.issue}).status == "in_progress":
                # (in_progress cannot go to open: through ready, as a person would; the run holds the issue's
                # claim, so nothing starts it meanwhile)
                call("issue.set_status", {"key": record.issue, "status": "ready"})
            arguments: dict[str, Any] = {
                "key": record.issue,
                "status": "open",
                "note": "Cancelled from beflow's dashboard.",
            }
        elif kind == "retry":
            arguments = {"key": target, "status": "ready", "note": "Retried from beflow's dashboard."}
        elif kind == "new":
            assert isinstance(body, api.NewIssueBody)
            operation, arguments = "issue.new", body.model_dump()
        elif kind == "answer":
            assert isinstance(body, api.AnswerBody)
            operation, arguments = "issue.answer", {"key": target, "text": body.text}
        elif kind == "confirm":  # best of N's choice: the watch's next survey proposes it
            assert isinstance(body, api.ConfirmBody)
            operation, arguments = "candidate.confirm", {"key": target, **body.model_dump(exclude_none=True)}
        elif kind == "review":  # feedback: the watch's next survey finds it (after feedback.settle)
            assert isinstance(body, api.ReviewBody)
            operation, arguments = "review.comment", {"key": target, **body.model_dump(exclude_none=True)}
        elif kind == "priority":
            assert isinstance(body, api.PriorityBody)
            operation, arguments = "issue.set_priority", {"key": target, "priority": body.priority}
        else:
            assert isinstance(body, api.SetStatusBody)
            if body.status == "in_progress":
                raise UsageError(
                    "in_progress is a run's status: a person does not set it",
                    fix="Set ready and the watch starts a run; cancel a run to stop it.",
                )
            arguments = {"key": target, "status": body.status, "note": body.note}
        result = call(operation, arguments)
        if self.server.source is not None:
            self.server.source.looked()  # (answered once the watch saw it: the page's next read shows it)
        return api.ActionDone(operation=operation, result=result.model_dump(mode="json"))
