"""A watch's lanes as they run, and the snapshot of the watch its views read (the terminal, the dashboard).

The dispatcher (:mod:`beflow.watch.dispatcher`) keeps a :class:`Running` per issue it runs; a view asks it for a
:class:`Snapshot`. They live apart from the dispatcher so that what presents a watch depends on its state, not on
the machinery that makes it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio

from beflow import guardrails
from beflow.config import Project
from beflow.errors import BeflowError, NotFoundError
from beflow.events import Activity, AgentProgress, Finished, RunEvent, UsageReport
from beflow.records.record import RunRecord
from beflow.records.store import RunStore
from beflow.run.candidates import asked_for
from beflow.trackers import Issue, Status, Tracker
from beflow.watch.retries import Backoff


@dataclass
class Running:
    key: str
    attempt: int
    scope: anyio.CancelScope
    #: The tracker the run started with: a config change between ticks does not move a running issue.
    tracker: Tracker
    started: float = field(default_factory=time.time)
    run_id: str | None = None
    latest: str = "starting"
    #: The latest progress line the agent reported (beflow's MCP server, ``run.progress``).
    progress: str = ""
    #: Why reconciliation cancelled it, for the run's record.
    reason: str | None = None
    #: The tracker's stable id of the issue (its rounds find the runs it had under an earlier key by it).
    issue_id: str | None = None
    #: The run has finished (it moved its issue on itself; reconciliation leaves it be).
    finished: bool = False
    #: What its agent reported it used so far (its ``usage`` events).
    usage: guardrails.Usage | None = None
    #: The review round it is (0: not a round; docs/rounds.md).
    round: int = 0
    #: The lanes it takes: one, or one per best-of-N candidate (docs/runs.md#best-of-n).
    lanes: int = 1

    def heard_candidate(self, event: RunEvent) -> None:
        """What the lane shows of one of its best-of-N candidates' events: the latest activity, progress and usage
        of any (the lane's run is the judged one: its id and its end are its own)."""
        match event.data:
            case Activity(latest=latest):
                self.latest = f"candidate: {latest}"
            case AgentProgress(text=text):
                self.progress = text
            case _:
                pass

    def heard(self, event: RunEvent) -> None:
        """What the lane learns from its run's event: the run's id, its latest activity, progress and usage."""
        self.run_id = event.run_id
        match event.data:
            case Activity(latest=latest):
                self.latest = latest
            case AgentProgress(text=text):
                self.progress = text
            case UsageReport() as figures:
                self.usage = guardrails.Usage.of(figures.fields())
            case Finished(usage=used):
                self.finished = True
                if used is not None:  # the run's last figures, whatever `usage` left out
                    self.usage = guardrails.Usage.of(used.fields())

    def cancel(self, reason: str) -> None:
        self.reason = reason
        self.scope.cancel()

    @property
    def cancelling(self) -> bool:
        return self.scope.cancel_called

    def moved_on(self, store: RunStore, started: str | None) -> str | None:
        """Why reconciliation cancels the run: its issue is gone, or no longer ``in_progress``; None: it goes on.

        ``started`` is the run's id as the lane knew it before the tracker was looked at (None: not started then).
        Both ends of a run move its issue before the lane hears of it, so neither is taken for a person's move: a run
        that started after the look (the look may show the issue before it) is left be, and so is one whose record
        is finished (a run closes its record before it tells the tracker how it ended)."""
        if self.cancelling or self.finished:
            return None  # a run that has finished moved its issue on itself: that is no reason to cancel it
        gone = "the issue was removed"
        try:
            status = self.tracker.get(self.key).status
        except NotFoundError as error:
            status, gone = None, f"the issue was removed ({error.message})"  # GitHub: or lost its label
        except BeflowError:
            return None  # unreadable for a moment (a hand edit, an editor's save): look again next tick
        if status is None:
            return gone
        if status == Status.IN_PROGRESS or started is None or self.record(store) is not None:
            return None
        return f"the issue is now {status}"

    def record(self, store: RunStore) -> RunRecord | None:
        """The finished record of a run that did not return one (cancelled, or failed inside beflow): the run's
        events named it."""
        if self.run_id is None:
            return None
        try:
            record = store.get(self.run_id)
        except (BeflowError, OSError, ValueError):
            return None
        return record if record.finished else None


def lanes_asked(project: Project, issue: Issue) -> int:
    """The lanes ``issue`` asks for: one per best-of-N candidate its label or the config asks for."""
    try:
        return asked_for(project.config.attempts, issue, None)[0]
    except BeflowError:
        return 1


def run_ids(running: dict[str, Running]) -> dict[str, str | None]:
    """Each running issue's run id as its lane knows it now (None: not started yet): noted before a look at the
    tracker, for :meth:`Running.moved_on` to judge that look by."""
    return {key: lane.run_id for key, lane in list(running.items())}


@dataclass
class Snapshot:
    """What the live view shows."""

    running: list[Running]
    queue: list[Issue]
    backoffs: list[Backoff]
    recent: list[RunRecord]
    tick: int
    next_tick: float
    #: The ticks whose look at the tracker is done (Dispatcher.surveyed).
    surveyed: int = 0
    #: What the watch's runs used since it started, and its day against ``limits.cost_per_day`` (if set).
    used: guardrails.Totals = field(default_factory=guardrails.Totals)
    budget: guardrails.DayBudget | None = None
    #: Why dispatching is held back (a configuration problem every run would hit), if it is, and how to fix it.
    blocked: str | None = None
    blocked_fix: str | None = None
    #: Whether the watch's last look at the tracker succeeded (None: not looked yet; beflow.watch.reachability).
    tracker_reachable: bool | None = None
    #: Ready issues held back for their blockers, and why (beflow.watch.blocking).
    held: dict[str, str] = field(default_factory=dict)
    #: Issues the tracker could not read at the tick's listing of ready ones, and why (the tracker's own attribute
    #: says what its latest listing found: a listing of blocked or in-review issues comes after).
    unreadable: dict[str, str] = field(default_factory=dict)


def lanes_taken(running: Mapping[str, Running]) -> int:
    """The lanes the running issues take (a best-of-N issue one per candidate)."""
    return sum(lane.lanes for lane in running.values())
