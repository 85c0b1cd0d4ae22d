"""What GitHub's REST API answers, as beflow reads it: tolerant models of its payloads, parsed where an answer is read
and passed inward as models (the GitHub tracker, its leases and labels, and the GitHub code host all read them).

The models are lenient where GitHub is: a field it may leave out or send as null is optional, and the fields beflow
does not read are ignored. A field beflow reads that is of another type (a label that is no string, an issue without
a number) is no guess: a whole answer that does not read is :class:`MalformedAnswer`, a :class:`BeflowError`
naming the request and the field; an item of a listing that does not read is that item's :class:`Unread` (the
caller names it, or leaves it out), and the other items are read. Never a ``KeyError`` deep inside the tracker.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import Field, ValidationError, field_validator

from beflow.errors import BeflowError
from beflow.trackers.wire import Answers, Wire, problem

#: A number or an id as GitHub gives them: a JSON integer ("7" and true are not numbers).
Id = Annotated[int, Field(strict=True, ge=0)]
Number = Annotated[int, Field(strict=True, gt=0)]


class MalformedAnswer(BeflowError):
    """GitHub's answer (or a proxy's in its place) does not have the shape beflow reads."""

    code = "github_malformed"

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            fix="GitHub (or a proxy before it) answered differently from its API's description; beflow reads it "
            "again at its next look. Check tracker.api_url if it goes on.",
        )


# -- issues, labels, comments ------------------------------------------------------------------------------------------


class User(Wire):
    login: str | None = None


class Label(Wire):
    name: str


class IssueState(Wire):
    """Whether an issue (or a pull request) is open or closed, and why it was closed."""

    state: str | None = None
    state_reason: str | None = None


class DependenciesSummary(Wire):
    """How many issues an issue is blocked by (``blocked_by``: the open ones)."""

    blocked_by: int | None = None


class Issue(IssueState):
    """An issue as GitHub lists it (a pull request too: the issues endpoints list both)."""

    number: Number
    title: str | None = None
    body: str | None = None
    labels: list[Label] = Field(default_factory=list)
    created_at: dt.datetime
    updated_at: dt.datetime
    html_url: str | None = None
    #: Present on a pull request only (its presence is what says so).
    pull_request: object | None = None
    #: Absent where GitHub has no issue dependencies (an older GitHub Enterprise Server).
    issue_dependencies_summary: DependenciesSummary | None = None
    #: ``https://api.github.com/repos/owner/name``: a blocker may live in another repository.
    repository_url: str | None = None
    #: Who it is assigned to, and how many comments it has (what a trigger reads: beflow.trackers.github_triggers).
    assignees: list[User] | None = None
    comments: int | None = None

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        # GitHub gives label objects; a list of names is what it takes in requests, and is read as such.
        if value is None:
            return []
        if not isinstance(value, list):
            return value
        return [{"name": item} if isinstance(item, str) else item for item in value]

    @property
    def is_pull(self) -> bool:
        return "pull_request" in self.model_fields_set

    @property
    def label_names(self) -> list[str]:
        return [label.name for label in self.labels]


class Authored(Wire):
    """Words someone wrote: a comment, a review, a review comment."""

    body: str | None = None
    user: User | None = None
    author_association: str | None = None

    @property
    def login(self) -> str:
        """Who wrote it (``ghost``: a deleted account, as GitHub shows it)."""
        return (self.user.login if self.user is not None else None) or "ghost"

    @property
    def text(self) -> str:
        return self.body or ""


class Comment(Authored):
    """A comment on an issue, or in a pull request's conversation."""

    id: Id
    created_at: dt.datetime
    html_url: str | None = None


class Changed(Wire):
    """An item of a repository-wide listing (an issue, an issue comment, a review comment): the issue or pull
    request it is of, and when it last changed (as GitHub wrote it: it goes back to GitHub as a ``since``)."""

    number: Number | None = None
    updated_at: str | None = None
    issue_url: str | None = None
    pull_request_url: str | None = None


# -- pull requests and their feedback ----------------------------------------------------------------------------------


class Head(Wire):
    sha: str | None = None


class Pull(IssueState):
    number: Number
    html_url: str
    merged_at: dt.datetime | None = None
    head: Head | None = None
    draft: bool | None = None


class Repository(Wire):
    default_branch: str
    full_name: str | None = None


class Permission(Wire):
    """A collaborator's permission on the repository (``admin``, ``maintain``, ``write``, ``triage``, ``read``)."""

    permission: str | None = None


class Review(Authored):
    id: Id
    state: str | None = None
    html_url: str | None = None
    submitted_at: dt.datetime | None = None


class ReviewComment(Authored):
    """An inline comment of a review, or a reply in its thread."""

    id: Id
    created_at: dt.datetime | None = None
    html_url: str | None = None
    path: str | None = None
    line: int | None = None
    original_line: int | None = None
    diff_hunk: str | None = None
    in_reply_to_id: Id | None = None
    pull_request_review_id: Id | None = None


class App(Wire):
    slug: str | None = None
    name: str | None = None


class CheckOutput(Wire):
    title: str | None = None
    summary: str | None = None
    annotations_count: int | None = None


class CheckRun(Wire):
    id: Id
    name: str | None = None
    #: ``queued``, ``in_progress``, ``completed``...
    status: str | None = None
    conclusion: str | None = None
    html_url: str | None = None
    completed_at: dt.datetime | None = None
    output: CheckOutput | None = None
    app: App | None = None


class CheckRuns(Wire):
    check_runs: list[CheckRun] | None = None


class Annotation(Wire):
    path: str | None = None
    start_line: int | None = None
    annotation_level: str | None = None
    title: str | None = None
    message: str | None = None


class CommitStatus(Wire):
    state: str | None = None
    context: str | None = None
    description: str | None = None
    target_url: str | None = None
    updated_at: dt.datetime | None = None


class CombinedStatus(Wire):
    statuses: list[CommitStatus] | None = None


# -- the git database (claims' leases) -------------------------------------------------------------------------------


class Made(Wire):
    """A git object GitHub made (a tree, a commit): its sha."""

    sha: str


class GitObject(Wire):
    sha: str


class Ref(Wire):
    ref: str
    object: GitObject


class GitCommit(Wire):
    message: str


# -- what every answer may say -----------------------------------------------------------------------------------------


class ErrorBody(Wire):
    message: str | None = None


class RateHeaders(Wire):
    """What GitHub says of its rate limits in an answer's headers; each None when absent or no whole number."""

    #: ``x-ratelimit-remaining``: requests left in this window.
    remaining: int | None = None
    #: ``x-ratelimit-reset``: when the window ends (epoch seconds, on GitHub's clock).
    reset: int | None = None
    #: ``retry-after``: seconds to wait (a secondary rate limit).
    retry_after: int | None = None

    @field_validator("remaining", "reset", "retry_after", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> int | None:
        text = value.strip() if isinstance(value, str) else ""
        return int(text) if text.isascii() and text.isdigit() else None

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> RateHeaders:
        return cls.model_validate(
            {
                "remaining": headers.get("x-ratelimit-remaining"),
                "reset": headers.get("x-ratelimit-reset"),
                "retry_after": headers.get("retry-after"),
            }
        )


def error_message(data: Any) -> str | None:
    """What an error answer says (its ``message``), if it says it as GitHub does."""
    try:
        return ErrorBody.model_validate(data).message if isinstance(data, dict) else None
    except ValidationError:
        return None


# -- parsing -------------------------------------------------------------------------------------------------------

M = TypeVar("M", bound=Wire)

_answers = Answers("GitHub", MalformedAnswer)
parse, listed, parse_list = _answers.parse, _answers.listed, _answers.parse_list


@dataclass(frozen=True)
class Unread:
    """An item of a listing that does not read as its model: what names it, as far as that reads, and why."""

    number: int | None
    id: int | None
    #: Whether it is a pull request (the issues endpoints list them too).
    is_pull: bool
    why: str


def read(model: type[M], item: Any) -> M | Unread:
    """One item of a listing as ``model``, or what names it and why it does not read."""
    try:
        return model.model_validate(item)
    except ValidationError as error:
        fields = item if isinstance(item, dict) else {}
        number, id_ = fields.get("number"), fields.get("id")
        return Unread(
            number=number if type(number) is int else None,
            id=id_ if type(id_) is int else None,
            is_pull="pull_request" in fields,
            why=problem(error),
        )


def read_each(model: type[M], data: Any, what: str) -> tuple[list[M], list[Unread]]:
    """The items of a listing that read as ``model``, and those that do not (the caller names them or leaves them
    out); an answer that is no list at all is :class:`MalformedAnswer`."""
    got = [read(model, item) for item in listed(data, what)]
    return [g for g in got if not isinstance(g, Unread)], [g for g in got if isinstance(g, Unread)]
