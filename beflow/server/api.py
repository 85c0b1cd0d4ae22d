"""The shapes of beflow's HTTP API (``/api/v1/``): every response is one of these models, and
``/api/v1/openapi.json`` is built from them (docs/dashboard.md).

They present what exists already — the dispatcher's snapshot, run records, issues, the readable transcript — and
hold nothing of their own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from beflow.issues import IssueView
from beflow.records import RunRecord

API_VERSION = "v1"
#: Transcript lines in one page, at most (``limit``); a page asks for fewer.
MAX_PAGE = 500
#: Queued issues in the state, at most (``totals.queued`` counts them all).
MAX_QUEUE = 100


class TranscriptLine(BaseModel):
    kind: str = Field(description="agent, tool, permission, client, error, …")
    text: str


class Lane(BaseModel):
    """A run in progress: one of the watch's lanes."""

    issue: str
    title: str = Field(description="The issue's title (from the run's record), as plain text.")
    run: str | None = Field(description="The run's id, once the run has said it.")
    attempt: int
    started: float = Field(description="When the run started, seconds since the epoch.")
    elapsed: float = Field(description="Seconds since it started.")
    latest: str = Field(description="The agent's latest activity.")
    progress: list[str] = Field(description="The progress lines the agent reported (run.progress), oldest first.")
    tail: list[TranscriptLine] = Field(description="The last readable lines of its transcript.")
    cancelling: bool = Field(description="The watch is cancelling it (and says why in `reason`).")
    reason: str | None = None


class Queued(BaseModel):
    """A ready issue, in dispatch order."""

    issue: str
    title: str
    priority: int


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
        )


class RateLimit(BaseModel):
    """What the tracker's API said of its rate limit (GitHub), when it said it."""

    remaining: int | None
    reset: float | None = Field(description="When the limit resets, seconds since the epoch.")
    limited: int = Field(description="Requests refused for the limit so far.")


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


class Totals(BaseModel):
    running: int
    queued: int
    backing_off: int
    concurrency: int
    ticks: int
    next_tick: float | None


class State(BaseModel):
    """``GET /api/v1/state``: everything the live page shows."""

    project: str
    lanes: list[Lane]
    queue: list[Queued] = Field(description="The first 100 ready issues in dispatch order (totals.queued: all).")
    backoffs: list[Backoff]
    recent: list[RecentRun]
    totals: Totals
    health: Health
    actions: bool = Field(description="Whether actions (cancel, retry, set status) are enabled (http.actions).")
    time: float


class IssueDetail(BaseModel):
    """``GET /api/v1/issues/{key}``: the issue and its runs, newest first."""

    issue: IssueView
    runs: list[RecentRun]


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


Problem.model_rebuild()
