"""``beflow worker``: one machine's lanes in the fleet, and the activities that run issues on them.

A worker polls two task queues: the fleet's (``engine.task_queue``: the issues' workflows, and the claims of a
lane) and its own (:func:`~beflow.fleet.shapes.worker_queue`: the runs of the lanes it claimed). A lane's claim
succeeds only on a worker with a free lane, and names that worker's own queue; the run then goes there, so every
step after the worktree is made runs on the machine that holds the worktree. The run is exactly a ``watch`` run
(:class:`beflow.run.runner.Run`: record, tracker updates, delivery as today), or a best of N as a watch runs it
(:class:`beflow.run.attempts.BestOf`), its candidates in this worker's lanes (:class:`RunLanes`) and judged here;
it heartbeats while it lives, and the activity's cancellation (the workflow cancelled) becomes the run's own
cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.worker import (
    CustomSlotSupplier,
    FixedSizeSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
    Worker,
    WorkerTuner,
)

from beflow.agent.session import close_killed_runs, remove_left_worktrees
from beflow.codehosts.base import Opened
from beflow.config import Project
from beflow.errors import BeflowError, LockedError
from beflow.events import RunEvent, WatchEvent
from beflow.fleet.claims import fleet_claims
from beflow.fleet.remote import connect
from beflow.fleet.shapes import (
    CLAIM_LANE,
    RUN_ISSUE,
    WORKER_STOPPED,
    Lane,
    LaneRequest,
    RunEnd,
    RunInput,
    engine_of,
    worker_queue,
)
from beflow.fleet.workflow import IssueWorkflow
from beflow.ops import fixes, rounds
from beflow.records.record import RunRecord
from beflow.records.store import RunStore
from beflow.run.policy import after_run, is_final
from beflow.run.request import RunRequest
from beflow.system import threads
from beflow.trackers import Status
from beflow.watch import questions

#: Seconds a claimed lane waits for its run before it is free again (the run was never taken: its workflow was
#: cancelled, or timed the run out while waiting).
LANE_HOLD = 60.0

Listener = Callable[[WatchEvent | RunEvent], None]


def default_name() -> str:
    """A worker's name when none is given: its host and process."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class LaneHolds:
    """A worker's lanes: each held by one workflow, from its lane's claim to its run's end. Asked from the
    worker's event loop and from the SDK's threads (its slot supplier), hence the lock."""

    count: int
    #: workflow id → until when the lane waits for the run (``inf`` while the run runs).
    held: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: What to call when a lane may have become free (the slot supplier's waiters).
    on_free: Callable[[], None] = lambda: None
    #: Others to tell when a lane may have become free (the candidates of a best of N waiting for one: RunLanes).
    watchers: list[Callable[[], None]] = field(default_factory=list)

    def free_now(self, now: float) -> int:
        with self._lock:
            self._expire(now)
            return self.count - len(self.held)

    def take(self, workflow: str, now: float) -> bool:
        """Hold a lane for ``workflow`` (again, if it holds one); False: none is free."""
        with self._lock:
            self._expire(now)
            if workflow not in self.held and len(self.held) >= self.count:
                return False
            self.held[workflow] = max(self.held.get(workflow, 0.0), now + LANE_HOLD)
            return True

    def running(self, workflow: str) -> None:
        with self._lock:
            self.held[workflow] = float("inf")

    def watch(self, watcher: Callable[[], None]) -> None:
        with self._lock:
            self.watchers.append(watcher)

    def unwatch(self, watcher: Callable[[], None]) -> None:
        with self._lock:
            self.watchers.remove(watcher)

    def free(self, workflow: str) -> None:
        with self._lock:
            self.held.pop(workflow, None)
            watchers = list(self.watchers)
        self.on_free()
        for watcher in watchers:
            watcher()

    def _expire(self, now: float) -> None:
        for other, until in list(self.held.items()):
            if until < now:
                del self.held[other]


class RunLanes:
    """The lanes one best-of-N run lends its candidates (and its reviewer) on this worker: first the lane its
    workflow claimed, then any other lane free here, each held in :class:`LaneHolds` under an id of its own so that
    the worker claims no lane a candidate runs in. Lanes are alike: whichever is given back, the next entry takes
    it. Enter it as ``async with`` (:class:`beflow.run.attempts.BestOf`'s ``lanes``)."""

    def __init__(self, lanes: LaneHolds, workflow: str) -> None:
        self.lanes = lanes
        self.workflow = workflow
        self._own_free = True
        self._extra: list[str] = []
        self._made = 0
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._lock = threading.Lock()

    def _wake(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def _take(self) -> asyncio.Event | None:
        """A lane now (None), or the event set when one may have freed."""
        with self._lock:
            if self._own_free:
                self._own_free = False
                return None
            self._made += 1
            extra = f"{self.workflow}#lane{self._made}"
            if self.lanes.take(extra, time.monotonic()):
                self.lanes.running(extra)
                self._extra.append(extra)
                return None
            event = asyncio.Event()
            self._waiters.append((asyncio.get_running_loop(), event))
            return event

    async def __aenter__(self) -> None:
        self.lanes.watch(self._wake)
        try:
            while (event := self._take()) is not None:
                # A lane held for a run that never came frees by time alone: look again now and then.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), 1.0)
        finally:
            self.lanes.unwatch(self._wake)

    async def __aexit__(self, *exc: object) -> None:
        with self._lock:
            extra = self._extra.pop() if self._extra else None
            if extra is None:
                self._own_free = True
        if extra is not None:
            self.lanes.free(extra)  # (tells the worker's slots and the waiters here)
        else:
            self._wake()

    def release_all(self) -> None:
        """Give back every lane still lent (a run that ended without giving them back)."""
        with self._lock:
            extras, self._extra = self._extra, []
        for extra in extras:
            self.lanes.free(extra)


class LaneSlots(CustomSlotSupplier):
    """The activity slots of the fleet's queue on one worker: a slot is offered only while a lane is free, so the
    worker asks the service for a lane's claim only when it can grant one, and asks again the moment a lane frees
    (no claim waits on a busy worker, none is retried on a timer)."""

    def __init__(self, lanes: LaneHolds) -> None:
        self.lanes = lanes
        self.reserved = 0
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        lanes.on_free = self._wake

    def _wake(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def _try(self) -> bool:
        with self._lock:
            if self.lanes.free_now(time.monotonic()) - self.reserved > 0:
                self.reserved += 1
                return True
            return False

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        while not self._try():
            event = asyncio.Event()
            with self._lock:
                self._waiters.append((asyncio.get_running_loop(), event))
            # A lane held for a run that never came frees by time alone: look again now and then.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), 1.0)
        return SlotPermit()

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        return SlotPermit() if self._try() else None

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        pass

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        with self._lock:
            self.reserved = max(0, self.reserved - 1)
        self._wake()


def _why_cancelled(worker: str, details: activity.ActivityCancellationDetails | None) -> str:
    """Why a run activity was cancelled, for its record."""
    if details is not None and details.worker_shutdown:
        return f"worker {worker} stopped"
    if details is not None and details.cancel_requested:
        return "its workflow was cancelled"
    if details is not None and details.timed_out:
        return f"worker {worker} was not heard from in time: the run is taken up again"
    return f"worker {worker} lost its hold on the run (Temporal no longer knows it): the run is taken up again"


class FleetWorker:
    """The activities of one worker, on one project (the directory ``beflow worker`` was started in)."""

    def __init__(
        self, project: Project, opened: Opened, lanes: int, name: str, listener: Listener | None = None
    ) -> None:
        self.project = project
        #: One run of an issue at a time on this worker: an attempt Temporal gave up on (its heartbeats unheard while
        #: the service restarted) may still be ending here when the next one arrives; it waits for it.
        self._one_run: dict[str, asyncio.Lock] = {}
        self.settings = engine_of(project)
        self.name = name
        self.queue = worker_queue(self.settings.task_queue, name)
        self.lanes = LaneHolds(lanes)
        self.listener = listener
        self.tracker = opened.tracker
        self.code_host = opened.code_host

    def _tell(self, event: WatchEvent | RunEvent) -> None:
        if self.listener is not None:
            try:
                self.listener(event)
            except Exception:  # a display that is gone must not stop the runs
                self.listener = None

    @activity.defn(name=CLAIM_LANE)
    async def claim_lane(self, request: LaneRequest) -> Lane:
        """A lane of this worker for the workflow, or a failure that Temporal retries (on any worker)."""
        if not self.lanes.take(request.workflow_id, time.monotonic()):
            # Rare (a slot is offered only while a lane is free, LaneSlots) and benign: not worth a log line.
            raise ApplicationError(
                f"no free lane on {self.name}", type="NoFreeLane", category=ApplicationErrorCategory.BENIGN
            )
        return Lane(worker=self.name, queue=self.queue)

    @activity.defn(name=RUN_ISSUE)
    async def run_issue(self, run: RunInput) -> RunEnd:
        """The run, heartbeating; cancelled through the run's own cancellation when the workflow is."""
        self.lanes.running(run.workflow_id)
        scope = anyio.CancelScope()
        why: list[str] = []
        info = activity.info()
        work = asyncio.ensure_future(self._run(run, info, scope, lambda: why[0] if why else None))
        beat = asyncio.ensure_future(self._heartbeats(run))
        cancelled = stopping = False
        try:
            while not work.done():
                try:
                    await asyncio.shield(work)
                except asyncio.CancelledError:
                    if work.done():
                        break
                    # Temporal cancels the activity's task; the run must end its own way instead (the agent
                    # stopped, the managed file put back, the record closed): it is cancelled, then waited for.
                    cancelled = True
                    details = activity.cancellation_details()
                    # The workflow's cancellation is the service's request; anything else (this worker stopping,
                    # the run timed out or unknown to a restarted service) is not the issue's end: taken up again.
                    stopping = details is None or details.worker_shutdown or not details.cancel_requested
                    why.append(_why_cancelled(self.name, details))
                    scope.cancel()
        finally:
            beat.cancel()
            self.lanes.free(run.workflow_id)
        if cancelled:
            if stopping:
                # Not the workflow's cancellation: the run is taken up again on another worker. Benign: the record
                # says so already, and the SDK logs a benign failure at debug level, never with its traceback.
                raise ApplicationError(
                    f"{why[0]} (worker {self.name})", type=WORKER_STOPPED, category=ApplicationErrorCategory.BENIGN
                )
            raise asyncio.CancelledError
        return work.result()

    async def _heartbeats(self, run: RunInput) -> None:
        """Tell the service the run lives, a few times per heartbeat timeout (the SDK sends at most one per 0.8 of
        it); the details are the key and the worker's name, nothing of the run's content."""
        every = max(0.2, self.settings.heartbeat / 4)
        while True:
            activity.heartbeat(run.key, self.name)
            await asyncio.sleep(every)

    async def _run(
        self, run: RunInput, info: activity.Info, scope: anyio.CancelScope, because: Callable[[], str | None]
    ) -> RunEnd:
        """The run, once no other run of its issue is still ending on this worker (two would share its worktree)."""
        async with self._one_run.setdefault(run.key, asyncio.Lock()):
            return await self._run_alone(run, info, scope, because)

    async def _run_alone(
        self, run: RunInput, info: activity.Info, scope: anyio.CancelScope, because: Callable[[], str | None]
    ) -> RunEnd:
        from beflow.mcp.orphans import recover_orphans
        from beflow.run.runner import NoLongerReady

        project, watch = self.project, self.project.config.watch
        store = RunStore(project.directory)
        if run.resumed:  # a killed worker's run: its managed file put back, then its record closed (with what its
            # agent reported), its acpx queue owner stopped and its worktree removed unless it holds work
            await threads.blocking(recover_orphans)
            await threads.blocking(close_killed_runs, store)
        request = RunRequest(
            key=run.key,
            mode="watch",
            attempt=run.attempt,
            final=is_final(run.attempt, watch),
            only_if_ready=not run.resumed,
            owner=f"beflow worker {self.name}",
        )
        if run.answered:
            ended = await threads.blocking(self._answer, request, run.resumed)
            if ended is not None:
                return ended
        fixing = flagged = False
        if run.round:
            ended, flagged = await threads.blocking(self._round, request, run)
            if ended is not None:
                return ended
            fixing = any(fixes.is_check(piece) for piece in request.feedback)
        run_ids: list[str] = []

        def on_event(event: RunEvent) -> None:
            if not run_ids:
                run_ids.append(event.run_id)
            self._tell(event)

        claims = fleet_claims(self.tracker)
        record: RunRecord | None = None
        try:
            with scope:
                if claims is not None:
                    with claims.holding(run.key, run.workflow_id, claims.proof_of(run.key, info)):
                        record = await self._execute(project, request, on_event, because, run.workflow_id)
                else:
                    record = await self._execute(project, request, on_event, because, run.workflow_id)
        except (NoLongerReady, LockedError) as error:
            self._tell(WatchEvent.of("skipped", run.key, reason=error.message))
            return RunEnd(action="skipped", worker=self.name, awaits_feedback=await self._awaits_feedback(run.key))
        except BeflowError as error:  # closed, gone: nothing to run
            self._tell(WatchEvent.of("error", run.key, message=error.message))
            return RunEnd(action="skipped", worker=self.name)
        if record is None and run_ids:
            record = await threads.blocking(store.get, run_ids[0])
        if record is None:
            return RunEnd(action="nothing", worker=self.name)
        step = after_run(
            record.outcome, request.attempt, permanent=record.permanent, reason=record.stop_reason or "", watch=watch
        )
        return RunEnd(
            action=step.action,
            run_id=record.id,
            outcome=record.outcome,
            delay=step.delay,
            worker=self.name,
            awaits_feedback=step.action == "done" and await self._awaits_feedback(run.key),
            fix_round=fixing,
            flagged=flagged,
        )

    def _round(self, request: RunRequest, run: RunInput) -> tuple[RunEnd | None, bool]:
        """Review round ``run.round``'s feedback onto ``request``, read here (it never crosses Temporal); or how the
        round ends before it starts: nothing left to answer, or no more rounds (the cap, a merged pull request).
        Failed checks start at most ``feedback.max_fix_rounds`` rounds (the workflow's count, and this machine's
        records), then the issue is flagged: whether this plan flagged it comes second (the count starts again)."""
        found = rounds.sources_of(self.project.directory, self.tracker, self.code_host)
        planned = rounds.plan(
            self.project,
            found,
            request.key,
            number=run.round,
            issue_id=run.issue_id,
            tracker=self.tracker,
            fix_rounds=run.fix_rounds,
        )
        flagged = planned is not None and planned.flagged is not None
        if planned is not None and planned.flagged:
            self._tell(WatchEvent.of("skipped", request.key, reason=planned.flagged))
        if planned is None or not planned.pieces:
            return RunEnd(action="skipped", worker=self.name, awaits_feedback=True, flagged=flagged), flagged
        if planned.capped or planned.ended is not None:
            most = self.project.config.feedback.max_rounds
            rounds.note_end(self.tracker, request.key, planned, most)
            self._tell(WatchEvent.of("skipped", request.key, reason=rounds.end_reason(planned, most)))
            return RunEnd(action="done", worker=self.name), flagged
        request.round, request.feedback, request.ignored = planned.round, planned.pieces, planned.ignored
        return None, flagged

    def _answer(self, request: RunRequest, resumed: bool = False) -> RunEnd | None:
        """The answer to the issue's question onto ``request`` (its session resumed with it), read here; or, when
        there is none now (answered and resumed elsewhere, the issue moved on), the run that does not start.
        ``resumed``: the answered run's worker went silent; the run is taken up with the answer it had."""
        if resumed:
            again = questions.taken_up(self.project, request.key)
            if again is not None:
                questions.resume(request, self.project, *again)
            return None  # (no answer left to resume with: a plain run takes the issue up, as any run's)
        due = questions.answered(self.project, self.tracker, request.key)
        if due is None:
            self._tell(WatchEvent.of("skipped", request.key, reason="its agent's question waits for no answer now"))
            return RunEnd(action="skipped", worker=self.name)
        questions.resume(request, self.project, *due)
        return None

    async def _awaits_feedback(self, key: str) -> bool:
        """Whether the issue's work is in review (beflow's page, a source of feedback, is always there): its
        workflow waits for rounds."""
        try:
            return await threads.blocking(lambda: self.tracker.get(key).status == Status.REVIEW)
        except BeflowError:
            return False

    async def _execute(
        self,
        project: Project,
        request: RunRequest,
        on_event: Callable[[RunEvent], None],
        because: Callable[[], str | None],
        workflow: str,
    ) -> RunRecord:
        """The run of ``request``; ``workflow``: the id its lane is held under."""
        opened = Opened(self.tracker, self.code_host)
        return await run_or_best_of(project, opened, request, on_event, because, RunLanes(self.lanes, workflow))

    def sweep(self) -> list[tuple[str, str]]:
        """The worktrees runs on this machine left behind (a worker killed mid-run: its run went on elsewhere),
        removed when no run holds their issue now and nothing in them is unchecked, as the single-machine path
        removes them (:func:`~beflow.agent.session.close_killed_runs`); kept, and said, when something is (a
        person's to look at). Each (issue, what became of its worktree)."""
        from beflow.mcp.orphans import recover_orphans

        store = RunStore(self.project.directory)
        recover_orphans()  # a killed run's managed file, put back before anything reads its worktree
        left = {r.worktree: r.issue for r in store.records() if r.worktree and os.path.isdir(r.worktree)}
        close_killed_runs(store)
        if not left:
            return []
        claims = fleet_claims(self.tracker)
        held = claims.held(set(left.values())) if claims is not None else set(left.values())
        over = [r for r in store.records() if r.worktree in left and r.issue not in held]
        kept = remove_left_worktrees(store, over)
        said: list[tuple[str, str]] = []
        for path, key in left.items():
            why = kept.get(Path(path))
            if not os.path.isdir(path):
                said.append((key, f"removed {path}, left by an earlier run"))
            elif why is not None:
                said.append((key, f"kept {path}: {why}"))
        return said

    async def serve(self, ready: Callable[[], None] | None = None) -> None:
        """Poll the fleet's queue and this worker's own until cancelled (worktrees left behind swept first)."""
        client = await connect(self.settings)
        for key, what in await threads.blocking(self.sweep):
            self._tell(WatchEvent.of("swept", key, reason=what))
        shared = Worker(
            client,
            task_queue=self.settings.task_queue,
            workflows=[IssueWorkflow],
            activities=[self.claim_lane],
            identity=self.name,
            # A workflow's next task goes first to the worker that cached it; if that worker was killed, the task
            # waits this long before any worker takes it (the SDK's default, 10 s, on top of every fail-over). A
            # live worker polls at once; a task that waits longer is only replayed elsewhere, which is cheap.
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
            tuner=WorkerTuner.create_composite(
                workflow_supplier=FixedSizeSlotSupplier(100),
                activity_supplier=LaneSlots(self.lanes),
                local_activity_supplier=FixedSizeSlotSupplier(10),
                nexus_supplier=FixedSizeSlotSupplier(10),
            ),
        )
        own = Worker(
            client,
            task_queue=self.queue,
            activities=[self.run_issue],
            max_concurrent_activities=self.lanes.count,
            identity=self.name,
            # A worker that stops cancels its runs at once (each ends its own way: the agent stopped, files put
            # back, the record closed); their workflows take them up on another worker.
            graceful_shutdown_timeout=timedelta(0),
        )
        polling = [asyncio.ensure_future(worker.run()) for worker in (shared, own)]
        try:
            if ready is not None:
                ready()
            done, _ = await asyncio.wait(polling, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a worker that failed (the service gone for good) says why
        finally:
            # The shutdown itself must not be cut short by the cancellation that asked for it: the runs end first.
            with anyio.CancelScope(shield=True):
                await asyncio.gather(own.shutdown(), shared.shutdown(), return_exceptions=True)
                await asyncio.gather(*polling, return_exceptions=True)


async def run_or_best_of(
    project: Project,
    opened: Opened,
    request: RunRequest,
    on_event: Callable[[RunEvent], None],
    because: Callable[[], str | None],
    lanes: RunLanes,
) -> RunRecord:
    """The run of ``request`` on this worker, chosen and run as a watch does
    (:func:`beflow.run.attempts.run_issue`): a best of N when the issue asks for candidates, its candidates in
    ``lanes`` and judged here; else a plain run."""
    from beflow.run.attempts import run_issue

    try:
        return await run_issue(
            project,
            opened.tracker,
            request,
            on_event,
            code_host=opened.code_host,
            lanes=lanes,
            cancelled_because=because,
            candidate_events=on_event,
        )
    finally:
        lanes.release_all()
