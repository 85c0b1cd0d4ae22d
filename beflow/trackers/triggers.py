"""Triggers: what hands an open issue to beflow besides the ready label (``triggers`` in the config,
docs/config.md#triggers) — a mention of ``feedback.trigger`` by a person who may give beflow work, or an assignment to
the user of beflow's token. A tracker that hears them (:class:`~beflow.trackers.base.HearsTriggers`) labels the
issue ready itself; from there it is a labelled issue like any other. A stranger's mention is left out, and said."""

from __future__ import annotations

from typing import Literal, NamedTuple

How = Literal["mention", "assign"]


class Handed(NamedTuple):
    """An issue a trigger handed to beflow: now ready."""

    key: str
    how: How
    #: Who: the person who mentioned beflow, or the user it was assigned to.
    by: str

    def reason(self, trigger: str) -> str:
        return f"{self.by} wrote {trigger}" if self.how == "mention" else f"assigned to {self.by}"


class Left(NamedTuple):
    """A mention of the trigger that handed nothing over: who wrote it, and why it did not count."""

    key: str
    by: str
    why: str


class Heard(NamedTuple):
    handed: list[Handed]
    left: list[Left]


NOTHING = Heard([], [])
