"""Where a run moves its issue on the tracker: to ``in_progress`` as it starts, on from there as it ends (unless a
person moved it meanwhile), and the issues runs left ``in_progress`` behind — settled with their finished run's
status, or put back to ``ready`` for a run to pick up again."""

from __future__ import annotations

from typing import NamedTuple

from beflow.errors import BeflowError, LockedError
from beflow.ops.questions import question_comment
from beflow.records.record import DONE_OUTCOMES
from beflow.records.store import RunStore
from beflow.run.policy import status_after
from beflow.run.summary import summary
from beflow.trackers import Issue, Status, Tracker, handovers


def move_to_in_progress(tracker: Tracker, issue: Issue, note: str | None = None) -> None:
    """The tracker says a run works on the issue (through ``ready`` when it cannot go there directly)."""
    if issue.status in (Status.OPEN, Status.FAILED, Status.DONE):
        tracker.set_status(issue.key, Status.READY, author="beflow")
    tracker.set_status(issue.key, Status.IN_PROGRESS, note=note, author="beflow")


def leave_issue(tracker: Tracker, key: str, status: Status, note: str | None, handing: str | None = None) -> bool:
    """Move the issue on from ``in_progress`` with ``note`` as a comment; False (nothing done) when someone moved it
    by hand during the run (closed it, say) — theirs is the last word — or it cannot be read any more (deleted,
    broken by a hand edit): the run record still says how the run ended. ``handing``: the issue goes back to
    ``ready`` for a run to take again, handed over by beflow for that reason (its mark, before the label)."""
    try:
        if tracker.get(key).status != Status.IN_PROGRESS:
            return False
        if handing is not None:
            handovers.mark(tracker, key, handing)
        tracker.set_status(key, status, note=note, author="beflow")
    except BeflowError:  # moved between the look and the write, or unreadable
        return False
    return True


class Unreported(NamedTuple):
    """What the tracker was not told of a finished run, and when it will be."""

    why: str
    later: str = "the next beflow run or watch tick brings the issue up to date"


def leave_finished(tracker: Tracker, key: str, status: Status, note: str | None, *, run_id: str) -> Unreported | None:
    """Move a finished run's issue on from ``in_progress`` to ``status`` with ``note`` (through ``ready`` to
    ``open``, which ``in_progress`` cannot reach directly): None when the tracker has the last word, or a person
    moved the issue meanwhile (theirs is the last word); else what the tracker is missing."""
    if status == Status.OPEN:
        left = leave_issue(tracker, key, Status.READY, note)
        if left:
            tracker.set_status(key, Status.OPEN, author="beflow")
    else:
        again = "its run is to be tried again" if status == Status.READY else None
        left = leave_issue(tracker, key, status, note, handing=again)
    if left:
        return None
    try:
        now_status = tracker.get(key).status  # moved by hand (closed, say): theirs is the last word
    except BeflowError as error:
        return Unreported(f"the issue could not be updated ({error.message})")
    if now_status == Status.IN_PROGRESS:  # still ours: the tracker failed past every retry
        return Unreported("the tracker was not told how the run ended (it failed to answer)")
    if note and now_status == status:  # moved, but its comment was not posted
        return Unreported(
            "the comment saying how the run ended could not be posted",
            later=f"it is in the run record (beflow runs show {run_id})",
        )
    return None


def refuse_closed(issue: Issue) -> None:
    """A closed issue is not run in any mode: reopen it first."""
    if issue.status == Status.CLOSED:
        raise BeflowError(f"issue {issue.key} is closed", fix=f"beflow issues reopen {issue.key}")


def settle_orphans(tracker: Tracker, store: RunStore) -> list[str]:
    """Issues left ``in_progress`` by a run that finished its work (or asked a question) but could not tell the
    tracker (the issue file was unreadable at that moment, beflow was killed): they get the status and comment the
    run would have given them, instead of being run again. Runs that did not finish are left to
    :func:`requeue_orphans`."""
    settled: list[str] = []
    orphaned = tracker.orphaned()
    if not orphaned:
        return settled
    records = store.records([issue.key for issue in orphaned])
    for issue in orphaned:
        # (best of N's candidates and reviewer are not the issue's word: their judged run is)
        latest = next((r for r in records if r.issue == issue.key and not (r.set_of or r.candidate)), None)
        asked = latest is not None and latest.outcome == "asked" and latest.question is not None
        if latest is None or (latest.outcome not in DONE_OUTCOMES and not asked):
            continue
        try:
            claim = tracker.claim(issue.key, owner="beflow (settling a finished run)")
        except BeflowError:
            continue  # a run has it now
        with claim:
            note = summary(latest, inert=tracker.inert)
            if asked:  # its agent's question, put as the run would have put it: the issue waits for the answer
                assert latest.question is not None
                note = question_comment(issue.key, latest.question, latest.id, tracker.inert, judge=latest.best_of > 0)
            if leave_issue(tracker, issue.key, status_after(latest.outcome), note):
                settled.append(issue.key)
    return settled


def requeue_orphans(tracker: Tracker, author: str = "beflow") -> list[Issue]:
    """Put every issue a killed run left ``in_progress`` (no live claim) back to ``ready``, with a comment saying
    why, so that a run picks it up again; returns them. (Call :func:`settle_orphans` first: an issue whose run had
    finished gets that run's status instead.)"""
    requeued = []
    for issue in tracker.orphaned():
        last = tracker.last_holder(issue.key)  # the dead holder's note, if it left one
        try:
            claim = tracker.claim(issue.key, owner=f"{author} (requeue)")
        except LockedError:
            continue  # a run took it in the meantime
        with claim:
            if tracker.get(issue.key).status != Status.IN_PROGRESS:
                continue
            who = f" (it was claimed by {last.owner}, pid {last.pid} on {last.host})" if last else ""
            note = (
                f"The run working on this issue stopped without finishing{who}: no process holds its claim "
                "any more. Back to ready, so that a run picks it up again."
            )
            handovers.mark(tracker, issue.key, "its run stopped without finishing")
            requeued.append(tracker.set_status(issue.key, Status.READY, note=note, author=author))
    return requeued
