"""What every tracker speaks: the issue models, the statuses and their transitions, and the :class:`Tracker` protocol.

Runs, the dispatcher and the operations behind ``beflow issues`` and the MCP server only ever talk to a tracker
through this protocol, so the local tracker and GitHub are interchangeable (docs/architecture.md: how to add one).
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from beflow.errors import BeflowError, TransitionError, UsageError

#: The priority of an issue nobody gave one. Lower numbers are more urgent and run first (0 is the most urgent).
DEFAULT_PRIORITY = 2


class Status(StrEnum):
    """Where an issue is in its life. Runs pick up ``ready`` issues only."""

    OPEN = "open"  # filed, not for agents yet
    READY = "ready"  # agents may pick it up
    IN_PROGRESS = "in_progress"  # a run is working on it
    REVIEW = "review"  # a run finished; a person should look at the branch
    DONE = "done"  # the work is accepted
    FAILED = "failed"  # runs gave up on it (after `max_attempts`)
    CLOSED = "closed"  # nobody will work on it (any more)


S = Status

#: Every allowed ``from -> to`` change of status (docs/trackers.md shows the same table). Setting the status an issue
#: already has is not a transition: it changes nothing and is always allowed.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    S.OPEN: frozenset({S.READY, S.CLOSED}),
    S.READY: frozenset({S.OPEN, S.IN_PROGRESS, S.CLOSED}),
    # back to `ready`: a run was cancelled or its process died and the issue is put back in the queue.
    S.IN_PROGRESS: frozenset({S.READY, S.REVIEW, S.DONE, S.FAILED, S.CLOSED}),
    # back to `in_progress`: changes were requested and another run continues the branch.
    S.REVIEW: frozenset({S.READY, S.IN_PROGRESS, S.DONE, S.FAILED, S.CLOSED}),
    S.DONE: frozenset({S.READY, S.CLOSED}),
    S.FAILED: frozenset({S.READY, S.CLOSED}),
    S.CLOSED: frozenset({S.OPEN, S.READY}),
}


def check_transition(key: str, current: Status, target: Status) -> None:
    """Raise a :class:`TransitionError` unless ``current -> target`` is allowed (or changes nothing)."""
    if current == target or target in TRANSITIONS[current]:
        return
    allowed = ", ".join(s.value for s in Status if s in TRANSITIONS[current])
    raise TransitionError(
        f"issue {key}: cannot go from {current.value} to {target.value} (from {current.value} it can go to: {allowed})",
        fix="`beflow docs trackers` shows the table of transitions.",
    )


def utc_now() -> dt.datetime:
    """Now, in UTC, to the second (the precision the issue files keep)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def as_utc(value: dt.datetime) -> dt.datetime:
    """``value`` in UTC to the second; a time without a zone (typed by hand) is taken to be UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).replace(microsecond=0)


def format_time(value: dt.datetime) -> str:
    """ISO 8601 in UTC with a ``Z``: ``2024-05-01T10:00:00Z``."""
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


#: The longest body or comment an issue may have, in characters: enough for any real issue, not for a flood (an
#: agent's tool call or a hand-written file alike; the whole text goes into every prompt).
MAX_TEXT = 64_000
#: The longest body a tracker stores: what a caller wrote (at most :data:`MAX_TEXT`) and the line beflow adds to an
#: agent's follow-up (who filed it, and from which issue).
MAX_STORED_TEXT = MAX_TEXT + 1_000
#: The longest label, in characters: GitHub's own limit on label names, for every tracker (a label is a word or
#: two, and a local issue file keeps its labels in front matter of bounded size).
MAX_LABEL = 50


def normalize_text(text: str) -> str:
    """Text as an issue file keeps it: ``\\n`` line ends, no blank lines before, no whitespace after."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return re.sub(r"\A(?:[ \t]*\n)+", "", text).rstrip()


def normalize_key(key: str) -> str:
    """The canonical form of a key as people type it: ``7``, ``#7`` and ``0007`` all name issue 7."""
    cleaned = str(key).strip().removeprefix("#")
    # ASCII digits only: "¹" and "①" are digits to str.isdigit() but no number to int(); and no int() at all, which
    # refuses more than 4300 digits.
    return (cleaned.lstrip("0") or "0") if _is_number(cleaned) else cleaned


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _one_line(value: str, what: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value.splitlines()) > 1:  # any line break: \n, \r, but also \x85, \u2028 and the like
        raise ValueError(f"{what} must be one line")
    return value


class Comment(BaseModel):
    """One comment on an issue, oldest first."""

    model_config = ConfigDict(frozen=True)

    author: str
    created: dt.datetime
    text: str
    #: Why the comment's text is not for an agent's prompt (its author may not give beflow work: GitHub's rule of
    #: who may give feedback), None when it is. The tracker's judgement when it read the comment; no field of it.
    _withheld: str | None = PrivateAttr(default=None)

    @property
    def withheld(self) -> str | None:
        return self._withheld

    def withholding(self, why: str | None) -> Comment:
        """This comment, its text kept out of prompts for ``why`` (None: it is not)."""
        self._withheld = why  # (a private attribute: not part of what the comment says, nor of its schema)
        return self

    @field_validator("author")
    @classmethod
    def _author(cls, value: str) -> str:
        return _one_line(value, "the author")

    @field_validator("created")
    @classmethod
    def _utc(cls, value: dt.datetime) -> dt.datetime:
        return as_utc(value)

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        value = normalize_text(value)
        if not value:
            raise ValueError("a comment must not be empty")
        return value


def _label(value: str) -> str:
    value = _one_line(value, "a label")
    if len(value) > MAX_LABEL:
        raise ValueError(f"a label is at most {MAX_LABEL} characters (this one has {len(value):,})")
    if any(unicodedata.category(c) == "Cc" for c in value):  # ESC, NUL, DEL...: nothing a label name needs
        raise ValueError("a label must not hold control characters")
    return value


def normalize_labels(labels: list[str]) -> list[str]:
    """Labels stripped, without empties or repeats, in the order given; each one line of at most
    :data:`MAX_LABEL` characters without control characters (else a ``ValueError`` saying which rule)."""
    cleaned: list[str] = []
    for label in labels:
        label = _label(str(label))
        if label not in cleaned:
            cleaned.append(label)
    return cleaned


class Issue(BaseModel):
    """An issue as every tracker reports it."""

    model_config = ConfigDict(frozen=True)

    key: str
    title: str
    status: Status
    labels: list[str] = Field(default_factory=list)
    priority: int = Field(default=DEFAULT_PRIORITY, ge=0)
    created: dt.datetime
    updated: dt.datetime
    body: str = ""
    comments: list[Comment] = Field(default_factory=list)
    #: Where the issue lives: the file of a local issue (None for remote trackers).
    path: Path | None = None
    #: A link a person can open: ``file://`` for local issues, the web page for GitHub.
    url: str | None = None

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        return _one_line(value, "the title")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        return normalize_labels(value)

    @field_validator("created", "updated")
    @classmethod
    def _utc(cls, value: dt.datetime) -> dt.datetime:
        return as_utc(value)

    @field_validator("body")
    @classmethod
    def _body(cls, value: str) -> str:
        return normalize_text(value)

    def order(self) -> tuple[int, dt.datetime, tuple[int, str], str]:
        """The order runs pick issues in: priority (lower first), then age (older first), then key."""
        number = (len(self.key), self.key) if _is_number(self.key) else (0, "")
        return (self.priority, self.created, number, self.key)


def draft_issue(title: str, body: str, labels: list[str] | None, priority: int, status: Status) -> Issue:
    """A new issue as every tracker takes it (open or ready, a one-line title, clean labels, a body it can read
    back), before the tracker gives it a key; bad input is a :class:`UsageError` naming the field."""
    if status not in (Status.OPEN, Status.READY):
        raise UsageError(f"a new issue is open or ready, not {Status(status).value}")
    now = utc_now()
    try:
        draft = Issue(
            key="0",
            title=title,
            status=status,
            labels=labels or [],
            priority=priority,
            created=now,
            updated=now,
            body=body,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"])
        raise UsageError(f"new issue: {field}: {str(error['msg']).removeprefix('Value error, ')}") from None
    if len(draft.body) > MAX_STORED_TEXT:
        raise UsageError(f"new issue: body: {len(draft.body):,} characters; at most {MAX_STORED_TEXT:,}")
    return draft


class ClaimInfo(BaseModel):
    """Who holds a claim on an issue, for display (the lock itself is the truth)."""

    key: str
    owner: str
    pid: int
    host: str
    since: dt.datetime


class FileProblem(BaseModel):
    """One issue file that could not be read, and why."""

    path: Path
    line: int | None = None
    message: str

    def render(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.message}"


class Listing(BaseModel):
    """What ``list`` found: the issues that parsed, and a problem for every file that did not."""

    issues: list[Issue] = Field(default_factory=list)
    problems: list[FileProblem] = Field(default_factory=list)


class IssueRow(NamedTuple):
    """What a table of issues shows of one issue (``issues list``), without the body and comments."""

    key: str
    status: Status
    priority: int
    title: str
    labels: list[str]
    updated: dt.datetime


class ListingStream:
    """A listing to render row by row, without holding every issue: the rows of a table, or the JSON text of the
    :class:`Listing` (the same document ``Listing.model_dump_json()`` gives) in pieces. A tracker that can read its
    issues one at a time (the local one, from its index) makes one; any other listing becomes one with :meth:`of`.
    Each iteration reads the tracker as it is then."""

    def __init__(
        self,
        problems: list[FileProblem],
        rows: Callable[[], Iterator[IssueRow]],
        documents: Callable[[], Iterator[str]],
    ) -> None:
        self.problems = problems
        self._rows = rows
        self._documents = documents

    @classmethod
    def of(cls, listing: Listing) -> ListingStream:
        def rows() -> Iterator[IssueRow]:
            for i in listing.issues:
                yield IssueRow(i.key, i.status, i.priority, i.title, list(i.labels), i.updated)

        def documents() -> Iterator[str]:
            for issue in listing.issues:
                yield issue.model_dump_json()

        return cls(listing.problems, rows, documents)

    def rows(self) -> Iterator[IssueRow]:
        """The issues, by key, as a table shows them."""
        return self._rows()

    def json_chunks(self) -> Iterator[str]:
        """The listing as one JSON document (``{"issues": [...], "problems": [...]}``), a piece at a time."""
        yield '{"issues":['
        first = True
        for document in self._documents():
            yield document if first else "," + document
            first = False
        yield '],"problems":[' + ",".join(p.model_dump_json() for p in self.problems) + "]}"


class ClaimLost(BeflowError):
    """A claim that ended without its holder releasing it: another process took the issue over."""

    code = "claim_lost"


class Claim:
    """An exclusive hold on one issue across processes; release it (or leave the ``with`` block) when done.

    The hold ends when it is released or when the holding process dies, whichever comes first. A claim on a remote
    tracker is a lease: its holder calls :meth:`renew` every ``renew_every`` seconds while the run lives, and a lease
    not renewed in time may be taken over by another machine (``renew`` then raises :class:`ClaimLost`), and a write
    made on the run's behalf elsewhere (a push, a pull request) is made within :meth:`held`.
    """

    def __init__(
        self,
        info: ClaimInfo,
        release: Any,
        *,
        held: Callable[[], AbstractContextManager[Any]] | None = None,
        renew: Any = None,
        renew_every: float | None = None,
        expires: Any = None,
    ) -> None:
        self.info = info
        self._release = release
        self._held = held
        self._renew = renew
        self._expires = expires
        #: Seconds between renewals; None for claims that last as long as their process (local file locks).
        self.renew_every = renew_every if renew is not None else None
        self.released = False

    def renew(self) -> None:
        """Extend the lease; :class:`ClaimLost` when another process holds the issue now."""
        if self._renew is not None and not self.released:
            self._renew()

    def held(self) -> AbstractContextManager[Any]:
        """A block whose writes are this claim's: a lease is proven first (:class:`ClaimLost` when another process
        holds the issue now) and its requests end before the lease does; a claim that lasts as long as its process
        needs nothing."""
        return self._held() if self._held is not None else nullcontext()

    def seconds_left(self) -> float | None:
        """How long the lease lasts without another renewal (None: it lasts as long as its process)."""
        return None if self._expires is None else float(self._expires())

    @property
    def key(self) -> str:
        return self.info.key

    def release(self) -> None:
        """Give the issue up; releasing twice is harmless."""
        if not self.released:
            self.released = True
            self._release()

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Claim {self.info.key} by {self.info.owner} ({state})>"


@runtime_checkable
class Tracker(Protocol):
    """Where issues live. Every method raises :class:`~beflow.errors.BeflowError` subclasses only."""

    #: A short description for people: ``local issues in /repo/.beflow/issues``.
    description: str

    def listing(self, status: Status | None = None, label: str | None = None) -> Listing:
        """Every issue (filtered by status and label), by key; files that did not parse are in ``problems``."""
        ...

    def ready(self) -> list[Issue]:
        """Issues a run may start now: ``ready``, not claimed, by priority (lower first), then age."""
        ...

    def get(self, key: str) -> Issue:
        """One issue with its comments; :class:`~beflow.errors.NotFoundError` naming close keys when absent."""
        ...

    def create(
        self,
        title: str,
        body: str = "",
        labels: list[str] | None = None,
        priority: int = DEFAULT_PRIORITY,
        status: Status = Status.READY,
    ) -> Issue:
        """File a new issue and return it with its key."""
        ...

    def comment(self, key: str, text: str, author: str) -> Comment:
        """Add a comment; concurrent comments are all kept."""
        ...

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        """Move the issue to ``status`` (an allowed transition), with ``note`` as a comment when given."""
        ...

    def claim(self, key: str, owner: str) -> Claim:
        """Hold the issue exclusively; :class:`~beflow.errors.LockedError` naming the holder when taken."""
        ...

    def holder(self, key: str) -> ClaimInfo | None:
        """Who holds a live claim on the issue, if anyone."""
        ...

    def orphaned(self) -> list[Issue]:
        """Issues ``in_progress`` that no live process holds: the run that took them was killed."""
        ...

    def last_holder(self, key: str) -> ClaimInfo | None:
        """Who held the claim on the issue last, live or not (the note a killed run left), if anyone said."""
        ...

    def held_secrets(self) -> list[str]:
        """Values that must never reach the agent, a log or a record: the token the tracker calls its service with,
        however it was found (none for a tracker of local files)."""
        ...


# -- what only some trackers can do ---------------------------------------------------------------------------------
# Each is a protocol of its own, asked for with isinstance (``isinstance(tracker, ShowsProgress)``): a new tracker
# implements the ones it can, and every caller says plainly what it does without them.


@runtime_checkable
class StreamsListings(Protocol):
    """Listings read one issue at a time (the local tracker, from its index), never all of them held at once."""

    def stream(self, status: Status | None = None, label: str | None = None) -> ListingStream: ...


@runtime_checkable
class ReadsOnce(Protocol):
    """Within :meth:`reading_once`, every question is answered from one look at the issues (a watch tick)."""

    def reading_once(self) -> AbstractContextManager[None]: ...


@runtime_checkable
class WatchesDirectories(Protocol):
    """Issues live in directories whose changes may make an issue startable: a watch wakes on them."""

    def watched_directories(self) -> list[Path]: ...


@runtime_checkable
class ShowsProgress(Protocol):
    """A run's progress can be shown on the issue (GitHub edits one comment); whether it was shown now."""

    def progress(self, key: str, text: str, *, force: bool = False) -> bool: ...


@runtime_checkable
class SetsUpLabels(Protocol):
    """Statuses are labels that must exist first (``beflow init`` creates them, ``beflow doctor`` names the
    missing ones)."""

    def missing_labels(self) -> list[str]: ...

    def ensure_labels(self) -> list[str]: ...


@runtime_checkable
class NamesUnreadable(Protocol):
    """Issues it skips because they cannot be read (a hostile label on GitHub), by key, with why, as of its last
    listing: a watch names each once (the local tracker reports its files as ``Listing.problems`` instead)."""

    unreadable: dict[str, str]


class RateBudget(NamedTuple):
    """What a rate-limited API last said of its limit."""

    remaining: int | None
    reset: float | None  # when it resets, seconds since the epoch
    limited: int  # requests refused for the limit so far


@runtime_checkable
class MetersRequests(Protocol):
    """Its API is rate limited (GitHub): what is left of the limit, as the API last said (the dashboard shows it)."""

    def rate_budget(self) -> RateBudget: ...
