"""``beflow watch``: keep a project's ready issues flowing through agents.

Every tick (the first at once, then every ``watch.interval`` seconds) the dispatcher

1. reloads the config when it changed (a config that no longer validates is reported, the last good one kept);
2. puts back issues a killed run left ``in_progress`` (no live claim);
3. reconciles: a running issue that is no longer ``in_progress`` (closed or moved by hand) or is gone is cancelled;
4. dispatches ready issues that are not claimed, not running and not backing off, by priority then age, up to
   ``watch.concurrency`` at once. Each dispatch is exactly an ``--auto`` run (:class:`beflow.run.runner.Run`).

A failed run is retried with exponential backoff (``backoff`` doubling up to ``backoff_max``) until
``max_attempts``; then the issue is marked failed. Permanent failures are not retried (:mod:`beflow.run.policy` decides
all of it). Several watchers never run the same issue twice: a run holds the issue's claim for its whole life. The
dispatcher knows a run by its events and its record only.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from beflow import guardrails
from beflow.agent.session import close_killed_runs
from beflow.codehosts.base import CodeHost, Opened
from beflow.config import Project
from beflow.errors import BeflowError, LockedError
from beflow.events import RunEvent, WatchEvent, WatchEventKind
from beflow.records.record import RunRecord
from beflow.records.store import RunStore
from beflow.run.issue_status import requeue_orphans, settle_orphans
from beflow.run.policy import is_final
from beflow.run.request import RunRequest
from beflow.run.spending import Ledger
from beflow.system import threads
from beflow.trackers import Issue, Tracker, reading_once
from beflow.trackers.base import NamesUnreadable, WatchesDirectories
from beflow.watch.blocking import BlockerHolds
from beflow.watch.endings import Endings
from beflow.watch.handovers import HandOverHolds
from beflow.watch.hearing import hear
from beflow.watch.holds import Holds
from beflow.watch.lanes import Running, Snapshot, lanes_asked, lanes_taken, run_ids
from beflow.watch.questions import WaitingQuestions
from beflow.watch.reachability import TrackerLook
from beflow.watch.refusals import Refusals
from beflow.watch.reloading import ConfigReload
from beflow.watch.retries import Retries
from beflow.watch.rounds import ReviewRounds
from beflow.watch.wake import Wakeup, looks_again, watch_directories

#: Finished runs a long watch keeps in memory besides the live view's ``recent`` (the records on disk keep them
#: all): none, so that its memory stays flat. ``--once`` returns every run of its tick.
FINISHED_KEPT = 0


Listener = Callable[[WatchEvent | RunEvent], None]


class Dispatcher:
    """One ``beflow watch`` process."""

    def __init__(
        self,
        project: Project,
        *,
        opens: Callable[[Project], Opened],
        config_option: Path | None = None,
        listener: Listener | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.project = project
        #: The wall clock backoffs are due by (seconds since the epoch, as run records keep times); tests move it.
        self.clock = clock
        opened = opens(project)
        self.tracker: Tracker = opened.tracker
        #: Where runs publish, opened with the tracker (before any agent runs: where to push is read then).
        self.code_host: CodeHost | None = opened.code_host
        self.config_option = config_option
        self.listener = listener
        self.running: dict[str, Running] = {}
        #: Each issue's series of attempts, and its backoff (beflow.watch.retries).
        self.retries = Retries(clock)
        self._unreadable: dict[str, str] = {}  # issues the tracker cannot read, as last said
        self.queue: list[Issue] = []
        self.tick_count = 0
        #: The ticks whose look at the tracker is done (the last one's number): what was written before a tick
        #: started is in the snapshot once this reaches it (an action of the dashboard waits for that).
        self.surveyed = 0
        self.next_tick = self.clock()
        self.stopping = False
        #: What holds dispatching back (why, and the error): a configuration problem every run would hit, the day's
        #: budget (beflow.watch.holds).
        self.holds = Holds(self.emit)
        #: The config file, reloaded between ticks when it changed (beflow.watch.reloading).
        self.config = ConfigReload(project, config_option, self.emit, opens)
        #: What ends the wait between ticks early: a run ending, the tracker's files changing (beflow.watch.wake).
        self.wakeup: Wakeup | None = None
        #: When the last full poll ran (the fallback when no event says anything changed).
        self._polled = 0.0
        #: What the watch's runs used, and its day's spending (beflow.run.spending).
        self.ledger = Ledger()
        #: What a run's end changes in the watch: its recent runs, its ledger, a currency hold, the next attempt.
        self.endings = Endings(self.ledger, self.holds, self.retries, self.emit)
        self.rounds = ReviewRounds(clock, self.emit)  # review rounds due, or waiting for feedback to settle
        #: Ready issues held back for their blockers (beflow.watch.blocking), or not handed over (.handovers).
        self.blockers, self.handovers = BlockerHolds(self.emit), HandOverHolds(self.emit)
        #: Blocked issues: their agent's question answered (a run resumes it) or waited on (beflow.watch.questions).
        self.questions = WaitingQuestions(clock, self.emit)
        self.refusals = Refusals(self.emit)  # issues whose agent labels were refused: said once
        #: Whether the last look at the tracker succeeded (only the tracker's own failures count).
        self.tracker_look = TrackerLook()

    @property
    def store(self) -> RunStore:
        return RunStore(self.project.directory)

    # -- events ----------------------------------------------------------------------------------------------------

    def emit(self, kind: WatchEventKind, issue: str | None = None, **data: Any) -> None:
        threads.on_the_loop(self._tell, WatchEvent.of(kind, issue, **data))  # a tick's survey runs in a worker thread

    def _tell(self, event: WatchEvent | RunEvent) -> None:
        if self.listener is None:
            return
        try:
            self.listener(event)
        except Exception:  # a display that is gone (`beflow watch --json | head`) must not stop the runs
            self.listener = None  # (as lifecycle.safe_sink does for a run's own events)

    def _on_run_event(self, event: RunEvent) -> None:
        running = self.running.get(event.issue)
        if running is not None:
            running.heard(event)
        self._tell(event)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            running=list(self.running.values()),
            queue=list(self.queue),
            backoffs=self.retries.waiting(),
            recent=list(self.endings.recent),
            tick=self.tick_count,
            surveyed=self.surveyed,
            next_tick=self.next_tick,
            used=self.ledger.watch,
            budget=self._day_budget(),
            blocked=self.holds.blocked,
            blocked_fix=self.holds.blocked_by.fix if self.holds.blocked_by is not None else None,
            held=dict(self.blockers.held),
            unreadable=dict(self._unreadable),
            tracker_reachable=self.tracker_look.reachable,
        )

    def _day_budget(self) -> guardrails.DayBudget | None:
        return self.ledger.budget(self.project.config.limits, [r.usage for r in self.running.values()])

    # -- the loop --------------------------------------------------------------------------------------------------

    async def watch(self, *, once: bool = False) -> list[RunRecord]:
        """Tick until cancelled (or, with ``once``, one tick and its runs). Runs are cancelled on the way out.

        Between ticks the dispatcher sleeps until something may have made a run startable (a run ended, an issue
        file or a claim changed: :mod:`beflow.watch.wake`), a backoff falls due, or ``watch.interval`` passed."""
        finished: list[RunRecord] | deque[RunRecord] = [] if once else deque(maxlen=FINISHED_KEPT)
        self.wakeup = Wakeup()
        async with anyio.create_task_group() as tasks:
            try:
                if not once:
                    tasks.start_soon(watch_directories, lambda: watched_directories(self.tracker), self.wakeup)
                while True:
                    await self.tick(tasks, finished, once=once)  # type: ignore[arg-type]
                    if once:
                        await self._drain()
                        break
                    interval = self.project.config.watch.interval
                    self.next_tick = self.clock() + interval
                    if looks_again(await self.wakeup.wait(self._until_next(interval))):
                        self.rounds.look_again(self.tracker, self.code_host)
            except anyio.get_cancelled_exc_class():
                self.stopping = True
                self.emit("stopping", running=len(self.running), watch_used=dataclasses.asdict(self.ledger.watch))
                raise
        if once and self.holds.blocked_by is not None:
            raise self.holds.blocked_by  # a cron job must see it: exit 2, as `--auto` does
        return list(finished)

    def _until_next(self, interval: float) -> float:
        """Seconds until the next tick is due with no event: the poll, or a backoff falling due before it."""
        now = self.clock()
        due = [self._polled + interval - time.monotonic()] + [b.due - now for b in self.retries.backoffs.values()]
        return max(0.0, min(due + [when - now for when in self.rounds.settling.values()]))  # (feedback settling)

    async def _drain(self) -> None:
        """``--once``: dispatch no more, wait for the runs, still reconciling every ``interval`` (a run whose issue is
        closed meanwhile is cancelled, as in a long watch)."""
        due = time.monotonic() + self.project.config.watch.interval
        while self.running:
            await anyio.sleep(0.1)
            if time.monotonic() >= due:
                due = time.monotonic() + self.project.config.watch.interval
                try:
                    await threads.blocking(self._reconcile, run_ids(self.running))
                except BeflowError as error:
                    self.emit("error", message=error.message)

    def _reconcile(self, started: dict[str, str | None]) -> None:
        """Cancel the runs whose issue is gone or was moved on by hand (``started``: noted before the look, run_ids)."""
        for key, running in list(self.running.items()):
            reason = running.moved_on(self.store, started.get(key))
            if reason is not None:
                threads.on_the_loop(running.cancel, reason)  # cancel scopes belong to the loop
                self.emit("cancelled", key, reason=reason)

    async def tick(self, tasks: anyio.abc.TaskGroup, finished: list[RunRecord], *, once: bool = True) -> None:
        """One look at the tracker, in a worker thread (a scan, a write waiting for an issue's lock and the checks
        before a run must not hold the runs' output or the signal handlers), then dispatching, on the loop."""
        self.tick_count += 1
        self._polled = time.monotonic()
        startable = await threads.blocking(self._survey, once)
        self.surveyed = self.tick_count
        if startable:
            self._dispatch(tasks, finished)

    def _survey(self, once: bool) -> bool:
        """Settle, requeue and reconcile; queue what is ready; whether runs can be dispatched now."""
        reloaded = self.config.reload(self.project)
        if reloaded is not None:
            self.project, self.tracker, self.code_host = reloaded
        started = run_ids(self.running)  # before the tick's one look at the tracker: a run started since is no move
        try:
            with reading_once(self.tracker):  # one scan of the tracker serves the whole tick
                store = self.store
                close_killed_runs(store)
                if self.project.config.limits.cost_per_day is not None:
                    self.ledger.refresh(store)
                for key in settle_orphans(self.tracker, store):
                    self.emit("settled", key, reason="its run had finished; the issue now says so")
                for issue in requeue_orphans(self.tracker):
                    self.emit("requeued", issue.key, reason="its run stopped without finishing")
                self._reconcile(started)
                hear(self.project, self.tracker, self.emit)  # (mentions, assignments: labelled ready now)
                self._queue()
                self.tracker_look.succeeded()
                # The checks every run needs (git, acpx, the prompt, .mcp.json) only when a run is about to start:
                # an idle watch does next to nothing per tick.
                startable = self.queue and self.project.config.watch.concurrency > lanes_taken(self.running)
                # `--once` with nothing to start still reports a configuration every run would fail on, from the
                # checks that need no git process (a bad `worktrees.base` waits for a run to start).
                idle = bool(once and not startable and self.holds.blocked is None)
                looked = startable or self.holds.blocked is not None or self.holds.wrong_currency is not None or once
                return bool(looked and self.holds.config_ready(self.project, idle=idle, tracker=self.tracker))
        except BeflowError as error:
            self.tracker_look.failed(error)
            self.emit("error", message=error.message)
        except OSError as error:  # a full disk, a permission gone: say so and try again next tick
            self.tracker_look.failed(error)
            self.emit("error", message=f"{type(error).__name__}: {error}")
        return False

    def _queue(self) -> None:
        """The queue: what is ready, not running and not backing off (those are shown apart, with their due time)."""
        now = self.clock()
        ready = [i for i in self.tracker.ready() if i.key not in self.running]
        unreadable = self.tracker.unreadable if isinstance(self.tracker, NamesUnreadable) else {}
        for key, why in unreadable.items():  # named once, skipped until fixed
            if self._unreadable.get(key) != why:
                self.emit("skipped", key, reason=why)
        self._unreadable = dict(unreadable)
        self.retries.recall(self.store, [i.key for i in ready], self.project.config.watch)
        queue = [i for i in ready if not self.retries.backing_off(i.key, now)]
        queue += self.rounds.survey(self.project, self.tracker, self.code_host, self.running, queue)
        queue += self.questions.survey(self.project, self.tracker, self.running)
        free = self.project.config.watch.concurrency - len(self.running)
        handed = self.handovers.sift(self.project.config, self.tracker, self.refusals.sift(queue), free)
        self.queue = self.blockers.sift(self.tracker, handed, free)

    def _dispatch(self, tasks: anyio.abc.TaskGroup, finished: list[RunRecord]) -> None:
        if self.holds.budget_reached(self.ledger, self._day_budget()) or self.holds.currency_held(self.project):
            return  # (a run that ended while the tick looked at the tracker may have found the currency wrong)
        concurrency = self.project.config.watch.concurrency
        free = concurrency - lanes_taken(self.running)
        now = self.clock()
        for issue in list(self.queue):
            if free <= 0 or self.stopping:
                break
            if issue.key in self.running or self.retries.backing_off(issue.key, now):
                continue  # its run ended, and a retry was scheduled, while the tick looked at the tracker
            if not (self.blockers.may_start(self.tracker, issue) and self.handovers.may_start(issue)):
                continue  # a slot freed since the look: its blockers (its hand-over) are looked at next tick
            round_ = self.rounds.round_of(issue.key)
            lanes = min(lanes_asked(self.project, issue), concurrency) if not round_ else 1
            if lanes > free:
                break  # best of N waits for its lanes, ahead of the issues after it
            attempt = self.questions.attempt_of(issue.key) or self.retries.start(issue.key)
            scope = anyio.CancelScope()
            running = Running(issue.key, attempt, scope, self.tracker, round=round_, issue_id=issue.id, lanes=lanes)
            self.running[issue.key] = running
            self.queue.remove(issue)
            free -= lanes
            self.emit("dispatched", issue.key, attempt=attempt, round=self.rounds.round_of(issue.key))
            tasks.start_soon(self._run, running, finished)

    async def _run(self, running: Running, finished: list[RunRecord]) -> None:
        from beflow.run.attempts import run_issue  # (the run machinery: an idle `watch --once` never loads it)

        key = running.key
        request = RunRequest(
            key=key,
            mode="watch",
            attempt=running.attempt,
            final=is_final(running.attempt, self.project.config.watch),
            only_if_ready=True,
        )
        tracker, issue_id = running.tracker, running.issue_id
        if not self.questions.shape(request, self.project):  # (an answer resumes its session: no review round)
            running.round = await self.rounds.shape(request, self.project, tracker, self.code_host, issue_id=issue_id)

        def candidate_event(event: RunEvent) -> None:
            running.heard_candidate(event)
            self._tell(event)

        record: RunRecord | None = None
        try:
            with running.scope:
                record = await run_issue(
                    self.project,
                    running.tracker,
                    request,
                    self._on_run_event,
                    code_host=self.code_host,
                    lanes=running.lanes,
                    cancelled_because=lambda: running.reason,
                    candidate_events=candidate_event,
                )
        except LockedError as error:
            # Another watcher (here, or on another machine) claimed the issue first: its lane is free again.
            taken = error.code == LockedError.code  # (not a NoLongerReady: that one may have been moved by a person)
            reason = f"taken by another watcher: {error.message}" if taken else error.message
            self.emit("skipped", key, reason=reason, **({"by": error.holder} if error.holder else {}))
        except BeflowError as error:
            self.refusals.failed(key, error)  # (an `error` event; a refusal of the same labels again: none)
        except Exception as error:  # one run's unexpected failure (a full disk, say) must not stop the watcher
            self.emit("error", key, message=f"{type(error).__name__}: {error}")
        except anyio.get_cancelled_exc_class():
            # The watch itself is stopping (a signal): the run has recorded itself cancelled; say so, then go on.
            stopped = running.record(self.store)
            if stopped is not None:
                self.endings.finished(stopped, finished, self.project.config)
            raise
        finally:
            self.running.pop(key, None)
            if self.wakeup is not None:
                self.wakeup.set(f"run of {key} ended")  # its slot is free: fill it now, not at the next poll
        record = record or running.record(self.store)
        if record is None:
            return
        self.endings.finished(record, finished, self.project.config)
        self.endings.next_attempt(record, self.project.config.watch)


def watched_directories(tracker: Tracker) -> list[Path]:
    """The directories whose changes wake the dispatcher (the local tracker's issues and claims)."""
    return tracker.watched_directories() if isinstance(tracker, WatchesDirectories) else []
