"""What beflow tells while it works: a run's events and a watcher's, as the live views and ``--json`` show them.

The kinds are the Literals below, and nothing else can be emitted (the type checker sees to it); each kind's
payload is a model (:data:`RUN_PAYLOADS`, :data:`WATCH_PAYLOADS`), so that an emitter's typo is an error and every
consumer (the terminal views, ``--json``, the dashboard) reads fields, not dictionary keys. The tables in
docs/modes.md and the tests are checked against both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict

#: A run's events, in every mode (``--auto --json`` streams them). ``progress``: a line the agent reported through
#: beflow's own MCP server (``run.progress``). ``usage``: what the agent reported it used (at most one a second).
RunEventKind = Literal["started", "activity", "notice", "finished", "progress", "usage"]
#: What ``--auto --json`` prints when no issue is ready (the only line then: it belongs to no run).
IDLE = "idle"
#: A watcher's events (``beflow watch --json`` streams them).
WatchEventKind = Literal[
    "dispatched",
    "finished",
    "retry_scheduled",
    "failed",
    "cancelled",
    "skipped",
    "requeued",
    "settled",
    "config_reloaded",
    "error",
    "stopping",
    "budget_reached",
    "budget_cleared",
    "feedback",
    "swept",
    "held",
    "triggered",
    "ignored",
    "landed",
]
RUN_EVENTS: frozenset[str] = frozenset(get_args(RunEventKind))
WATCH_EVENTS: frozenset[str] = frozenset(get_args(WatchEventKind))


class Payload(BaseModel):
    """What an event of one kind carries. Only the fields its emitter set are told (``--json`` prints them in the
    order the model declares, which is the order every emitter passes them in)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def fields(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class UsageFigures(Payload):
    """The figures an agent reported (:func:`beflow.guardrails.event_data`): those it never sent are left out.

    A shape of its own, not the record's (``beflow.guardrails.Usage``, which stands above the events and keeps how
    many updates were read, and every figure, null or not): an event carries the figures sent and the ``tokens``
    they make, nothing else."""

    context_used: int | None = None
    context_peak: int | None = None
    context_size: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    thought_tokens: int | None = None
    cached_read_tokens: int | None = None
    cached_write_tokens: int | None = None
    cost: float | None = None
    currency: str | None = None
    session_cost: float | None = None
    earlier_cost: float | None = None
    earlier_currency: str | None = None
    tokens: int | None = None


# --- a run's events ---------------------------------------------------------------------------------------------


class Started(Payload):
    """The run began: unattended on ``branch``, or a supervised session (``mode``) in ``checkout``."""

    attempt: int | None = None
    branch: str | None = None
    #: A review round's number (docs/rounds.md); left out of a first run's events.
    round: int | None = None
    mode: str | None = None
    checkout: str | None = None
    permissions: str | None = None
    servers: list[str] | None = None
    client: str | None = None
    source: str | None = None


class Activity(Payload):
    """What the agent is doing now (its latest tool call or message), or a hook running."""

    latest: str


class Notice(Payload):
    """Something a person should know that does not end the run."""

    message: str


class AgentProgress(Payload):
    """A line the agent reported through beflow's own MCP server (``run.progress``)."""

    text: str


class UsageReport(UsageFigures):
    """What the agent reported it used so far (at most one a second)."""


class Finished(Payload):
    """How the run ended; ``changed`` is a count for an unattended run, the files for a supervised one."""

    outcome: str
    reason: str | None = None
    commit: str | None = None
    changed: int | list[str] | None = None
    dirty_before: list[str] | None = None
    exit_code: int | None = None
    usage: UsageFigures | None = None
    round: int | None = None


RUN_PAYLOADS: dict[str, type[Payload]] = {
    "started": Started,
    "activity": Activity,
    "notice": Notice,
    "progress": AgentProgress,
    "usage": UsageReport,
    "finished": Finished,
}


# --- a watcher's events -----------------------------------------------------------------------------------------


class Dispatched(Payload):
    attempt: int
    #: The review round it runs (0: the issue's first run).
    round: int = 0
    #: On a fleet (docs/fleet.md): the issue's workflow, which a worker runs.
    workflow: str | None = None


class WatchUsed(Payload):
    """What a watch's runs used since it started (:class:`beflow.guardrails.Totals`): how many runs, how many of
    them reported tokens and their sum, the cost per currency (never added across currencies)."""

    runs: int
    reported: int
    tokens: int
    cost: dict[str, float]


class RunFinished(Payload):
    """A lane's run ended (the watcher's view of :class:`Finished`); ``watch_used``: the watch's runs so far, this
    one included."""

    run: str
    outcome: str
    reason: str | None = None
    usage: UsageFigures | None = None
    watch_used: WatchUsed | None = None
    #: The review round it ran (left out for the issue's first run).
    round: int | None = None


class RetryScheduled(Payload):
    attempt: int
    delay: float


class Because(Payload):
    """Why the watcher did what the event's kind says (gave up, cancelled, skipped, requeued, settled, held)."""

    reason: str


class Skipped(Because):
    """A dispatch that did not run, or an issue that cannot be read; ``by``: the watcher that took the issue first,
    when its claim says who. Also a trigger heard (``triggered``, ``ignored``): ``by`` who mentioned or was
    assigned."""

    by: str | None = None


class Problem(Payload):
    message: str


class ConfigReloaded(Payload):
    path: str
    message: str | None = None


class Stopping(Payload):
    running: int
    watch_used: WatchUsed | None = None


class FeedbackHeard(Payload):
    """On a fleet: unanswered feedback on an issue's work was told to its workflow (which runs its round)."""

    pieces: int


class Budget(Payload):
    """The day's budget was reached, or no longer holds the watch (raised, removed, a new day)."""

    message: str
    spent: float | None = None
    limit: float | None = None
    currency: str | None = None


WATCH_PAYLOADS: dict[str, type[Payload]] = {
    "dispatched": Dispatched,
    "finished": RunFinished,
    "retry_scheduled": RetryScheduled,
    "failed": Because,
    "cancelled": Because,
    "skipped": Skipped,
    "requeued": Because,
    "settled": Because,
    "config_reloaded": ConfigReloaded,
    "error": Problem,
    "stopping": Stopping,
    "budget_reached": Budget,
    "feedback": FeedbackHeard,
    "swept": Because,
    "landed": Because,
    "budget_cleared": Budget,
    "held": Because,
    "triggered": Skipped,
    "ignored": Skipped,
}


@dataclass(frozen=True)
class RunEvent:
    """Progress of a run, for the terminal view and for ``--json`` event streams."""

    type: RunEventKind
    run_id: str
    issue: str
    data: Payload
    time: float = field(default_factory=time.time)

    @classmethod
    def of(cls, kind: RunEventKind, run_id: str, issue: str, **data: Any) -> RunEvent:
        """The event of ``kind`` with ``data`` checked against its payload (an unknown field is a bug)."""
        return cls(kind, run_id, issue, RUN_PAYLOADS[kind].model_validate(data))

    def to_json(self) -> dict[str, Any]:
        return {"event": self.type, "run": self.run_id, "issue": self.issue, "time": self.time, **self.data.fields()}


@dataclass(frozen=True)
class WatchEvent:
    """What the dispatcher did, for the live view and ``--json``."""

    type: WatchEventKind
    issue: str | None
    data: Payload
    time: float = field(default_factory=time.time)

    @classmethod
    def of(cls, kind: WatchEventKind, issue: str | None = None, **data: Any) -> WatchEvent:
        """The event of ``kind`` with ``data`` checked against its payload (an unknown field is a bug)."""
        return cls(kind, issue, WATCH_PAYLOADS[kind].model_validate(data))

    def to_json(self) -> dict[str, Any]:
        return {"event": self.type, "issue": self.issue, "time": self.time, **self.data.fields()}


EventSink = Callable[[RunEvent], None]


class WatchEmit(Protocol):
    """How the dispatcher, and what it delegates to, tells a watch event (``Dispatcher.emit``)."""

    def __call__(self, kind: WatchEventKind, issue: str | None = None, **data: Any) -> None: ...


def safe_sink(sink: EventSink | None) -> EventSink:
    """``sink``, made harmless: a display that fails (``beflow --auto --json | head``) is dropped, and the run goes
    on; nothing a display does may break a run."""
    state = {"sink": sink}

    def emit(event: RunEvent) -> None:
        target = state["sink"]
        if target is None:
            return
        try:
            target(event)
        except Exception:
            state["sink"] = None

    return emit
