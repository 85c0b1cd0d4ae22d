"""Hand-over marks (``triggers.label: false``, docs/config.md#triggers): every time beflow itself hands an issue over
(a trigger's mention or assignment, a retry, a run put back after it was killed, a person's move to ready through
beflow's CLI, dashboard or API) it leaves a comment written with its own token ending in :data:`HANDED_MARKER`. With
the ready label no trigger of its own, only an issue bearing such a mark newer than its last run is ready: a ready
label a person adds by hand starts nothing, and a stale mark does not start the issue again.

A mark counts only when the comment's author is the user of beflow's token and the comment ends with the marker, as
:meth:`post` writes it: an agent's words never carry a beflow mark (:func:`beflow.trackers.quoting.unmarked`), and a
person cannot write as beflow's token. "Its last run" is the newest of beflow's progress comments (each run starts
one, with its own marker): comment ids only grow, so ``newer`` is a comparison of ids, never of clocks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from beflow.config import Config
from beflow.trackers.base import MarksHandOvers, Tracker

#: The hidden marker that ends a hand-over's comment.
HANDED_MARKER = "<!-- beflow:handed-over -->"


class Own(NamedTuple):
    """One comment of beflow's token on an issue: its id (growing with time) and its text."""

    id: int
    text: str


def unhanded(own: Iterable[Own], progress_marker: str) -> str | None:
    """None when the newest hand-over mark among beflow's ``own`` comments is newer than its newest progress comment
    (``progress_marker``: the tracker's); else why the issue is not handed over."""
    handed = progress = 0
    for comment in own:
        text = comment.text.rstrip()
        if text.endswith(HANDED_MARKER):
            handed = max(handed, comment.id)
        elif text.endswith(progress_marker):
            progress = max(progress, comment.id)
    if not handed:
        return "beflow did not hand it over (triggers.label is false: a ready label alone starts nothing)"
    if handed < progress:
        return "beflow's hand-over was taken by an earlier run (triggers.label is false: hand it over again)"
    return None


def marking(config: Config, tracker: Tracker) -> MarksHandOvers | None:
    """``tracker`` when only what beflow handed over is ready (``triggers.label: false``); else None."""
    return tracker if not config.triggers.label and isinstance(tracker, MarksHandOvers) else None


def mark(tracker: Tracker, key: str, why: str) -> None:
    """Mark ``key`` handed over by beflow for ``why`` (a person's name in it is made inert), on a tracker that marks
    hand-overs (and only when the config asks for marks: the tracker knows)."""
    if isinstance(tracker, MarksHandOvers):
        tracker.mark_handed(key, why)
