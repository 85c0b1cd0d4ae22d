"""Hearing triggers each poll (``triggers``: docs/config.md#triggers), for a watch and a fleet's dispatcher alike: the
issues a mention or an assignment handed over are said as ``triggered``, a stranger's mention as ``ignored``."""

from __future__ import annotations

from beflow.config import Project
from beflow.events import WatchEmit
from beflow.trackers import Tracker
from beflow.trackers.base import HearsTriggers


def hear(project: Project, tracker: Tracker, emit: WatchEmit) -> None:
    """Ask ``tracker`` what handed issues over since the last poll (nothing when no trigger is on, or the tracker
    hears none): those are labelled ready now, and queued by the same poll's listing."""
    triggers, word = project.config.triggers, project.config.feedback.trigger
    if not (triggers.mention or triggers.assign) or not isinstance(tracker, HearsTriggers):
        return
    heard = tracker.hear(word if triggers.mention else None, triggers.assign)
    for handed in heard.handed:
        emit("triggered", handed.key, reason=handed.reason(word), by=handed.by)
    for left in heard.left:  # a stranger's mention: left out, and said
        emit("ignored", left.key, reason=f"{left.by} wrote {word}: {left.why}", by=left.by)
