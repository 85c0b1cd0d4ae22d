"""``beflow --auto``: the named issues, or every ready issue once, each an unattended run
(:class:`beflow.run.runner.Run`).

Before any agent runs: the pre-flight checks, the code host (where to push is read now), killed runs closed, orphans
settled and put back; unknown keys fail, and a key named twice runs once. Picked issues that wait for others
(blockers) are left for later; a named one runs. Unanswered feedback on an issue's work
makes its run a review round at once (no settle wait).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from beflow.agent.session import close_killed_runs
from beflow.codehosts.base import CodeHost
from beflow.config import Project
from beflow.errors import BeflowError, LockedError, UsageError
from beflow.events import EventSink
from beflow.ops import rounds
from beflow.records.record import Mode, RunRecord
from beflow.records.store import RunStore
from beflow.run import preflight
from beflow.run.attempts import BestOf
from beflow.run.candidates import candidates_for
from beflow.run.issue_status import requeue_orphans, settle_orphans
from beflow.run.request import RunRequest
from beflow.run.runner import NoLongerReady, Run
from beflow.system import threads
from beflow.trackers import Tracker, handovers, reading_once
from beflow.trackers.base import ChecksSetup, KnowsBlockers
from beflow.trackers.blockers import held_by


async def run_many(
    project: Project,
    tracker: Tracker,
    keys: list[str],
    *,
    limit: int | None = None,
    concurrency: int = 1,
    opens_code_host: Callable[[Project, Tracker], CodeHost | None],
    events: EventSink | None = None,
    mode: Mode = "auto",
    attempts: int | None = None,
) -> list[RunRecord]:
    """Run the named issues, or every ready issue once, ``concurrency`` at a time; ``opens_code_host``: how the
    project's code host is opened (:func:`beflow.app.open_code_host`); ``attempts``: candidates per issue (best of
    N, :mod:`beflow.run.attempts`; None: as the config and the issue's label say)."""
    if attempts is not None and attempts > project.config.attempts.max:  # before anything runs
        raise UsageError(f"--attempts {attempts} is more than attempts.max ({project.config.attempts.max})")
    preflight.check(project)
    if isinstance(tracker, ChecksSetup):
        tracker.check_setup()  # (a workflow without a transition beflow takes: no run starts)
    code_host = opens_code_host(project, tracker)  # before any agent runs: where to push is read now
    found = rounds.sources_of(project.directory, tracker, code_host)
    picked = not keys
    store = RunStore(project.directory)
    close_killed_runs(store)
    with reading_once(tracker):  # one scan of the tracker for all of this
        settle_orphans(tracker, store)
        if picked:
            requeue_orphans(tracker)
            # An issue waiting for others is left for later (`beflow issues list` says why); one named runs.
            ready = tracker.ready()
            if (marks := handovers.marking(project.config, tracker)) is not None:  # (only what beflow handed over)
                ready = [issue for issue in ready if marks.unhanded(issue) is None]
            if isinstance(tracker, KnowsBlockers):
                ready = [issue for issue in ready if held_by(tracker.blockers(issue)) is None]
            issues = {issue.key: issue for issue in ready}
        else:
            # Unknown keys fail before anything runs; a key named twice runs once.
            issues = {issue.key: issue for issue in map(tracker.get, keys)}
        keys = list(issues)
    if limit is not None:
        keys = keys[:limit]
    records: list[RunRecord] = []
    refused: list[BeflowError] = []
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(key: str) -> None:
        request = RunRequest(key=key, mode=mode, only_if_ready=picked)
        try:
            # Best of N: the candidates take a lane each (at least as many as they are), the judged run none.
            count, notice = counts[key]
            if count > 1:
                limiter.total_tokens = max(limiter.total_tokens, count)
                best = BestOf(project, tracker, request, count, events, code_host=code_host, lanes=limiter)
                records.append(await best.execute(notice))
                return
            async with limiter:
                # Unanswered feedback on an issue's work makes its run a review round, at once (no settle wait).
                planned = await threads.blocking(
                    rounds.plan, project, found, key, issue_id=issues[key].id, tracker=tracker
                )
                if planned is not None and planned.pieces:
                    if planned.capped or planned.ended is not None:
                        most = project.config.feedback.max_rounds
                        await threads.blocking(rounds.note_end, tracker, key, planned, most)
                        raise rounds.RoundsEnded(rounds.end_reason(planned, most))
                    request.round, request.feedback, request.ignored = planned.round, planned.pieces, planned.ignored
                records.append(await Run(project, tracker, request, events, code_host=code_host).execute())
        except NoLongerReady:
            pass  # another beflow ran it meanwhile: nothing to do here
        except LockedError as error:
            if not picked:
                refused.append(error)  # named by the user: say that someone else has it
            # picked from the ready list: another beflow is running it, which is what the user wants
        except BeflowError as error:  # closed, claimed by another run: the other issues still run
            refused.append(error)

    # How many candidates each issue gets, before any starts: the runs then take their lanes in the queue's order.
    counts = await threads.blocking(lambda: {key: candidates_for(project, issues[key], attempts) for key in keys})
    async with anyio.create_task_group() as tasks:
        for key in keys:
            tasks.start_soon(one, key)
    if len(refused) == 1:
        raise refused[0]
    if refused:
        raise BeflowError("; ".join(e.message for e in refused), fix=refused[0].fix)
    return records
