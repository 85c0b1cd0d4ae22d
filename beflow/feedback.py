"""Feedback on a run's work, and the rounds it starts: what a reviewer, a check or a person said, as one shape.

A round is a follow-up run that continues ``beflow/<key>`` with the feedback in its prompt. Where feedback comes
from is a source's business (a code host's pull request, the tracker's issue): every source yields
:class:`Feedback` items, already filtered to the people allowed to give it and cleaned of what a person cannot see.
What a round consumed is remembered by :attr:`Feedback.id`, so that no piece is answered twice.

This module holds the shapes and the pure decisions; sources live with the code host and the tracker they read.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

#: What kind of feedback: a submitted review (with its inline comments as ``thread``), one inline comment on a
#: line, a conversation comment that mentions the trigger, a failed check run or commit status, a tracker comment
#: left with ``--rework``.
Kind = Literal["review", "inline", "comment", "check", "rework"]


class ThreadComment(BaseModel):
    """One earlier comment of the review thread an inline comment belongs to, oldest first."""

    model_config = ConfigDict(frozen=True)

    author: str
    body: str


class Feedback(BaseModel):
    """One piece of feedback, ready for a prompt: its text has had hidden content stripped."""

    model_config = ConfigDict(frozen=True)

    #: Unique across the issue's sources and stable across polls and machines (``review:123``,
    #: ``review-comment:456``, ``issue-comment:789``, ``check-run:12``, ``status:<sha>:<context>``,
    #: ``local:<comment created iso>``): what a round records as consumed.
    id: str
    kind: Kind
    author: str
    url: str | None = None
    body: str
    #: When it was given (for ``feedback.settle``: a round waits that long after the latest piece).
    created: dt.datetime
    #: Inline comments: the file, the line and the diff hunk it was left on, and the thread it belongs to.
    path: str | None = None
    line: int | None = None
    hunk: str | None = None
    thread: list[ThreadComment] = Field(default_factory=list)
    #: What a reply in this piece's thread goes to (a review comment id on GitHub), when it can have one.
    reply_to: str | None = None


class Ignored(BaseModel):
    """A piece of feedback left out, and why (not a collaborator, beflow's own comment...), for the round's record."""

    model_config = ConfigDict(frozen=True)

    id: str
    author: str
    why: str


class Gathered(BaseModel):
    """What a source found for one issue since it last looked: the pieces to answer and those left out."""

    pieces: list[Feedback] = Field(default_factory=list)
    ignored: list[Ignored] = Field(default_factory=list)
    #: The pull request was merged or closed, or the issue closed: the rounds end (``merged`` moves it to done).
    ended: Literal["merged", "closed"] | None = None


@runtime_checkable
class FeedbackSource(Protocol):
    """Where feedback on an issue's work is read, and answered. Methods may block (worker threads call them) and
    raise :class:`~beflow.errors.BeflowError` subclasses only."""

    def gather(self, key: str, branch: str) -> Gathered:
        """The feedback on issue ``key`` and the pull request of ``branch``, trusted and cleaned; cheap to call on
        every poll (conditional requests where the source offers them)."""
        ...

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` where it was given (in its review thread on GitHub), once the round's work is
        delivered."""
        ...


# -- what a round consumed, and when it may start (the run side of rounds: beflow/rounds.py) ------------------------

#: The trailer a round's commit carries once per piece of feedback it answered: read back from the branch's history
#: (by every watcher, on every machine that fetches the branch), it is what was answered.
TRAILER = "Beflow-Feedback"


def trailer_lines(ids: list[str]) -> str:
    """The trailer block of a round's commit message for the pieces ``ids`` (one line each, in order)."""
    return "\n".join(f"{TRAILER}: {piece}" for piece in dict.fromkeys(ids))


def pending(pieces: list[Feedback], answered: set[str]) -> list[Feedback]:
    """The pieces no round has answered yet, oldest first, each once."""
    seen: set[str] = set()
    left: list[Feedback] = []
    for piece in sorted(pieces, key=lambda p: p.created):
        if piece.id not in answered and piece.id not in seen:
            seen.add(piece.id)
            left.append(piece)
    return left


def due_at(pieces: list[Feedback], settle: float) -> dt.datetime | None:
    """When a round for ``pieces`` may start: ``settle`` seconds after the latest of them (None: no piece)."""
    if not pieces:
        return None
    return max(piece.created for piece in pieces) + dt.timedelta(seconds=settle)


def merged(found: list[Gathered]) -> Gathered:
    """What several sources of one issue found, as one: every piece once, and the rounds' end if any source saw it
    (merged wins over closed)."""
    pieces = {piece.id: piece for each in found for piece in each.pieces}
    ignored = {item.id: item for each in found for item in each.ignored}
    ends = {each.ended for each in found if each.ended is not None}
    ended: Literal["merged", "closed"] | None = "merged" if "merged" in ends else ("closed" if ends else None)
    return Gathered(pieces=list(pieces.values()), ignored=list(ignored.values()), ended=ended)
