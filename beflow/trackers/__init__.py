"""Trackers: where issues live (:class:`~beflow.trackers.base.Tracker`); the one the config names is opened by
:func:`beflow.app.open_tracker`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from beflow.trackers.base import ReadsOnce, Tracker
from beflow.trackers.claims import Claim, ClaimInfo
from beflow.trackers.issue import TRANSITIONS, Comment, FileProblem, Issue, Listing, Status
from beflow.trackers.local import LocalTracker

__all__ = [
    "TRANSITIONS",
    "Claim",
    "ClaimInfo",
    "Comment",
    "FileProblem",
    "Issue",
    "Listing",
    "LocalTracker",
    "Status",
    "Tracker",
    "reading_once",
]


@contextlib.contextmanager
def reading_once(tracker: Tracker) -> Iterator[None]:
    """Within the block, the tracker reads its issues once and answers every question from that reading (its own
    writes start a new one); a tracker that cannot do that reads as usual."""
    with tracker.reading_once() if isinstance(tracker, ReadsOnce) else contextlib.nullcontext():
        yield
