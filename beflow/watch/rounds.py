"""A watch's review rounds: which issues in review have feedback that settled, and which round each dispatched
issue runs (the decisions are :mod:`beflow.ops.rounds`'; this keeps what a watch remembers between ticks)."""

from __future__ import annotations

from collections.abc import Callable, Collection

from beflow.codehosts.base import CodeHost
from beflow.config import Project
from beflow.errors import BeflowError
from beflow.events import WatchEmit
from beflow.feedback import FeedbackSource, LooksAgain
from beflow.ops import landing, rounds
from beflow.records.store import RunStore
from beflow.run.request import RunRequest
from beflow.system import threads
from beflow.trackers import Issue, Status, Tracker


class ReviewRounds:
    """The rounds due (by issue) and when the next round waiting for its feedback to settle may start."""

    def __init__(self, clock: Callable[[], float], emit: Callable[..., None]) -> None:
        self.clock = clock
        self.emit = emit
        self.due: dict[str, rounds.Plan] = {}
        #: Issue → when its feedback will have settled (seconds since the epoch): the watch wakes then.
        self.settling: dict[str, float] = {}

    def look_again(self, tracker: Tracker, code_host: CodeHost | None) -> None:
        """A person asked to look now (the dashboard's refresh): the next survey reads every source's feedback
        afresh, however recently it was read."""
        for source in rounds.sources(tracker, code_host):
            if isinstance(source, LooksAgain):
                source.look_again()

    def survey(
        self,
        project: Project,
        tracker: Tracker,
        code_host: CodeHost | None,
        running: Collection[str],
        ready: list[Issue],
    ) -> list[Issue]:
        """The issues in review (not running) whose feedback settled: their round is due, one per batch of
        feedback; and the round each ready issue of the queue (``ready``: put back with rework, a round's retry)
        runs, if it is one (blocking: a tick's survey, in a worker thread). A merged pull request moves its issue to
        done; an issue whose rounds ended (closed, ``feedback.max_rounds``) is told so once."""
        page = rounds.page_reviews(project.directory, code_host)
        others = rounds.sources(tracker, code_host)
        found, store = rounds.sources(*others, page), RunStore(project.directory)
        due = {key: planned for key, planned in list(self.due.items()) if key in running}  # (being dispatched)
        self.due, self.settling = due, {}
        # With the page's reviews the only source, beflow's own files say which issues have a comment waiting: those
        # alone are surveyed (not every issue in review, asked of the tracker, on every tick).
        only = None if others else page.waiting()
        if not found or only == set():
            return []
        for issue in ready:
            if only is not None and issue.key not in only:
                continue
            planned = self._plan(project, tracker, found, issue.key, store, issue.id)
            if planned is not None and planned.startable:
                self.due[issue.key] = planned  # queued already: no settle wait
        now, config = self.clock(), project.config.feedback
        queued: list[Issue] = []
        for issue in tracker.listing(status=Status.REVIEW).issues if only is None else _in_review(tracker, only):
            key = issue.key
            planned = None if key in running else self._plan(project, tracker, found, key, store, issue.id)
            # Feedback nobody answered yet (a mention, a failed check) holds the landing back: its round comes first.
            quiet = planned is None or (planned.ended is None and not planned.pieces)
            if key not in running and quiet and landed(project, tracker, code_host, key, self.emit):
                continue
            if planned is None:
                continue
            if planned.ended is not None or (planned.capped and planned.pieces):
                if rounds.note_end(tracker, key, planned, config.max_rounds):
                    why = rounds.end_reason(planned, config.max_rounds)
                    self.emit("skipped", key, reason=f"no more review rounds: {why}")
                continue
            if not planned.startable or planned.due is None:
                continue
            if planned.due.timestamp() > now:
                self.settling[key] = planned.due.timestamp()  # reviewers batch their comments: wait for the rest
                continue
            self.due[key] = planned
            queued.append(issue)
        return queued

    def _plan(
        self,
        project: Project,
        tracker: Tracker,
        found: list[FeedbackSource],
        key: str,
        store: RunStore,
        issue_id: str | None,
    ) -> rounds.Plan | None:
        try:
            planned = rounds.plan(project, found, key, store, issue_id=issue_id, tracker=tracker)
        except BeflowError as error:
            self.emit("error", key, message=f"reading the feedback on issue {key} failed: {error.message}")
            return None
        if planned is not None and planned.flagged:
            self.emit("skipped", key, reason=planned.flagged)
        return planned

    def round_of(self, key: str) -> int:
        planned = self.due.get(key)
        return planned.round if planned is not None else 0

    async def shape(
        self,
        request: RunRequest,
        project: Project,
        tracker: Tracker,
        code_host: CodeHost | None,
        *,
        issue_id: str | None = None,
    ) -> int:
        """Make ``request`` the round a dispatched issue runs, if it is one; its number (0: none). The round its
        review feedback queued, or, for a ready issue (put back in the queue with rework, a round's retry, a round a
        killed watcher left), the one its unanswered feedback makes now (no settle wait: it was queued already)."""
        key = request.key
        planned = self.due.pop(key, None)
        if planned is None:
            found = rounds.sources_of(project.directory, tracker, code_host)
            try:
                planned = (
                    await threads.blocking(rounds.plan, project, found, key, issue_id=issue_id, tracker=tracker)
                    if found
                    else None
                )
            except BeflowError as error:
                self.emit("error", key, message=f"reading the feedback on issue {key} failed: {error.message}")
                planned = None
        if planned is None or not planned.startable:
            return 0
        request.round, request.feedback, request.ignored = planned.round, planned.pieces, planned.ignored
        return planned.round


def landed(project: Project, tracker: Tracker, code_host: CodeHost | None, key: str, emit: WatchEmit) -> bool:
    """Land the issue's pull request if ``after_review.merge`` asks and it is approved and green (a watch's survey
    and a fleet's dispatcher alike: blocking), saying so through ``emit``; whether it landed."""
    try:
        said = landing.land(tracker, code_host, key, project.config.after_review)
    except BeflowError as error:
        emit("error", key, message=f"landing the pull request of issue {key} failed: {error.message}")
        return False
    if said is None:
        return False
    emit("landed", key, reason=said)
    return True


def _in_review(tracker: Tracker, keys: set[str]) -> list[Issue]:
    """Those of the issues ``keys`` the tracker has in review (one gone since is left out)."""
    found = []
    for key in sorted(keys):
        try:
            issue = tracker.get(key)
        except BeflowError:
            continue
        if issue.status == Status.REVIEW:
            found.append(issue)
    return found
