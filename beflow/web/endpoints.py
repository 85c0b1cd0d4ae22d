"""The endpoints of beflow's HTTP API, declared once: :mod:`beflow.web.routes` serves each at its path and method,
and :mod:`beflow.web.openapi` documents each with the models of :mod:`beflow.web.api` it answers with — so that
what is served and what ``/api/v1/openapi.json`` says cannot part."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from beflow.ops.reviews import ReviewView
from beflow.records.record import RunRecord
from beflow.trackers.issue import Status
from beflow.web.api import (
    MAX_PAGE,
    MAX_PER_PAGE,
    Accepted,
    ActionDone,
    AnswerBody,
    ConfirmBody,
    IssueDetail,
    IssuePage,
    NewIssueBody,
    PriorityBody,
    ProtectedResource,
    ReviewBody,
    RunPage,
    SetStatusBody,
    State,
    TranscriptPage,
)
from beflow.web.guard import RESOURCE_METADATA
from beflow.web.webhooks import FORGES, MAX_BODY


@dataclass(frozen=True)
class Param:
    """A parameter of an endpoint, in its path (always required), its query or a header."""

    name: str
    where: Literal["path", "query", "header"]
    type: Literal["string", "integer"] = "string"
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    description: str | None = None


@dataclass(frozen=True)
class Endpoint:
    """One endpoint of the API: what :mod:`beflow.web.routes` serves at ``path`` and the OpenAPI document says of
    it. ``name`` names its handler; ``response`` is the model of its answer (None: the event stream's ``Event``s,
    or, for JSON, any object)."""

    name: str
    method: Literal["GET", "POST"]
    path: str
    summary: str
    response: type[BaseModel] | None
    params: tuple[Param, ...] = ()
    body: type[BaseModel] | None = None
    status: Literal[200, 202] = 200
    media: Literal["application/json", "text/event-stream"] = "application/json"
    #: What the answer is, where its status's phrase ("OK") does not say it.
    answers: str | None = None
    #: Authenticated by the forge's signature of the body, not by beflow's token (``/hooks/*``).
    signed: bool = False


_KEY = Param("key", "path")
_RUN = Param("id", "path")
_LISTING = (
    Param("page", "query", "integer", minimum=1),
    Param("per_page", "query", "integer", minimum=1, maximum=MAX_PER_PAGE),
)

#: Every endpoint under ``/api/v1/``, and how to authenticate to the server and to MCP (RFC 9728), in the order they
#: are routed and documented.
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("state", "GET", "/api/v1/state", "The live state", State),
    Endpoint(
        "issues",
        "GET",
        "/api/v1/issues",
        "A page of the project's issues, by key (issue.list)",
        IssuePage,
        (Param("status", "query", choices=tuple(s.value for s in Status)), *_LISTING),
    ),
    Endpoint(
        "runs",
        "GET",
        "/api/v1/runs",
        "A page of the project's runs, newest first (run.list)",
        RunPage,
        (Param("issue", "query"), *_LISTING),
    ),
    Endpoint("issue", "GET", "/api/v1/issues/{key}", "An issue and its runs", IssueDetail, (_KEY,)),
    Endpoint("run", "GET", "/api/v1/runs/{id}", "A run's record", RunRecord, (_RUN,)),
    Endpoint(
        "transcript",
        "GET",
        "/api/v1/runs/{id}/transcript",
        "A page of a run's readable transcript",
        TranscriptPage,
        (
            _RUN,
            Param("offset", "query", "integer", minimum=0),
            Param("limit", "query", "integer", minimum=1, maximum=MAX_PAGE),
        ),
    ),
    Endpoint(
        "events",
        "GET",
        "/api/v1/events",
        "The watch's event stream (the `--json` events) as server-sent events, resumable with Last-Event-ID",
        None,
        (
            Param("Last-Event-ID", "header", "integer", minimum=0),
            Param(
                "since",
                "query",
                "integer",
                minimum=0,
                description="As Last-Event-ID, for a client that cannot set a header",
            ),
        ),
        media="text/event-stream",
        answers="Server-sent events: `id: N` and `data: <Event as JSON>` each",
    ),
    Endpoint("refresh", "POST", "/api/v1/refresh", "Look at the tracker now", Accepted, status=202),
    Endpoint("openapi", "GET", "/api/v1/openapi.json", "This document: the API's endpoints and shapes", None),
    Endpoint("cancel", "POST", "/api/v1/runs/{id}/cancel", "Cancel a run (http.actions)", ActionDone, (_RUN,)),
    Endpoint(
        "retry", "POST", "/api/v1/issues/{key}/retry", "Make an issue ready again (http.actions)", ActionDone, (_KEY,)
    ),
    Endpoint(
        "status",
        "POST",
        "/api/v1/issues/{key}/status",
        "Set an issue's status (http.actions)",
        ActionDone,
        (_KEY,),
        body=SetStatusBody,
    ),
    Endpoint(
        "new",
        "POST",
        "/api/v1/issues",
        "File a new issue (issue.new; http.actions)",
        ActionDone,
        body=NewIssueBody,
    ),
    Endpoint(
        "priority",
        "POST",
        "/api/v1/issues/{key}/priority",
        "Set an issue's priority: its place in the queue (issue.set_priority; http.actions)",
        ActionDone,
        (_KEY,),
        body=PriorityBody,
    ),
    Endpoint(
        "answer",
        "POST",
        "/api/v1/issues/{key}/answer",
        "Answer the question a blocked issue's agent asked: the watch resumes its session (issue.answer; http.actions)",
        ActionDone,
        (_KEY,),
        body=AnswerBody,
    ),
    Endpoint(
        "confirm",
        "POST",
        "/api/v1/issues/{key}/confirm",
        "Confirm best of N's choice for an issue held by attempts.confirm, or choose another candidate: the watch "
        "proposes it (candidate.confirm; http.actions)",
        ActionDone,
        (_KEY,),
        body=ConfirmBody,
    ),
    Endpoint(
        "review_show",
        "GET",
        "/api/v1/issues/{key}/review",
        "An issue's branch against its base, file by file, and the page's comments on it (review.show)",
        ReviewView,
        (_KEY,),
    ),
    Endpoint(
        "review",
        "POST",
        "/api/v1/issues/{key}/review",
        "Comment on an issue's branch: review feedback the next round answers (review.comment; http.actions)",
        ActionDone,
        (_KEY,),
        body=ReviewBody,
    ),
    Endpoint("resource", "GET", RESOURCE_METADATA, "How to authenticate to this server (RFC 9728)", ProtectedResource),
    Endpoint("resource_mcp", "GET", f"{RESOURCE_METADATA}/mcp", "How to authenticate to /mcp", ProtectedResource),
    Endpoint(
        "resource_mcp_issue",
        "GET",
        f"{RESOURCE_METADATA}/mcp/issues/{{key}}",
        "How to authenticate to /mcp/issues/{key}",
        ProtectedResource,
        (_KEY,),
    ),
)


#: How each forge signs and names a delivery (:mod:`beflow.web.webhooks`): the headers its endpoint reads.
_SIGNED_BY: dict[str, tuple[str, tuple[Param, ...]]] = {
    "github": (
        "GitHub",
        (
            Param("X-Hub-Signature-256", "header", description="sha256=<hex HMAC-SHA256 of the body>"),
            Param("X-GitHub-Delivery", "header", description="The delivery's id (a replay is refused)"),
            Param("X-GitHub-Event", "header"),
        ),
    ),
    "gitlab": (
        "GitLab",
        (
            Param("X-Gitlab-Token", "header", description="The shared secret"),
            Param("X-Gitlab-Event-UUID", "header", description="The delivery's id (a replay is refused)"),
            Param("X-Gitlab-Event", "header"),
        ),
    ),
    "linear": (
        "Linear",
        (
            Param("Linear-Signature", "header", description="<hex HMAC-SHA256 of the body>"),
            Param("Linear-Delivery", "header", description="The delivery's id (a replay is refused)"),
            Param("Linear-Event", "header"),
        ),
    ),
    "jira": (
        "Jira Cloud",
        (
            Param("X-Hub-Signature", "header", description="sha256=<hex HMAC-SHA256 of the body>"),
            Param("X-Atlassian-Webhook-Identifier", "header", description="The delivery's id (a replay is refused)"),
        ),
    ),
}

#: The forges' webhooks (docs/webhooks.md): served by :mod:`beflow.web.hooks`, documented beside the API.
HOOKS: tuple[Endpoint, ...] = tuple(
    Endpoint(
        f"hook_{forge}",
        "POST",
        f"/hooks/{forge}",
        f"A {_SIGNED_BY[forge][0]} webhook delivery (webhooks.secret_env.{forge}): verified, it wakes the watch",
        Accepted,
        _SIGNED_BY[forge][1],
        status=202,
        answers=f"Verified and new (the body at most {MAX_BODY} bytes): acted on, or not this project's",
        signed=True,
    )
    for forge in FORGES
)
