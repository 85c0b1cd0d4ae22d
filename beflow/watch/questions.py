"""A watch's blocked issues (docs/questions.md): each waits on its agent's question, and is looked at once a tick —
answered by a trusted person, it is queued and its run resumes the agent's session with the answer; unanswered
after ``limits.wait``, it fails, saying so. No run is live while a question waits (no stall, no timeout: no turn)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection

from beflow.config import Project
from beflow.errors import BeflowError
from beflow.ops import questions
from beflow.records.record import Answer, RunRecord
from beflow.records.store import RunStore
from beflow.run.request import RunRequest
from beflow.trackers import Issue, Status, Tracker


class WaitingQuestions:
    """The answered questions due a run (by issue): the answer, and the run that asked."""

    def __init__(self, clock: Callable[[], float], emit: Callable[..., None]) -> None:
        self.clock = clock
        self.emit = emit
        self.due: dict[str, tuple[Answer, RunRecord]] = {}

    def survey(self, project: Project, tracker: Tracker, running: Collection[str]) -> list[Issue]:
        """The blocked issues (not running) a person answered: their run is due (blocking: a tick's survey, in a
        worker thread). One listing of the blocked issues a tick, and one read of each (its comments); an issue
        blocked by hand, whose latest run asked nothing, is left as it is."""
        self.due = {key: due for key, due in self.due.items() if key in running}  # (being dispatched)
        store, queued = RunStore(project.directory), []
        now = dt.datetime.fromtimestamp(self.clock(), dt.UTC)
        for listed in tracker.listing(status=Status.BLOCKED).issues:
            key = listed.key
            if key in running:
                continue
            asking = questions.waiting(store, key)
            if asking is None:
                continue
            try:
                issue = tracker.get(key)
                answer = questions.answer_of(tracker, issue, asking)
                if answer is not None:
                    self.due[key] = (answer, asking)
                    queued.append(issue)
                    continue
                expires = questions.deadline(asking, project.config.limits.wait)
                if expires is not None and now >= expires:
                    note = questions.give_up_note(asking, project.config.limits.wait)
                    tracker.set_status(key, Status.FAILED, note=note, author=questions.BEFLOW)
                    self.emit("failed", key, reason="its agent's question was not answered within limits.wait")
            except BeflowError as error:
                self.emit("error", key, message=f"reading the answer on issue {key} failed: {error.message}")
        return queued

    def attempt_of(self, key: str) -> int | None:
        """The attempt an answered issue's run is (its asking run's), if its answer is due."""
        due = self.due.get(key)
        return None if due is None else due[1].attempt

    def shape(self, request: RunRequest, project: Project) -> bool:
        """Make ``request`` the run that resumes an answered question's session, if its issue's is due; whether it
        is. It is the asking run's attempt again: a question spends no attempt."""
        due = self.due.pop(request.key, None)
        if due is None:
            return False
        resume(request, project, *due)
        return True


def resume(request: RunRequest, project: Project, answer: Answer, asking: RunRecord) -> None:
    """Make ``request`` the run that resumes the session of ``asking`` with ``answer``: the asking run's attempt
    again (a question spends no attempt)."""
    request.answer, request.question, request.attempt = answer, asking.question, asking.attempt
    request.final = asking.attempt >= project.config.watch.max_attempts


def answered(project: Project, tracker: Tracker, key: str) -> tuple[Answer, RunRecord] | None:
    """The answer issue ``key``'s blocked question has now, and the run that asked (a fleet's worker reads it
    itself when its run starts: answers never cross Temporal); None: it is not blocked on a question, or nobody
    answered (blocking)."""
    issue = tracker.get(key)
    asking = questions.waiting(RunStore(project.directory), issue.key) if issue.status == Status.BLOCKED else None
    answer = questions.answer_of(tracker, issue, asking) if asking is not None else None
    return None if answer is None or asking is None else (answer, asking)


def taken_up(project: Project, key: str) -> tuple[Answer, RunRecord] | None:
    """The answer the latest run of issue ``key`` was resuming the agent's session with, and the run that asked,
    when that run stopped unfinished (its worker killed: a fleet takes it up again with the same answer, the issue
    no longer ``blocked``); None: it resumed no question."""
    store = RunStore(project.directory)
    latest = next(iter(store.records([key], limit=1)), None)
    if latest is None or latest.answer is None or latest.outcome != "cancelled":
        return None
    try:
        return latest.answer, store.get(latest.answer.run)
    except BeflowError:
        return None  # (the asking run's record is gone: a plain run takes the issue up)
