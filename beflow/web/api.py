"""The shapes of beflow's HTTP API (``/api/v1/``): every response is one of these models (each endpoint of
:data:`beflow.web.endpoints.ENDPOINTS` names its own), and ``/api/v1/openapi.json`` is built from them
(docs/dashboard.md).

They present what exists already — the dispatcher's snapshot, run records, issues, the readable transcript — and
hold nothing of their own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from beflow import guardrails
from beflow.ops.issues import MAX_LABELS, MAX_TITLE, IssueView
from beflow.records.record import Question, RunRecord
from beflow.trackers.issue import DEFAULT_PRIORITY, MAX_TEXT

API_VERSION = "v1"
#: Transcript lines in one page, at most (``limit``); a page asks for fewer.
MAX_PAGE = 500
#: Queued issues in the state, at most (``totals.queued`` counts them all).
MAX_QUEUE = 100


class Usage(BaseModel):
    """What a run used, as its agent reported it (ACP's ``usage_update`` and the prompt's ``usage``): a figure the
    agent did not send is null, never estimated, and a cost is in the currency the agent named.

    The figures the dashboard shows, and no more: a shape of its own, for a run's record (``/api/v1/runs/{id}``)
    keeps every figure and how many updates were read, and an event (``/api/v1/events``) carries only the figures
    sent (``beflow.guardrails.Usage``, ``beflow.events.UsageFigures``)."""

    context_used: int | None = Field(default=None, description="Tokens in the agent's context at its latest report.")
    context_size: int | None = Field(default=None, description="The context window's size, in tokens.")
    tokens: int | None = Field(
        default=None, description="Tokens the run is known to have used (the turn's total, else the context's peak)."
    )
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = Field(default=None, description="The session's cumulative cost, in `currency`.")
    currency: str | None = Field(default=None, description="ISO 4217, as the agent said it.")

    @classmethod
    def of(cls, usage: guardrails.Usage | None) -> Usage | None:
        data = guardrails.event_data(usage)
        return cls.model_validate(data) if data is not None else None


class UsageTotals(BaseModel):
    """Usage summed over the watch's finished runs (costs per currency: never added across currencies)."""

    runs: int
    reported: int = Field(description="How many of them reported tokens.")
    tokens: int
    cost: dict[str, float] = Field(description="Cost per currency (ISO 4217).")


class DayBudget(BaseModel):
    """The day's spending against ``limits.cost_per_day`` (finished runs and what running ones reported so far)."""

    day: str
    spent: float
    limit: float
    currency: str
    held: bool = Field(description="Dispatching is held back until tomorrow or a raised limit (budget_reached).")
    message: str | None = Field(description="What the watch said when it held dispatching back.")


class TranscriptLine(BaseModel):
    kind: str = Field(description="agent, tool, diff (a file edit as a unified diff), permission, client, error, …")
    text: str


class Lane(BaseModel):
    """A run in progress: one of the watch's lanes."""

    issue: str
    title: str = Field(description="The issue's title (from the run's record), as plain text.")
    run: str | None = Field(description="The run's id, once the run has said it.")
    attempt: int
    round: int = Field(
        default=0, description="The review round it runs (0: the issue's first run; `beflow docs rounds`)."
    )
    started: float = Field(description="When the run started, seconds since the epoch.")
    elapsed: float = Field(description="Seconds since it started.")
    latest: str = Field(description="The agent's latest activity.")
    progress: list[str] = Field(description="The progress lines the agent reported (run.progress), oldest first.")
    tail: list[TranscriptLine] = Field(description="The last readable lines of its transcript.")
    cancelling: bool = Field(description="The watch is cancelling it (and says why in `reason`).")
    reason: str | None = None
    usage: Usage | None = Field(default=None, description="The run's latest reported usage (None: none reported).")


class Hold(BaseModel):
    """Why an issue is not started: the check (or the budget, or the tracker) that holds it, its message and fix."""

    check: Literal["config", "budget", "unreadable", "skipped", "blocked"] = Field(
        description="config: a check every run would fail (preflight); budget: limits.cost_per_day is reached; "
        "unreadable: the tracker cannot read the issue; skipped: the watch's last start of it was skipped "
        "(claimed by another machine, or no longer ready); blocked: it waits for other issues to be done."
    )
    message: str
    fix: str | None = None
    since: float | None = Field(default=None, description="When the watch said so, seconds since the epoch.")


class Queued(BaseModel):
    """A ready issue, in dispatch order."""

    issue: str
    title: str
    priority: int
    held: Hold | None = Field(default=None, description="What holds it back from being dispatched, if anything.")


class HeldIssue(BaseModel):
    """An issue the watch does not start, and is not in the queue: unreadable, or claimed elsewhere."""

    issue: str
    held: Hold


class Backoff(BaseModel):
    """An issue waiting out its backoff before its next attempt."""

    issue: str
    attempt: int = Field(description="The attempt that runs when it is due.")
    due: float = Field(description="When it is due, seconds since the epoch.")
    reason: str = Field(description="Why the last attempt failed.")


class RecentRun(BaseModel):
    """A run the watch saw finish."""

    id: str
    issue: str
    title: str
    outcome: str
    reason: str | None
    branch: str | None
    pull_request: str | None
    duration: float | None
    started_at: str
    usage: Usage | None = Field(default=None, description="What the run used, as its record says.")

    @classmethod
    def of(cls, record: RunRecord) -> RecentRun:
        return cls(
            id=record.id,
            issue=record.issue,
            title=record.title,
            outcome=record.outcome,
            reason=record.stop_reason,
            branch=record.branch,
            pull_request=record.pull_request,
            duration=record.duration,
            started_at=record.started_at.isoformat(),
            usage=Usage.of(record.usage),
        )


class RateLimit(BaseModel):
    """What the tracker's API said of its rate limit (GitHub), when it said it."""

    remaining: int | None
    reset: float | None = Field(description="When the limit resets, seconds since the epoch.")
    limited: int = Field(description="Requests refused for the limit so far.")


class Webhooks(BaseModel):
    """What the server's webhooks (``/hooks/*``) received since it started."""

    woke: int = Field(description="Verified deliveries that woke the watch.")
    ignored: int = Field(
        description="Verified deliveries not acted on: an event that changes nothing ready, or a forge that is "
        "neither the project's tracker nor its code host."
    )
    refused: dict[str, int] = Field(
        description="Refused deliveries by why: off (no secret configured), unsigned, bad_signature, stale, "
        "no_delivery_id, malformed, replayed, too_large."
    )


class Health(BaseModel):
    """How the watch is doing."""

    live: bool = Field(description="A watch is running (false for `beflow serve`).")
    tracker: str = Field(description="The tracker's kind.")
    tracker_reachable: bool | None = Field(description="Whether the tracker's last look succeeded (None: unknown).")
    blocked: str | None = Field(description="Why dispatching is held back (a configuration problem), if it is.")
    blocked_fix: str | None = Field(default=None, description="How to fix it, as the check says.")
    config_reloaded: float | None = Field(description="When the config was last reloaded, if it was.")
    errors: list[str] = Field(description="The latest errors the watch reported, newest last.")
    rate_limit: RateLimit | None
    webhooks: Webhooks


class Totals(BaseModel):
    running: int
    queued: int
    backing_off: int
    concurrency: int
    ticks: int
    next_tick: float | None
    used: UsageTotals | None = Field(
        default=None, description="What the watch's finished runs used since it started (None: no watch)."
    )
    budget: DayBudget | None = Field(default=None, description="The day against limits.cost_per_day, if set.")


class State(BaseModel):
    """``GET /api/v1/state``: everything the live page shows."""

    project: str
    lanes: list[Lane]
    queue: list[Queued] = Field(description="The first 100 ready issues in dispatch order (totals.queued: all).")
    backoffs: list[Backoff]
    held: list[HeldIssue] = Field(
        default_factory=list,
        description="Issues the watch skips: unreadable at the tracker's last listing, or whose last start was "
        "skipped (a claim another machine holds), as the watch's own events said.",
    )
    recent: list[RecentRun]
    totals: Totals
    health: Health
    actions: bool = Field(
        description="Whether actions (new issue, cancel, retry, set status, set priority, review) are enabled "
        "(http.actions)."
    )
    time: float


class CandidateView(BaseModel):
    """One best-of-N candidate as the issue's page shows it: its run (``running``: in its lane) and its figures."""

    candidate: int
    run: str | None = Field(description="Its run's id; none: it waits for a lane.")
    agent: str | None
    outcome: str = Field(description="Its run's outcome (running: in its lane), or waiting for a lane.")
    reason: str | None = None
    branch: str | None = None
    base_commit: str | None = None
    commit: str | None = None
    checks_passed: int = 0
    checks_total: int = 0
    lines_changed: int | None = None
    cost: float | None = None
    currency: str | None = None
    duration: float | None = None
    passes: bool = False
    chosen: bool = False
    url: str | None = Field(default=None, description="Its branch on the code host, once pushed.")
    removed: bool = False


class BestOf(BaseModel):
    """The issue's latest best of N: its judged run, its candidates side by side and the verdict."""

    run: str = Field(description="The judged run's id.")
    outcome: str
    reason: str | None
    count: int
    candidates: list[CandidateView]
    reviewer: int | None = Field(default=None, description="The candidate the reviewer agent chose, if it answered.")
    reviewer_reason: str | None = None
    decided_by: str | None = Field(default=None, description="The person who chose (attempts.confirm).")
    confirming: bool = Field(default=False, description="It waits for a person to confirm or override the choice.")


class IssueDetail(BaseModel):
    """``GET /api/v1/issues/{key}``: the issue and its runs, newest first."""

    issue: IssueView
    runs: list[RecentRun]
    choices: list[str] = Field(
        default_factory=list,
        description="The statuses a person may move the issue to from its own (the tracker's transitions; "
        "in_progress is a run's).",
    )
    question: Question | None = Field(
        default=None,
        description="The question its agent asked, when the issue is blocked waiting for the answer "
        "(POST /api/v1/issues/{key}/answer gives it).",
    )
    best_of: BestOf | None = Field(
        default=None, description="Its latest best of N: the candidates side by side and the verdict."
    )


#: Rows of a list page (``/api/v1/issues``, ``/api/v1/runs``) unless ``per_page`` says fewer; at most MAX_PER_PAGE.
PER_PAGE = 50
MAX_PER_PAGE = 200


class IssueRow(BaseModel):
    """An issue in a list (its body and comments: ``/api/v1/issues/{key}``)."""

    key: str
    title: str
    status: str
    priority: int
    labels: list[str]
    created: str
    updated: str


class IssuePage(BaseModel):
    """``GET /api/v1/issues?status=&page=``: a page of the project's issues by key (``issue.list``)."""

    issues: list[IssueRow]
    status: str | None = Field(description="Only issues with this status (None: all).")
    page: int = Field(description="This page, from 1.")
    per_page: int
    total: int = Field(description="The issues listed (with this status).")
    pages: int
    unreadable: list[str] = Field(description="Issue files the tracker could not read, and why.")


class RunPage(BaseModel):
    """``GET /api/v1/runs?issue=&page=``: a page of the project's runs, newest first (``run.list``)."""

    runs: list[RecentRun]
    issue: str | None = Field(description="Only runs of this issue (None: all).")
    page: int = Field(description="This page, from 1.")
    per_page: int
    next: int | None = Field(description="The next page, if there are more runs; None on the last.")


class TranscriptPage(BaseModel):
    """``GET /api/v1/runs/{id}/transcript``: readable lines ``offset`` … ``offset + len(lines)`` of ``total``."""

    run: str
    offset: int
    total: int
    lines: list[TranscriptLine]
    next: int | None = Field(description="The offset of the next page; None at the end.")


class Accepted(BaseModel):
    """A request taken (202): what happens next happens in the watch."""

    accepted: Literal[True] = True
    message: str


class ActionDone(BaseModel):
    """An action carried out through the operations registry: the operation and its result."""

    operation: str
    result: dict[str, Any]


class ProtectedResource(BaseModel):
    """How to authenticate to one of this server's resources (OAuth 2.0 Protected Resource Metadata, RFC 9728): with
    the server's token as a bearer token in ``Authorization``. There is no authorization server to get one from:
    the token is the one the server made (``$BEFLOW_HOME/http-token``) or was given (``BEFLOW_HTTP_TOKEN``)."""

    resource: str = Field(description="The resource's URL: the server, /mcp or /mcp/issues/{key}.")
    resource_name: str = "beflow"
    bearer_methods_supported: list[Literal["header"]] = Field(
        default=["header"], description="The token goes in the Authorization header, nowhere else."
    )


class Problem(BaseModel):
    """Every error: a code, what happened and how to fix it."""

    error: ProblemDetail


class ProblemDetail(BaseModel):
    code: str
    message: str
    fix: str | None = None


class SetStatusBody(BaseModel):
    """``POST /api/v1/issues/{key}/status``."""

    model_config = {"extra": "forbid"}

    status: str = Field(max_length=40)
    note: str | None = Field(default=None, max_length=2000)


class NewIssueBody(BaseModel):
    """``POST /api/v1/issues``: a new issue (``issue.new``), ready for runs unless ``status`` says open."""

    model_config = {"extra": "forbid"}

    title: str = Field(min_length=1, max_length=MAX_TITLE)
    body: str = Field(default="", max_length=MAX_TEXT)
    labels: list[str] = Field(default_factory=list, max_length=MAX_LABELS)
    priority: int = Field(default=DEFAULT_PRIORITY, ge=0, le=1000, description="Lower runs first.")
    status: Literal["open", "ready"] = "ready"


class PriorityBody(BaseModel):
    """``POST /api/v1/issues/{key}/priority``: the issue's place in the queue (``issue.set_priority``)."""

    model_config = {"extra": "forbid"}

    priority: int = Field(ge=0, le=1000, description="Lower runs first: 0 is the most urgent; 2 is the default.")


class AnswerBody(BaseModel):
    """``POST /api/v1/issues/{key}/answer``: the answer to the question a blocked issue's agent asked
    (``issue.answer``); the watch resumes the agent's session with it."""

    model_config = {"extra": "forbid"}

    text: str = Field(min_length=1, max_length=MAX_TEXT)


class ConfirmBody(BaseModel):
    """``POST /api/v1/issues/{key}/confirm``: a person's choice among a blocked issue's best-of-N candidates
    (``candidate.confirm``); the watch proposes it."""

    model_config = {"extra": "forbid"}

    candidate: int | None = Field(default=None, ge=1, le=1000, description="None: the judge's choice, confirmed.")
    anyway: bool = Field(default=False, description="Choose a candidate that did not pass the judge all the same.")
    note: str | None = Field(default=None, max_length=2000)


class ReviewBody(BaseModel):
    """``POST /api/v1/issues/{key}/review``: a comment on the issue's branch (``review.comment``) — on a line of a file
    the diff shows, or, without ``path``, on the whole change. The next review round answers it."""

    model_config = {"extra": "forbid"}

    body: str = Field(min_length=1, max_length=MAX_TEXT)
    path: str | None = Field(default=None, max_length=4096, description="A file the branch changed.")
    line: int | None = Field(default=None, ge=1, description="Its line in the branch's version; needs path.")


class MissedNotice(BaseModel):
    """The server's own event on ``/api/v1/events``: a client resumed from further back than the ring keeps."""

    model_config = {"extra": "forbid"}

    event: Literal["notice"]
    issue: None
    time: float
    message: str = Field(description="How many events are no longer kept; read /api/v1/state.")


def _kind(kind: str) -> Any:
    """``Literal[kind]`` for a kind known only when the models are made."""
    return Literal[kind]


def _event_name(side: str, kind: str) -> str:
    return side + "".join(part.capitalize() for part in kind.split("_")) + "Event"


def event_models() -> dict[str, type[BaseModel]]:
    """``/api/v1/events``'s ``data:`` lines, one model per kind: the ``--json`` event stream's, a run's
    (``Run…Event``: ``event``, ``run``, ``issue``, ``time`` and its payload's fields) and the watch's
    (``Watch…Event``: ``event``, ``issue``, ``time`` and its payload's fields), from :mod:`beflow.events`'
    payloads — the fields an emitter did not set are left out, never null."""
    from beflow.events import RUN_PAYLOADS, WATCH_PAYLOADS

    models: dict[str, type[BaseModel]] = {}
    for kind, payload in RUN_PAYLOADS.items():
        name = _event_name("Run", kind)
        models[name] = create_model(
            name,
            __base__=payload,
            __doc__=f"A run's `{kind}` event. {payload.__doc__ or ''}".strip(),
            event=(_kind(kind), ...),
            run=(str, Field(description="The run's id.")),
            issue=(str, ...),
            time=(float, Field(description="When, seconds since the epoch.")),
        )
    for kind, payload in WATCH_PAYLOADS.items():
        name = _event_name("Watch", kind)
        models[name] = create_model(
            name,
            __base__=payload,
            __doc__=f"The watch's `{kind}` event. {payload.__doc__ or ''}".strip(),
            event=(_kind(kind), ...),
            issue=(str | None, ...),
            time=(float, Field(description="When, seconds since the epoch.")),
        )
    models["MissedNotice"] = MissedNotice
    return models


Problem.model_rebuild()
