"""Issues a watch leaves out because beflow did not hand them over (``triggers.label: false``,
:mod:`beflow.trackers.handovers`): a ready label alone starts nothing.

As with blockers (:mod:`beflow.watch.blocking`), only the ready candidates a dispatch would start are looked at (one
request each), so the cost is the dispatch's, not the queue's. An issue left out is said once (an ``ignored`` event
naming why, again when the reason changes) and looked at again when it would be dispatched next."""

from __future__ import annotations

from beflow.config import Config
from beflow.errors import BeflowError
from beflow.events import WatchEmit
from beflow.trackers import Issue, Status, Tracker
from beflow.trackers.handovers import marking


class HandOverHolds:
    """One watch's ready issues beflow did not hand over, told through ``emit`` (the dispatcher's)."""

    def __init__(self, emit: WatchEmit) -> None:
        self.emit = emit
        #: Ready issues left out, and why, as last looked.
        self.left: dict[str, str] = {}
        #: The ready issues the last look found handed over: only these are dispatched.
        self.cleared: set[str] = set()
        #: Whether the last look left out what beflow did not hand over (``triggers.label: false``).
        self.marking = False

    def sift(self, config: Config, tracker: Tracker, queue: list[Issue], free: int) -> list[Issue]:
        """``queue`` without the ready issues beflow did not hand over: the first ``free`` ready ones are looked at,
        those left out at an earlier look stay out unlooked-at until their turn."""
        self.cleared = set()
        marks = marking(config, tracker)
        self.marking = marks is not None
        if marks is None:
            self.left = {}
            return queue
        kept: list[Issue] = []
        left: dict[str, str] = {}
        for issue in queue:
            if issue.status != Status.READY:  # (a review round, an answered question: its issue was handed over)
                kept.append(issue)
            elif len(self.cleared) < free:
                try:
                    why = marks.unhanded(issue)
                except BeflowError as error:  # unreadable for now: not started on a guess, looked at again next poll
                    why = f"its hand-over could not be read: {error.message}"
                if why is None:
                    self.cleared.add(issue.key)
                    kept.append(issue)
                    continue
                left[issue.key] = why
                if self.left.get(issue.key) != why:
                    self.emit("ignored", issue.key, reason=why)
            elif issue.key in self.left:
                left[issue.key] = self.left[issue.key]
            else:
                kept.append(issue)
        self.left = left
        return kept

    def may_start(self, issue: Issue) -> bool:
        """Whether ``issue`` was looked at and found handed over (every issue, unless ``triggers.label`` is false)."""
        return not self.marking or issue.status != Status.READY or issue.key in self.cleared
