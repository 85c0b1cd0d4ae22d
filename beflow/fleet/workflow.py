"""The issue's workflow: one per issue, from its first dispatch to its last run.

Deterministic (Temporal replays it from its history): it decides nothing of its own but which activity comes
next; how a run ended and what follows (retry, give up) is the worker's call through :mod:`beflow.run.policy`, and
comes back in :class:`~beflow.fleet.shapes.RunEnd`.

claim a lane (any worker with a free one) → the run on that worker's own queue (heartbeating) → done; or a
durable timer and the next attempt; or, when the worker went silent (killed, cut off), the same attempt again on
another worker. Cancelling the workflow cancels the running activity, which stops the agent through the run's own
cancellation (the managed file restored, the record closed ``cancelled``).

A run that leaves the issue in review (its pull request open, a source of feedback) does not end the workflow: it
continues as new (its history starts afresh, bounded) and waits for ``feedback`` signals from the dispatchers —
ids only — then for the feedback to settle (a durable timer), and runs the next review round the same way. It ends
when a run leaves the issue done or closed, or when it is cancelled while it waits (the issue done or closed:
the dispatcher's call).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutError, TimeoutType
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from dataclasses import replace

    from beflow.fleet.shapes import (
        CLAIM_LANE,
        FEEDBACK,
        MAX_RESUMES,
        RUN_ISSUE,
        STATE,
        WORKER_STOPPED,
        WORKFLOW,
        FeedbackSeen,
        IssueEnd,
        IssueStart,
        IssueState,
        Lane,
        LaneRequest,
        RunEnd,
        RunInput,
    )

#: A worker polls for lane claims only while it has a free lane (beflow.fleet.worker.LaneSlots); a claim that
#: finds its lane taken after all (a rare race) fails at once and is tried again, on whichever worker polls.
LANE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), backoff_coefficient=1.5, maximum_interval=timedelta(seconds=2)
)
#: A run is never retried by the service: its queue is its worker's, which may be gone. The workflow claims a lane
#: again instead.
RUN_ONCE = RetryPolicy(maximum_attempts=1)


@workflow.defn(name=WORKFLOW)
class IssueWorkflow:
    def __init__(self) -> None:
        self._state = IssueState(key="")
        self._due = 0.0

    @workflow.query(name=STATE)
    def state(self) -> IssueState:
        """Where the issue's work is: its phase, attempt, round, worker, latest run and the feedback heard of."""
        return self._state

    @workflow.signal(name=FEEDBACK)
    def feedback(self, seen: FeedbackSeen) -> None:
        """Feedback on the issue's work: the ids not heard of yet are the next round's (two dispatchers telling the
        same feedback start one round)."""
        state = self._state
        new = [i for i in seen.ids if i not in state.seen]
        if new:
            state.seen.extend(new)
            self._due = max(self._due, seen.due)

    @workflow.run
    async def run(self, start: IssueStart) -> IssueEnd:
        # A signal sent as the run began (just after the previous one continued as new) is handled before this
        # method starts: what it told is kept, not replaced.
        early, early_due = self._state.seen, self._due
        state = self._state = IssueState(
            key=start.key,
            attempt=start.attempt,
            round=start.round,
            run_id=start.run_id,
            outcome=start.outcome,
            worker=start.worker,
        )
        state.seen = list(dict.fromkeys([*start.handled, *start.pending, *early]))
        self._due = max(start.due, early_due)
        handled = list(start.handled)
        number = start.round
        if start.review:
            state.phase = "in review"
            try:
                await workflow.wait_condition(lambda: len(state.seen) > len(handled))
                while (left := self._due - workflow.now().timestamp()) > 0:
                    state.phase = "feedback settling"  # reviewers batch their comments: the rest may come
                    await workflow.sleep(left)
            except asyncio.CancelledError:  # the issue is done or closed: the dispatcher ended its review
                state.phase = "ended"
                return IssueEnd(key=start.key, action="done", outcome=None, run_id=None, attempts=0, round=number)
            number = state.round = number + 1
            state.attempt = 1
            handled = list(state.seen)
        end = await self._runs(start, number)
        # (counted here, not from run records: a round's record stays on the worker that ran it)
        fix_rounds = 0 if end.flagged else start.fix_rounds + int(end.fix_round)
        if end.action == "skipped" and start.review:
            number = start.round  # the feedback was answered meanwhile (another machine's round): no round ran
        if end.action in ("done", "skipped") and end.awaits_feedback:
            state.phase = "in review"
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(
                replace(
                    start,
                    attempt=1,
                    round=number,
                    review=True,
                    answered=False,
                    fix_rounds=fix_rounds,
                    handled=handled,
                    pending=[i for i in state.seen if i not in handled],
                    due=self._due,
                    run_id=state.run_id,
                    outcome=state.outcome,
                    worker=state.worker,
                )
            )
        state.phase = "ended"
        return IssueEnd(
            key=start.key,
            action=end.action,
            outcome=end.outcome,
            run_id=end.run_id,
            attempts=state.attempt,
            worker=end.worker,
            round=number,
        )

    async def _runs(self, start: IssueStart, number: int) -> RunEnd:
        """The run (the first, or review round ``number``) to its end: a lane, the run on its worker, its retries
        after durable timers, and the same attempt again elsewhere when its worker went silent."""
        state, info = self._state, workflow.info()
        resumed = False
        while True:
            state.phase = "waiting for a lane"
            lane = await workflow.execute_activity(
                CLAIM_LANE,
                LaneRequest(key=start.key, workflow_id=info.workflow_id),
                result_type=Lane,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=LANE_RETRY,
            )
            state.phase, state.worker = "running", lane.worker
            try:
                end: RunEnd = await workflow.execute_activity(
                    RUN_ISSUE,
                    RunInput(
                        key=start.key,
                        workflow_id=info.workflow_id,
                        attempt=state.attempt,
                        resumed=resumed,
                        round=number,
                        issue_id=start.issue_id,
                        # (a retry of the resumed run is a run of its own, not the answer again)
                        answered=start.answered and not number and state.attempt == start.attempt,
                        fix_rounds=start.fix_rounds,
                    ),
                    result_type=RunEnd,
                    task_queue=lane.queue,
                    # The lane is held for this run: a worker that died before it took the run frees it soon.
                    schedule_to_start_timeout=timedelta(seconds=max(start.heartbeat, 10.0)),
                    start_to_close_timeout=timedelta(seconds=start.run_timeout),
                    heartbeat_timeout=timedelta(seconds=start.heartbeat),
                    retry_policy=RUN_ONCE,
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
            except ActivityError as error:
                if isinstance(error.cause, CancelledError):
                    raise asyncio.CancelledError from error  # the workflow was cancelled: it ends cancelled
                stopped = isinstance(error.cause, ApplicationError) and error.cause.type == WORKER_STOPPED
                if not (stopped or isinstance(error.cause, TimeoutError)) or state.resumes >= MAX_RESUMES:
                    raise
                # The worker went silent (killed, cut off from the service), was stopped, or never took the run:
                # the same attempt, on whichever worker has a lane; taken up as in progress if it had started.
                state.resumes += 1
                cause = error.cause
                resumed = resumed or not (
                    isinstance(cause, TimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START
                )
                continue
            state.run_id, state.outcome = end.run_id, end.outcome
            if end.action == "retry":
                state.phase = "backing off"
                await workflow.sleep(timedelta(seconds=end.delay))  # a durable timer: it outlives every process
                state.attempt += 1
                resumed = False
                continue
            return end
