"""Issues a watch holds back because they wait for others (:class:`~beflow.trackers.base.KnowsBlockers`).

Only the candidates about to be dispatched are asked about (a look per poll each, none for a tracker whose
listing said an issue has no blockers), so an idle watch costs what it did. An issue found held is said once
(a ``held`` event, again when the reason changes), shown as held until a look finds it free, and looked at again
only when it would be dispatched next."""

from __future__ import annotations

from beflow.errors import BeflowError
from beflow.events import WatchEmit
from beflow.trackers import Issue, Status, Tracker
from beflow.trackers.base import KnowsBlockers
from beflow.trackers.blockers import held_by


class BlockerHolds:
    """One watch's issues held for their blockers, told through ``emit`` (the dispatcher's)."""

    def __init__(self, emit: WatchEmit) -> None:
        self.emit = emit
        #: Issues held back for their blockers, and why (``blocked by 3 (ready)``), as last looked.
        self.held: dict[str, str] = {}
        #: The ready issues the last look found free of blockers: only these are dispatched.
        self.cleared: set[str] = set()

    def sift(self, tracker: Tracker, queue: list[Issue], free: int) -> list[Issue]:
        """``queue`` without the issues held for their blockers: the first ``free`` ready ones are looked at (the
        ones a dispatch would start), those held at an earlier look stay held unlooked-at until their turn."""
        self.cleared = set()
        if not isinstance(tracker, KnowsBlockers):
            self.held = {}
            return queue
        kept: list[Issue] = []
        held: dict[str, str] = {}
        for issue in queue:
            if issue.status != Status.READY:  # (a review round: its issue already ran)
                kept.append(issue)
            elif len(self.cleared) < free:
                try:
                    why = held_by(tracker.blockers(issue))
                except BeflowError as error:  # unreadable for now: not started on a guess, looked at again next poll
                    why = f"its blockers could not be read: {error.message}"
                if why is None:
                    self.cleared.add(issue.key)
                    kept.append(issue)
                    continue
                held[issue.key] = why
                if self.held.get(issue.key) != why:
                    self.emit("held", issue.key, reason=why)
            elif issue.key in self.held:
                held[issue.key] = self.held[issue.key]
            else:
                kept.append(issue)
        self.held = held
        return kept

    def may_start(self, tracker: Tracker, issue: Issue) -> bool:
        """Whether ``issue`` was looked at and found free (every issue, for a tracker without blockers)."""
        return not isinstance(tracker, KnowsBlockers) or issue.status != Status.READY or issue.key in self.cleared
