"""Blockers: the issues an issue waits for (the local tracker's ``blocked_by``, GitHub's issue dependencies, GitLab's
blocking links, Linear's ``blocks`` relations), and the words that say why it is held back.

Only the issue's own blockers are read, one level deep: a cycle (3 waits for 5, 5 for 3) holds both issues, said
as such, and never makes anything walk in circles."""

from __future__ import annotations

from typing import NamedTuple

from beflow.trackers.issue import Status

#: The statuses of a blocker that no longer holds anything back.
FINISHED = frozenset({Status.DONE, Status.CLOSED})
#: Blockers named in one reason at most (the rest are counted).
NAMED = 5


class Blocker(NamedTuple):
    """One issue another waits for."""

    #: As people name it: ``5`` in the tracker's own project, ``owner/name#5`` elsewhere.
    key: str
    #: Its status now; None: there is no such issue (a local ``blocked_by`` naming a key nobody has).
    status: Status | None
    #: It waits for the issue it blocks, too (a cycle): said, so that a person can break it.
    waits_back: bool = False

    @property
    def holds(self) -> bool:
        return self.status is None or self.status not in FINISHED


def held_by(blockers: list[Blocker]) -> str | None:
    """Why an issue with ``blockers`` is held back (``blocked by 3 (ready), 5 (in_progress)``); None: it is not."""
    waiting = [b for b in blockers if b.holds]
    if not waiting:
        return None
    named = [_named(b) for b in waiting[:NAMED]]
    more = f" and {len(waiting) - NAMED} more" if len(waiting) > NAMED else ""
    return "blocked by " + ", ".join(named) + more


def _named(blocker: Blocker) -> str:
    if blocker.status is None:
        return f"{blocker.key} (no such issue)"
    cycle = ", which waits for it in turn" if blocker.waits_back else ""
    return f"{blocker.key} ({blocker.status.value}{cycle})"
