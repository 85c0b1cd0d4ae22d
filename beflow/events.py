"""What beflow tells while it works: a run's events and a watcher's, as the live views and ``--json`` show them.

The kinds are the Literals below, and nothing else can be emitted (the type checker sees to it); the tables in
docs/modes.md and the tests are checked against them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

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
]
RUN_EVENTS: frozenset[str] = frozenset(get_args(RunEventKind))
WATCH_EVENTS: frozenset[str] = frozenset(get_args(WatchEventKind))


@dataclass(frozen=True)
class RunEvent:
    """Progress of a run, for the terminal view and for ``--json`` event streams."""

    type: RunEventKind
    run_id: str
    issue: str
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.type, "run": self.run_id, "issue": self.issue, "time": self.time, **self.data}


@dataclass
class WatchEvent:
    """What the dispatcher did, for the live view and ``--json``."""

    type: WatchEventKind
    issue: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.type, "issue": self.issue, "time": self.time, **self.data}


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
