"""What the live page and ``/api/v1/state`` show, made of what exists already: the watch's snapshot
(:class:`beflow.web.live.WatchData`), its events (the hub's skips and errors), the run records and the tracker —
or, with no watch (``beflow serve``), the records and the tracker alone. An issue's page and the list pages too."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from beflow.errors import BeflowError
from beflow.ops.issues import person_choices
from beflow.ops.reviews import ReviewView
from beflow.system.threads import Batched
from beflow.trackers.base import MetersRequests
from beflow.trackers.issue import Status
from beflow.web import api, candidates, lists
from beflow.web.live import WatchData

if TYPE_CHECKING:
    from beflow.web.server import Server
    from beflow.web.transcripts import Transcripts

#: Seconds the recent runs are kept between state reads when no run finished here meanwhile.
RECENT_FOR = 2.0
#: Seconds a watch's state is given again to a page that asks while nothing happened since it was read (no event,
#: no action): five pages reading after the same event are one reading, even when their reads do not overlap.
FRESH_FOR = 0.5
_BLOCKED_FIX = "It starts once the issues it waits for are done or closed (or no longer block it)."
_UNREADABLE_FIX = "Fix the issue as the message says (its labels, its text); the watch reads it again at its next look."


class Views:
    """The views of one server: read in the server's worker threads, a few kept between reads (the live page
    reads the state after every event, each lane's tail with it: ``transcripts``)."""

    def __init__(self, server: Server, transcripts: Transcripts) -> None:
        self.server = server
        self.transcripts = transcripts
        #: Titles of issues whose lane has no record yet (asked of the tracker once).
        self._titles: dict[str, str] = {}
        self._recent: tuple[int, float, list[api.RecentRun]] | None = None
        # Pages open at once read the state after the same events: one reading serves all who asked meanwhile.
        self._state = Batched(self._read_state)
        #: The latest reading of a watch's state: (the newest event and the actions so far when it began, when, the
        #: watch's data it read, the state).
        self._fresh: tuple[tuple[int, int], float, WatchData | None, api.State] | None = None

    def state(self) -> api.State:
        """The live state (a watch's), or what the records and the tracker say (``beflow serve``): a reading that
        began after this call (shared with the other pages that asked meanwhile) — or, of a watch, one that began at
        most :data:`FRESH_FOR` seconds ago with no event, no action and no change of the watch's data since."""
        kept, server = self._fresh, self.server
        if (
            kept is not None
            and server.source is not None
            and kept[0] == (server.hub.newest, server.acted)
            and time.monotonic() - kept[1] < FRESH_FOR
            and server.source.data() == kept[2]  # (a look that changed no lane says no event: its health, its queue)
        ):
            return kept[3]
        return self._state()

    def _read_state(self) -> api.State:
        server = self.server
        began = ((server.hub.newest, server.acted), time.monotonic())
        data = server.source.data() if server.source is not None else None
        now = time.time()
        lanes: list[api.Lane] = []
        backoffs: list[api.Backoff] = []
        held: list[api.HeldIssue] = []
        if data is not None:
            lanes = self._lanes(data, now)
            hold = _queue_hold(data)
            queue = [api.Queued(issue=k, title=t, priority=p, held=hold) for k, t, p in data.queue]
            held = self._held(data, {q.issue for q in queue} | {lane.key for lane in data.lanes})
            backoffs = [api.Backoff(issue=k, attempt=a, due=d, reason=r) for k, a, d, r in data.backoffs]
        else:
            queue = self._ready()
        state = api.State(
            project=str(server.project.directory),
            lanes=lanes,
            queue=queue[: api.MAX_QUEUE],  # the state is read on every event: 10k ready issues must not go each time
            backoffs=backoffs,
            held=held,
            recent=self.recent(),
            totals=api.Totals(
                running=len(lanes),
                queued=len(queue),
                backing_off=len(backoffs),
                concurrency=data.concurrency if data else server.project.config.watch.concurrency,
                ticks=data.tick if data else 0,
                next_tick=data.next_tick if data else None,
                used=_used(data),
                budget=_budget(data),
            ),
            health=self._health(data),
            actions=server.policy.actions,
            time=now,
        )
        self._fresh = (*began, data, state)
        return state

    def _lanes(self, data: WatchData, now: float) -> list[api.Lane]:
        store = self.server.store()
        lanes = []
        for lane in data.lanes:
            title, progress = self._titles.get(lane.key, ""), [lane.progress] if lane.progress else []
            worktree = None
            if lane.run_id is None and not title:  # (dispatched, its record not written yet)
                with contextlib.suppress(BeflowError, OSError):
                    title = self._titles[lane.key] = self.server.call("issue.show", {"key": lane.key}).title
            if lane.run_id is not None:
                with contextlib.suppress(BeflowError, OSError, ValueError):
                    record = store.get(lane.run_id)
                    title, worktree = record.title, record.worktree
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
                    tail=self.transcripts.tail(lane.run_id, worktree or "") if lane.run_id else [],
                    cancelling=lane.cancelling,
                    reason=lane.reason,
                    usage=api.Usage.of(lane.usage),
                )
            )
        return lanes

    def _ready(self) -> list[api.Queued]:
        """With no watch: the ready issues, in the order a watch would start them."""
        try:
            ready = self.server.call("issue.list", {"status": "ready"}).issues
        except BeflowError:
            ready = []
        ready.sort(key=lambda i: i.order())  # (lower priorities first, as every tracker's ready() gives them)
        return [api.Queued(issue=i.key, title=i.title, priority=i.priority) for i in ready]

    def recent(self) -> list[api.RecentRun]:
        """The last 20 finished runs. Kept between reads — the live page reads the state after every event, and
        reading the records was most of a read's work — until a run finishes here (a ``finished`` event), and
        for :data:`RECENT_FOR` seconds at most (a run another process finished)."""
        key, now = self.server.hub.finished, time.monotonic()
        kept = self._recent
        if kept is not None and kept[0] == key and now - kept[1] < RECENT_FOR:
            return kept[2]
        runs = [api.RecentRun.of(r) for r in self.server.call("run.list", {"limit": 30}).runs if r.finished][:20]
        self._recent = (key, now, runs)
        return runs

    def _held(self, data: WatchData, shown: set[str]) -> list[api.HeldIssue]:
        """The issues the watch skips: unreadable ones (the tracker's last listing), then those whose last start
        was skipped (its ``skipped`` events; an issue queued or running here again is not held)."""
        hub = self.server.hub
        held = [
            api.HeldIssue(issue=key, held=api.Hold(check="unreadable", message=why, fix=_UNREADABLE_FIX))
            for key, why in sorted(data.unreadable.items())
        ]
        held += [
            api.HeldIssue(issue=key, held=api.Hold(check="blocked", message=why, fix=_BLOCKED_FIX))
            for key, why in data.held.items()
        ]
        hub.forget(set(data.unreadable))
        for key, (why, since) in sorted(hub.skips().items(), key=lambda item: -item[1][1]):
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
        hub, tally = self.server.hub, self.server.hook_tally
        return api.Health(
            live=data is not None,
            tracker=self.server.watched()[0].config.tracker.kind,
            tracker_reachable=reachable,
            blocked=data.blocked if data else None,
            blocked_fix=data.blocked_fix if data else None,
            config_reloaded=hub.config_reloaded,
            errors=list(hub.errors),
            rate_limit=rate,
            webhooks=api.Webhooks(woke=tally.woke, ignored=tally.ignored, refused=dict(tally.refused)),
        )

    def issue(self, key: str) -> api.IssueDetail:
        """An issue and its last 20 runs, newest first."""
        issue = self.server.call("issue.show", {"key": key})
        records = self.server.call("run.list", {"issue": issue.key, "limit": 20}).runs
        runs = [api.RecentRun.of(r) for r in records]
        choices = [s.value for s in person_choices(issue.status)]
        # (best of N's candidates and reviewer start after their judged run: the issue's word is the judged run's)
        latest = next((r for r in records if not (r.set_of or r.candidate or r.reviewing)), None)
        question = None
        if issue.status == Status.BLOCKED and latest is not None and latest.outcome == "asked":  # (it asked)
            question = latest.question
        checks = len(self.server.watched()[0].config.attempts.judge.checks)
        return api.IssueDetail(
            issue=issue, runs=runs, choices=choices, question=question, best_of=candidates.best_of(records, checks)
        )

    def review(self, key: str) -> tuple[ReviewView | None, str | None]:
        """The issue's branch and the page's comments on it (``review.show``), or why they cannot be read: the
        issue's page is shown either way."""
        try:
            return self.server.call("review.show", {"key": key}), None
        except BeflowError as error:
            return None, error.message

    def issues(self, status: str | None, page: int, per_page: int) -> api.IssuePage:
        return lists.issues(self.server.call, status, page, per_page)

    def runs(self, issue: str | None, page: int, per_page: int) -> api.RunPage:
        return lists.runs(self.server.call, issue, page, per_page)


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
