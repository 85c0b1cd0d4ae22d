"""The issue as every tracker gives it: its statuses and their transitions, its comments, and listings of issues
(a file that did not parse is a problem in the listing, not an error)."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, WithJsonSchema, field_validator

from beflow.errors import TransitionError, UsageError

#: A file's path, a string in JSON: its schema says no more (``"format": "path"`` is pydantic's, not JSON Schema's,
#: and every TypeScript MCP client logs that it ignores it).
FilePath = Annotated[Path, WithJsonSchema({"type": "string"})]

#: The priority of an issue nobody gave one. Lower numbers are more urgent and run first (0 is the most urgent).
DEFAULT_PRIORITY = 2


class Status(StrEnum):
    """Where an issue is in its life. Runs pick up ``ready`` issues only."""

    OPEN = "open"  # filed, not for agents yet
    READY = "ready"  # agents may pick it up
    IN_PROGRESS = "in_progress"  # a run is working on it
    BLOCKED = "blocked"  # its run's agent asked a question: it waits for a person's answer (docs/questions.md)
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
    S.IN_PROGRESS: frozenset({S.READY, S.BLOCKED, S.REVIEW, S.DONE, S.FAILED, S.CLOSED}),
    # to `in_progress`: answered, a run resumes the agent's session; `failed`: unanswered within `limits.wait`.
    S.BLOCKED: frozenset({S.READY, S.IN_PROGRESS, S.FAILED, S.CLOSED}),
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
    path: FilePath | None = None
    #: A link a person can open: ``file://`` for local issues, the web page for GitHub.
    url: str | None = None
    #: The tracker's own id of the issue where its key can change (a Linear issue moved to another team is ``ENG-1``
    #: then ``OPS-7``): the runs of an issue are found by it, so a moved issue keeps its branch and history. None
    #: where the key is the id.
    id: str | None = None
    #: The keys of the issues this one waits for, as its listing names them (the local tracker's ``blocked_by``
    #: front matter); empty where the tracker names them only when asked (:class:`~beflow.trackers.base.KnowsBlockers`).
    blocked_by: list[str] = Field(default_factory=list)
    #: Where the tracker ranks it among issues of the same priority, as text that sorts in that order (Jira: its
    #: place in a search ordered by Rank); None where age decides.
    rank: str | None = None

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

    def order(self) -> tuple[int, str, dt.datetime, tuple[int, str], str]:
        """The order runs pick issues in: priority (lower first), then the tracker's rank where it has one, then age
        (older first), then key."""
        number = (len(self.key), self.key) if _is_number(self.key) else (0, "")
        return (self.priority, self.rank or "", self.created, number, self.key)


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


def draft_comment(text: str, author: str) -> Comment:
    """A new comment as every tracker takes it (text it can read back, within its size), before the tracker writes
    it; bad input is a :class:`UsageError` saying what is wrong."""
    try:
        return Comment(author=author, created=utc_now(), text=text)
    except ValidationError as exc:
        raise UsageError(f"comment: {str(exc.errors()[0]['msg']).removeprefix('Value error, ')}") from None


def labels_of_new(mine: list[str], draft: Issue, status_label: str | None) -> list[str]:
    """The labels a tracker that keeps status and priority in labels gives a new issue: its own (``mine``), the
    draft's, the status's and ``priority:N`` when not the default; each once, in that order."""
    names = [*mine, *draft.labels]
    if status_label:
        names.append(status_label)
    if draft.priority != DEFAULT_PRIORITY:
        names.append(f"priority:{draft.priority}")
    return list(dict.fromkeys(names))


class FileProblem(BaseModel):
    """One issue file that could not be read, and why."""

    path: FilePath
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
    #: Why a ready issue is not started (``blocked by 3 (ready)``), where the listing says; None: nothing holds it.
    held: str | None = None


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
