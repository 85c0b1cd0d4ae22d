"""``beflow watch``: keep a project's ready issues flowing through agents (DESIGN §5).

Every tick (the first at once, then every ``watch.interval`` seconds) the dispatcher

1. reloads the config when it changed (a config that no longer validates is reported, the last good one kept);
2. puts back issues a killed run left ``in_progress`` (no live claim);
3. reconciles: a running issue that is no longer ``in_progress`` (closed or moved by hand) or is gone is cancelled;
4. dispatches ready issues that are not claimed, not running and not backing off, by priority then age, up to
   ``watch.concurrency`` at once. Each dispatch is exactly an ``--auto`` run (:class:`beflow.runner.Run`).

A failed run is retried with exponential backoff (``backoff`` doubling up to ``backoff_max``) until
``max_attempts``; then the issue is marked failed. Permanent failures are not retried. Several watchers never run
the same issue twice: a run holds the issue's claim for its whole life.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from beflow import preflight
from beflow.config import Project, load_project
from beflow.errors import BeflowError, ConfigError, LockedError, NotFoundError
from beflow.lifecycle import RunEvent, RunRequest, settle_orphans
from beflow.records import DONE_OUTCOMES, RunRecord, RunStore
from beflow.runner import Run
from beflow.trackers import Issue, Status, Tracker, open_tracker

FAILURES = {"failed", "timeout"}


@dataclass
class WatchEvent:
    """What the dispatcher did, for the live view and ``--json``."""

    type: str  # dispatched, finished, retry_scheduled, cancelled, error, config_reloaded, requeued, stopping
    issue: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.type, "issue": self.issue, "time": self.time, **self.data}


@dataclass
class Running:
    key: str
    attempt: int
    scope: anyio.CancelScope
    started: float = field(default_factory=time.time)
    run_id: str | None = None
    latest: str = "starting"
    run: Run | None = None

    def cancel(self, reason: str) -> None:
        if self.run is not None:
            self.run.cancel_reason = reason
        self.scope.cancel()

    @property
    def cancelling(self) -> bool:
        return self.scope.cancel_called


@dataclass
class Backoff:
    key: str
    attempt: int  # the attempt that will run when it is due
    due: float
    reason: str


@dataclass
class Snapshot:
    """What the live view shows."""

    running: list[Running]
    queue: list[Issue]
    backoffs: list[Backoff]
    recent: list[RunRecord]
    tick: int
    next_tick: float


Listener = Callable[[WatchEvent | RunEvent], None]


def backoff_delay(attempt: int, base: float, ceiling: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: ``base`` doubling per failed attempt, at most ``ceiling``."""
    return float(min(base * (2 ** max(0, attempt - 1)), ceiling))


class Dispatcher:
    """One ``beflow watch`` process."""

    def __init__(self, project: Project, *, config_option: Path | None = None, listener: Listener | None = None):
        self.project = project
        self.tracker: Tracker = open_tracker(project)
        self.config_option = config_option
        self.listener = listener
        self.running: dict[str, Running] = {}
        self.backoffs: dict[str, Backoff] = {}
        self.attempts: dict[str, int] = {}
        self.recent: deque[RunRecord] = deque(maxlen=20)
        self.queue: list[Issue] = []
        self.tick_count = 0
        self.next_tick = time.time()
        self.stopping = False
        #: Why dispatching is held back (a configuration problem every run would hit), if it is.
        self.blocked: str | None = None
        self.blocked_by: ConfigError | None = None
        self._config_seen = self._config_stamp()

    # -- events ----------------------------------------------------------------------------------------------------

    def emit(self, kind: str, issue: str | None = None, **data: Any) -> None:
        self._tell(WatchEvent(kind, issue, data))

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
            running.run_id = event.run_id
            if event.type == "activity":
                running.latest = str(event.data.get("latest", ""))
        self._tell(event)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            running=list(self.running.values()),
            queue=list(self.queue),
            backoffs=sorted(self.backoffs.values(), key=lambda b: b.due),
            recent=list(self.recent),
            tick=self.tick_count,
            next_tick=self.next_tick,
        )

    # -- the loop --------------------------------------------------------------------------------------------------

    async def watch(self, *, once: bool = False) -> list[RunRecord]:
        """Tick until cancelled (or, with ``once``, one tick and its runs). Runs are cancelled on the way out."""
        finished: list[RunRecord] = []
        async with anyio.create_task_group() as tasks:
            try:
                while True:
                    self.tick(tasks, finished)
                    if once:
                        await self._drain()
                        break
                    self.next_tick = time.time() + self.project.config.watch.interval
                    await anyio.sleep(self.project.config.watch.interval)
            except anyio.get_cancelled_exc_class():
                self.stopping = True
                self.emit("stopping", running=len(self.running))
                raise
        if once and self.blocked_by is not None:
            raise self.blocked_by  # a cron job must see it: exit 2, as `--auto` does
        return finished

    async def _drain(self) -> None:
        """``--once``: dispatch no more, wait for the runs, still reconciling every ``interval`` (a run whose issue is
        closed meanwhile is cancelled, as in a long watch)."""
        due = time.monotonic() + self.project.config.watch.interval
        while self.running:
            await anyio.sleep(0.1)
            if time.monotonic() >= due:
                due = time.monotonic() + self.project.config.watch.interval
                try:
                    self._reconcile()
                except BeflowError as error:
                    self.emit("error", message=error.message)

    def tick(self, tasks: anyio.abc.TaskGroup, finished: list[RunRecord]) -> None:
        self.tick_count += 1
        self._reload_config()
        try:
            store = RunStore(self.project.directory)
            store.close_orphans()
            for key in settle_orphans(self.tracker, store):
                self.emit("settled", key, reason="its run had finished; the issue now says so")
            for issue in self.tracker.requeue_orphans():
                self.emit("requeued", issue.key, reason="its run stopped without finishing")
            self._reconcile()
            if self._ready_to_dispatch():
                self._dispatch(tasks, finished)
        except BeflowError as error:
            self.emit("error", message=error.message)
        except OSError as error:  # a full disk, a permission gone: say so and try again next tick
            self.emit("error", message=f"{type(error).__name__}: {error}")

    def _ready_to_dispatch(self) -> bool:
        """Whether runs can start: a prompt or `.mcp.json` that would fail every run alike holds dispatching back
        (reported once, and again when the problem changes) instead of failing the issues one by one."""
        try:
            preflight.check(self.project)
        except ConfigError as error:
            self.blocked_by = error
            if error.message != self.blocked:
                self.blocked = error.message
                self.emit("error", message=f"not dispatching until this is fixed: {error.message}")
            return False
        self.blocked_by = None
        if self.blocked is not None:
            self.blocked = None
            self.emit("config_reloaded", path=str(self.project.config_path), message="dispatching again")
        return True

    def _config_stamp(self) -> tuple[float, int] | None:
        path = self.project.config_path
        try:
            stat = path.stat() if path else None
        except OSError:
            return None
        return (stat.st_mtime, stat.st_size) if stat else None

    def _reload_config(self) -> None:
        stamp = self._config_stamp()
        if stamp == self._config_seen:
            return
        self._config_seen = stamp
        try:
            project = load_project(self.config_option or self.project.config_path, cwd=self.project.directory)
            tracker = open_tracker(project)
        except BeflowError as error:
            self.emit("error", message=f"config not reloaded, keeping the last good one: {error.message}")
            return
        if project.config != self.project.config:
            self.project, self.tracker = project, tracker
            self.emit("config_reloaded", path=str(project.config_path))

    def _reconcile(self) -> None:
        for key, running in list(self.running.items()):
            if running.cancelling:
                continue
            # The tracker the run started with: a config change between ticks does not move a running issue.
            tracker = running.run.tracker if running.run is not None else self.tracker
            try:
                status = tracker.get(key).status
            except NotFoundError:
                status = None
            except BeflowError:
                continue  # unreadable for a moment (a hand edit, an editor's save): look again next tick
            if status is None or (status != Status.IN_PROGRESS and running.run_id is not None):
                reason = "the issue was removed" if status is None else f"the issue is now {status}"
                running.cancel(reason)
                self.emit("cancelled", key, reason=reason)

    def _dispatch(self, tasks: anyio.abc.TaskGroup, finished: list[RunRecord]) -> None:
        now = time.time()
        ready = [i for i in self.tracker.ready() if i.key not in self.running]
        self._recall([i.key for i in ready if i.key not in self.attempts])
        # The queue: what is ready and not backing off (those are shown apart, with their due time).
        self.queue = [i for i in ready if not (i.key in self.backoffs and self.backoffs[i.key].due > now)]
        free = self.project.config.watch.concurrency - len(self.running)
        for issue in list(self.queue):
            if free <= 0 or self.stopping:
                break
            self.backoffs.pop(issue.key, None)
            attempt = self.attempts.get(issue.key, 0) + 1
            running = Running(issue.key, attempt, anyio.CancelScope())
            self.running[issue.key] = running
            self.queue.remove(issue)
            free -= 1
            self.emit("dispatched", issue.key, attempt=attempt)
            tasks.start_soon(self._run, running, finished)

    def _recall(self, keys: list[str]) -> None:
        """Take up the retry count and backoff of issues this process has not run yet from their run records, so that
        a restarted watcher, another watcher, or ``--once`` from cron goes on counting where the last run stopped."""
        if not keys:
            return
        latest: dict[str, RunRecord] = {}
        for record in RunStore(self.project.directory).list():  # newest first
            if record.issue in keys and record.issue not in latest and record.outcome not in ("running", "cancelled"):
                latest[record.issue] = record
        watch = self.project.config.watch
        for key in keys:
            last = latest.get(key)
            # A run that gave up (its last attempt) and an issue that is ready again: a person reopened it, and it
            # gets a fresh round of attempts.
            if last is None or last.mode != "watch" or last.outcome not in FAILURES:
                self.attempts[key] = 0
                continue
            if last.attempt >= watch.max_attempts:
                self.attempts[key] = 0
                continue
            self.attempts[key] = last.attempt
            if last.attempt < watch.max_attempts and last.finished_at is not None:
                due = last.finished_at.timestamp() + backoff_delay(last.attempt, watch.backoff, watch.backoff_max)
                self.backoffs[key] = Backoff(key, last.attempt + 1, due, last.stop_reason or "")

    async def _run(self, running: Running, finished: list[RunRecord]) -> None:
        key, watch = running.key, self.project.config.watch
        request = RunRequest(
            key=key,
            mode="watch",
            attempt=running.attempt,
            final=running.attempt >= watch.max_attempts,
            only_if_ready=True,
        )
        run = Run(self.project, self.tracker, request, self._on_run_event)
        running.run = run
        record: RunRecord | None = None
        try:
            with running.scope:
                record = await run.execute()
        except LockedError as error:
            self.emit("skipped", key, reason=error.message)
        except BeflowError as error:
            self.emit("error", key, message=error.message)
        except Exception as error:  # one run's unexpected failure (a full disk, say) must not stop the watcher
            self.emit("error", key, message=f"{type(error).__name__}: {error}")
        except anyio.get_cancelled_exc_class():
            # The watch itself is stopping (a signal): the run has recorded itself cancelled; say so, then go on.
            if run.record is not None and run.record.finished:
                self._finished(run.record, finished)
            raise
        finally:
            self.running.pop(key, None)
        if record is None:
            record = run.record if run.record is not None and run.record.finished else None
            if record is None:
                return
        self._finished(record, finished)
        self._after(record, run.permanent)

    def _finished(self, record: RunRecord, finished: list[RunRecord]) -> None:
        finished.append(record)
        self.recent.appendleft(record)
        self.emit("finished", record.issue, run=record.id, outcome=record.outcome, reason=record.stop_reason)

    def _after(self, record: RunRecord, permanent: bool) -> None:
        key, watch = record.issue, self.project.config.watch
        if record.outcome in DONE_OUTCOMES:
            self.attempts[key] = 0
        elif record.outcome in FAILURES:
            self.attempts[key] = record.attempt
            if permanent:
                self.attempts.pop(key, None)  # a person who fixes the cause and reopens it starts a fresh round
                self.emit("failed", key, reason=f"not retried: {record.stop_reason}")
            elif record.attempt < watch.max_attempts:
                delay = backoff_delay(record.attempt, watch.backoff, watch.backoff_max)
                self.backoffs[key] = Backoff(key, record.attempt + 1, time.time() + delay, record.stop_reason or "")
                self.emit("retry_scheduled", key, attempt=record.attempt + 1, delay=delay)
            else:
                self.attempts.pop(key, None)  # reopened by a person, it gets a fresh round of attempts
                self.emit("failed", key, reason=f"gave up after {record.attempt} attempts")
