"""``beflow watch`` on a fleet: ready issues become workflows; the workers run them.

Every tick (the first at once, then every ``watch.interval`` seconds, or sooner when the local tracker's files
change) the dispatcher settles and requeues orphans as the embedded watch does (an issue ``in_progress`` that no
running workflow holds), starts a workflow for every ready issue that no workflow holds, and cancels the workflow
of an issue closed or moved by hand. Feedback on the work of an issue in review (or put back with rework) is told
to its waiting workflow as a ``feedback`` signal (ids only, and when its round may start), which runs the round.
What the watch's survey decides the dispatcher decides the same way, through the same functions: an approved and
green pull request with no feedback waiting lands (beflow.watch.rounds), issues wait for their blockers
(beflow.watch.blocking), and a blocked issue a person answered gets its workflow again, its run resuming the
agent's session (beflow.watch.questions).
Starting an issue's workflow twice — two dispatchers, on two machines, at the
same moment — starts it once: its id names the tracker and the key, and Temporal keeps one running workflow per
id. So any number of dispatchers may run; none keeps state of its own between ticks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beflow.codehosts.base import Opened
from beflow.config import Project
from beflow.errors import BeflowError
from beflow.events import WatchEvent, WatchEventKind
from beflow.feedback import due_at, pending
from beflow.fleet.remote import Unreachable, connect
from beflow.fleet.shapes import (
    FEEDBACK,
    WORKFLOW,
    FeedbackSeen,
    IssueStart,
    engine_of,
    run_timeout,
    workflow_id,
)
from beflow.ops import rounds
from beflow.records.store import RunStore
from beflow.run.issue_status import requeue_orphans, settle_orphans
from beflow.run.request import branch_of
from beflow.system import threads
from beflow.trackers import Issue, Status, reading_once
from beflow.trackers.base import WatchesDirectories
from beflow.watch.blocking import BlockerHolds
from beflow.watch.handovers import HandOverHolds
from beflow.watch.hearing import hear
from beflow.watch.questions import WaitingQuestions
from beflow.watch.rounds import landed
from beflow.watch.wake import Wakeup, watch_directories

if TYPE_CHECKING:
    from temporalio.client import Client

Listener = Callable[[WatchEvent], None]

#: Statuses whose issue still wants its workflow (running, waiting for its next attempt, or in review: waiting for
#: feedback).
LIVE = (Status.READY, Status.IN_PROGRESS, Status.REVIEW)
#: Seconds an issue's workflow must be seen running with its issue moved on before it is cancelled.
MOVED_GRACE = 2.0


@dataclass
class Survey:
    """What one tick's look at the tracker found: the issues whose workflows start, and the feedback to tell."""

    ready: list[Issue] = field(default_factory=list)
    #: Blocked issues a person answered, each with its asking run's attempt (the one its resumed run is).
    answered: list[tuple[Issue, int]] = field(default_factory=list)
    feedback: dict[str, FeedbackSeen] = field(default_factory=dict)


class FleetDispatcher:
    """One dispatcher of a fleet (as many as wanted may run)."""

    def __init__(self, project: Project, opened: Opened, listener: Listener | None = None) -> None:
        self.project = project
        self.settings = engine_of(project)
        self.tracker = opened.tracker
        self.code_host = opened.code_host
        self.tracker_id = opened.tracker.identity
        self.listener = listener
        #: Workflows this dispatcher started (its own count; a start that joined another's is not one).
        self.started: list[str] = []
        #: Running workflows whose issue was seen moved on (closed, by hand), and since when.
        self._moved: dict[str, float] = {}
        #: The feedback ids this dispatcher told each issue's workflow of (a workflow ignores what it heard already;
        #: this keeps its history from growing by a signal a tick).
        self._told: dict[str, set[str]] = {}
        #: Ready issues held back until the issues they wait for are done (beflow.watch.blocking).
        self.blockers = BlockerHolds(self.emit)
        #: Ready issues beflow did not hand over, with ``triggers.label: false`` (beflow.watch.handovers).
        self.handovers = HandOverHolds(self.emit)
        #: Blocked issues: their agent's question answered (a workflow resumes it) or waited on past limits.wait.
        self.questions = WaitingQuestions(time.time, self.emit)

    def emit(self, kind: WatchEventKind, issue: str | None = None, **data: Any) -> None:
        if self.listener is not None:
            threads.on_the_loop(self.listener, WatchEvent.of(kind, issue, **data))

    async def watch(self, *, once: bool = False) -> list[str]:
        """Tick until cancelled (``once``: one tick); the keys whose workflows this dispatcher started."""
        import anyio
        from temporalio.service import RPCError

        client = await connect(self.settings)
        wakeup = Wakeup()
        async with anyio.create_task_group() as tasks:
            if not once:
                tasks.start_soon(watch_directories, self._watched, wakeup)
            while True:
                try:
                    await self.tick(client)
                except Unreachable as error:
                    if once:
                        raise
                    self.emit("error", message=error.message)  # the service restarts: try again next tick
                except RPCError as error:
                    if once:
                        raise Unreachable(f"Temporal at {self.settings.address}: {error.message}") from None
                    self.emit("error", message=f"Temporal at {self.settings.address}: {error.message}")
                if once:
                    tasks.cancel_scope.cancel()
                    break
                await wakeup.wait(self.project.config.watch.interval)
        return list(self.started)

    def _watched(self) -> list[Path]:
        return self.tracker.watched_directories() if isinstance(self.tracker, WatchesDirectories) else []

    async def tick(self, client: Client) -> None:
        survey = await threads.blocking(self._survey)
        for issue in survey.ready:  # (held by no workflow: one waiting in review runs its rounds itself)
            await self.start(client, issue.key, issue_id=issue.id)
        for issue, attempt in survey.answered:
            await self.start(client, issue.key, issue_id=issue.id, answered=attempt)
        for key, seen in survey.feedback.items():
            await self._tell(client, key, seen)
        await self._reconcile(client)

    def _survey(self) -> Survey:
        """Settle and requeue orphans; the ready issues, the blocked ones a person answered (those past
        ``limits.wait`` failed), and the unanswered feedback of the ready issues and of those in review (an
        approved and green pull request landed instead)."""
        try:
            with reading_once(self.tracker):
                store = RunStore(self.project.directory)
                for key in settle_orphans(self.tracker, store):
                    self.emit("settled", key, reason="its run had finished; the issue now says so")
                for issue in requeue_orphans(self.tracker):
                    self.emit("requeued", issue.key, reason="its run stopped without finishing")
                # An issue waiting for others starts no workflow until they are done (a `held` event says why).
                hear(self.project, self.tracker, self.emit)  # (mentions, assignments: labelled ready now)
                candidates = self.tracker.ready()
                handed = self.handovers.sift(self.project.config, self.tracker, candidates, free=len(candidates))
                ready = self.blockers.sift(self.tracker, handed, free=len(handed))
                # An issue put back with rework is ready but held: its workflow, waiting in review, runs its round.
                queued = self.tracker.listing(status=Status.READY).issues
                review = self.tracker.listing(status=Status.REVIEW).issues
                # (each listed blocked issue's question is the watch's to read: beflow.watch.questions)
                answered = self.questions.survey(self.project, self.tracker, ())
                due = [(issue, self.questions.attempt_of(issue.key) or 1) for issue in answered]
                return Survey(ready, due, self._feedback([*queued, *review]))
        except Unreachable:
            raise
        except BeflowError as error:
            self.emit("error", message=error.message)
        except OSError as error:
            self.emit("error", message=f"{type(error).__name__}: {error}")
        return Survey()

    def _feedback(self, issues: list[Issue]) -> dict[str, FeedbackSeen]:
        """What each issue's workflow is to hear of: the feedback no round on its branch answered, due when
        ``feedback.settle`` has passed since the latest piece (at once for an issue put back with rework). A merged
        pull request moves its issue to done, and so does landing one that is approved and green, when nothing on it
        waits for an answer (its workflow is then ended by :meth:`_reconcile`)."""
        found = rounds.sources_of(self.project.directory, self.tracker, self.code_host)
        config, told = self.project.config, dict[str, FeedbackSeen]()
        for issue in issues:
            branch = branch_of(self.project.directory, issue)
            gathered = rounds.gather(found, issue.key, branch)
            if gathered.ended is not None and issue.status == Status.REVIEW:
                planned = rounds.Plan(0, ended=gathered.ended)
                if rounds.note_end(self.tracker, issue.key, planned, config.feedback.max_rounds):
                    self.emit("skipped", issue.key, reason=f"no more review rounds: {rounds.end_reason(planned, 0)}")
                continue
            left = []  # (no feedback, nothing to hold against the branch: no git process for it)
            if gathered.pieces:
                done = rounds.answered(self.project.directory, issue.key, config.worktrees.base, issue_id=issue.id)
                left = pending(gathered.pieces, done)
            if not left:
                if issue.status == Status.REVIEW:
                    landed(self.project, self.tracker, self.code_host, issue.key, self.emit)
                continue
            due = due_at(left, 0.0 if issue.status == Status.READY else config.feedback.settle)
            if due is not None:
                told[issue.key] = FeedbackSeen(ids=[piece.id for piece in left], due=due.timestamp())
        return told

    async def _tell(self, client: Client, key: str, seen: FeedbackSeen) -> None:
        """Signal ``key``'s workflow of the feedback it was not told of yet (by this dispatcher)."""
        from temporalio.service import RPCError

        if set(seen.ids) <= self._told.get(key, set()):
            return
        try:
            await client.get_workflow_handle(workflow_id(self.tracker_id, key)).signal(FEEDBACK, seen)
        except RPCError:
            return  # no workflow waits (it ended: done, closed, its rounds capped): nothing starts a round
        self._told.setdefault(key, set()).update(seen.ids)
        self.emit("feedback", key, pieces=len(seen.ids))

    async def start(
        self, client: Client, key: str, *, issue_id: str | None = None, answered: int | None = None
    ) -> bool:
        """Start ``key``'s workflow; False: it runs already (this start joined it). ``answered``: the issue is blocked
        on its agent's question, answered: its run resumes that session, as the asking run's attempt."""
        from temporalio.common import WorkflowIDReusePolicy
        from temporalio.exceptions import WorkflowAlreadyStartedError

        start = IssueStart(
            key=key,
            heartbeat=self.settings.heartbeat,
            run_timeout=run_timeout(self.project),
            attempt=answered or 1,
            issue_id=issue_id,
            answered=answered is not None,
        )
        try:
            await client.start_workflow(
                WORKFLOW,
                start,
                id=workflow_id(self.tracker_id, key),
                task_queue=self.settings.task_queue,
                # An issue that is ready again after its workflow ended (requeued by hand) gets a new one.
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            return False
        self.started.append(key)
        self.emit("dispatched", key, attempt=start.attempt, workflow=workflow_id(self.tracker_id, key))
        return True

    async def _reconcile(self, client: Client) -> None:
        """Cancel the workflows of issues closed or moved by hand (their run stops, its files put back)."""
        from temporalio.service import RPCError

        prefix = workflow_id(self.tracker_id, "")
        query = f'WorkflowType = "{WORKFLOW}" AND ExecutionStatus = "Running"'
        running = [w.id async for w in client.list_workflows(query) if w.id.startswith(prefix)]
        now = time.monotonic()
        self._moved = {w: seen for w, seen in self._moved.items() if w in running}
        for workflow in running:
            key = workflow.removeprefix(prefix)
            try:
                status = await threads.blocking(lambda key=key: self.tracker.get(key).status)
            except BeflowError:
                continue  # unreadable for a moment: look again next tick
            if status in LIVE:
                self._moved.pop(workflow, None)
                continue
            # A run that ended moves its issue on itself, a moment before its workflow ends (and the list lags
            # behind that): only an issue seen moved on twice, MOVED_GRACE seconds apart, was moved by hand.
            first = self._moved.setdefault(workflow, now)
            if now - first >= MOVED_GRACE:
                try:
                    await client.get_workflow_handle(workflow).cancel()
                except RPCError:
                    continue  # it ended meanwhile (the list lags a little behind the workflows)
                del self._moved[workflow]
                self.emit("cancelled", key, reason=f"the issue is now {status}")
