"""What GitLab's REST API (v4) answers, as beflow reads it: tolerant models of its payloads, parsed where an answer is
read and passed inward as models (the GitLab tracker and the GitLab code host both read them).

As with GitHub's (:mod:`beflow.trackers.github_wire`), the models are lenient where GitLab is: a field it may leave
out or send as null is optional, and the fields beflow does not read are ignored. A field beflow reads that is of
another type (an ``iid`` that is a string, a member without an ``access_level``) is no guess: a whole answer that does
not read is :class:`MalformedAnswer`, naming the request and the field; an item of a listing that does not read is
that item's :class:`Unread`, and the other items are read.

The shapes follow GitLab's REST API pages: ``tests/support/gitlab_openapi.py`` describes them, each part naming its
page, and checks the fake GitLab against that description.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator

from beflow.errors import BeflowError
from beflow.trackers.wire import Answers, Wire, problem

#: An id or an iid as GitLab gives them: a JSON integer ("7" and true are not ids).
Id = Annotated[int, Field(strict=True, ge=0)]
Iid = Annotated[int, Field(strict=True, gt=0)]

#: GitLab's roles as numbers (``access_level``); Developer and above may push and may ask for a review round.
GUEST, REPORTER, DEVELOPER, MAINTAINER, OWNER = 10, 20, 30, 40, 50


class MalformedAnswer(BeflowError):
    """GitLab's answer (or a proxy's in its place) does not have the shape beflow reads."""

    code = "gitlab_malformed"

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            fix="GitLab (or a proxy before it) answered differently from its API's description; beflow reads it "
            "again at its next look. Check tracker.url if it goes on.",
        )


# -- people and their rights -------------------------------------------------------------------------------------------


class User(Wire):
    """A user as GitLab embeds one (``author``, ``assignees``) or answers ``GET /user``."""

    id: Id
    username: str
    name: str | None = None
    #: ``active``, ``blocked``, ``deactivated``, ...
    state: str | None = None
    bot: bool = False


class Member(User):
    """A project member (``GET /projects/:id/members/all/:user_id``): a user with a role."""

    access_level: Annotated[int, Field(strict=True, ge=0)]

    @property
    def may_push(self) -> bool:
        return self.access_level >= DEVELOPER and self.state in (None, "active")


class TokenSelf(Wire):
    """The token beflow holds (``GET /personal_access_tokens/self``): its scopes, and whether it still works."""

    id: Id
    name: str | None = None
    scopes: list[str]
    active: bool = True
    revoked: bool = False
    user_id: Id | None = None
    expires_at: dt.date | None = None

    @property
    def may_write_api(self) -> bool:
        return self.active and not self.revoked and "api" in self.scopes


# -- issues, labels, notes, discussions --------------------------------------------------------------------------------


class Label(Wire):
    """A project label (``GET /projects/:id/labels``)."""

    id: Id
    name: str
    color: str | None = None
    description: str | None = None


class Issue(Wire):
    """An issue as GitLab lists it; ``labels`` are names (GitLab's default), objects when asked with details."""

    id: Id
    iid: Iid
    project_id: Id
    title: str
    description: str | None = None
    #: ``opened`` or ``closed``.
    state: Literal["opened", "closed"]
    labels: list[str] = Field(default_factory=list)
    confidential: bool = False
    #: GitLab's own priority field (Premium); None where the edition or the issue has none.
    weight: int | None = None
    author: User | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    web_url: str | None = None
    #: Who it is assigned to, and how many notes people wrote on it (what a trigger reads).
    assignees: list[User] | None = None
    user_notes_count: int | None = None

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        # ``with_labels_details=true`` gives objects with a name; read both as names.
        if value is None:
            return []
        if not isinstance(value, list):
            return value
        return [item.get("name") if isinstance(item, dict) else item for item in value]


class IssueLink(Issue):
    """An issue linked to another, as the other's links list it (``is_blocked_by``: it blocks that one)."""

    link_type: str | None = None


class Position(Wire):
    """Where a diff note sits: the versions it was written against and the line, old side or new."""

    base_sha: str | None = None
    start_sha: str | None = None
    head_sha: str | None = None
    #: ``text`` (a line), ``image`` or ``file``.
    position_type: str
    old_path: str | None = None
    new_path: str | None = None
    old_line: int | None = None
    new_line: int | None = None

    @property
    def path(self) -> str | None:
        return self.new_path or self.old_path

    @property
    def line(self) -> int | None:
        return self.new_line if self.new_line is not None else self.old_line


class Note(Wire):
    """A note (a comment) on an issue or a merge request; a diff note has a ``position``."""

    id: Id
    body: str | None = None
    author: User
    created_at: dt.datetime
    updated_at: dt.datetime | None = None
    #: GitLab's own notes (label changes, pushes): never anyone's words.
    system: bool = False
    #: ``DiffNote``, ``DiscussionNote`` or null (a plain note).
    type: str | None = None
    noteable_type: str | None = None
    noteable_iid: int | None = None
    resolvable: bool = False
    resolved: bool = False
    position: Position | None = None
    #: An internal note (``confidential`` before GitLab 15.6): only the project's members see it.
    internal: bool = False
    confidential: bool = False

    @property
    def text(self) -> str:
        return self.body or ""

    @property
    def hidden(self) -> bool:
        """Whether only the project's members see this note (an internal note)."""
        return self.internal or self.confidential


class Discussion(Wire):
    """A thread (``GET .../discussions``): its first note opens it, the others answer it."""

    id: Annotated[str, Field(min_length=1)]
    individual_note: bool
    notes: list[Note]

    @property
    def resolved(self) -> bool:
        """Whether every resolvable note of it is resolved (a thread with none is never waiting)."""
        resolvable = [note for note in self.notes if note.resolvable]
        return all(note.resolved for note in resolvable)


# -- projects, merge requests, pipelines, jobs ------------------------------------------------------------------------


class Project(Wire):
    """A project (``GET /projects/:id``): where merge requests go by default."""

    id: Id
    path_with_namespace: str
    #: Null for a project with no commit yet.
    default_branch: str | None = None
    web_url: str | None = None


class MergeRequest(Wire):
    """A merge request as GitLab lists or answers one."""

    id: Id
    iid: Iid
    project_id: Id
    title: str
    description: str | None = None
    #: ``opened``, ``closed``, ``locked`` or ``merged``.
    state: Literal["opened", "closed", "locked", "merged"]
    draft: bool = False
    #: The project the branch is in: another than ``project_id`` (the target) for a merge request from a fork,
    #: whoever's it is, whatever its branch is named.
    source_project_id: Id
    target_project_id: Id
    source_branch: str
    target_branch: str
    #: The head commit of the source branch (null before GitLab has looked at a new branch).
    sha: str | None = None
    author: User | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    merged_at: dt.datetime | None = None
    web_url: str | None = None


def own_branch(mr: MergeRequest, branch: str) -> bool:
    """Whether ``mr`` is of ``branch`` in the project itself: GitLab lists a fork's merge request by its branch's
    name too, and a fork is anyone's (beflow never takes it for its own, nor its feedback, nor its merge)."""
    return mr.source_branch == branch and mr.source_project_id == mr.target_project_id == mr.project_id


class Approver(Wire):
    user: User


class Approvals(Wire):
    """Who approved a merge request (``GET .../merge_requests/:iid/approvals``)."""

    approved_by: list[Approver] = Field(default_factory=list)


class Pipeline(Wire):
    """A pipeline, as ``GET /projects/:id/pipelines`` lists them."""

    id: Id
    project_id: Id
    sha: str
    ref: str | None = None
    #: ``created``, ``pending``, ``running``, ``success``, ``failed``, ``canceled``, ``skipped``, ``manual``, ...
    status: str
    source: str | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    web_url: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"


class Job(Wire):
    """A job of a pipeline: a failed one's name and log are what a review round is told."""

    id: Id
    name: str
    stage: str | None = None
    status: str
    allow_failure: bool = False
    failure_reason: str | None = None
    web_url: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed" and not self.allow_failure


# -- what every answer may say -----------------------------------------------------------------------------------------


class ErrorBody(Wire):
    """GitLab's error answers: ``{"message": ...}`` (a string, or a dict of field errors), or ``{"error": ...}``."""

    message: str | dict[str, Any] | list[Any] | None = None
    error: str | None = None


def error_message(data: Any) -> str | None:
    """What an error answer says, if it says it as GitLab does."""
    try:
        body = ErrorBody.model_validate(data) if isinstance(data, dict) else None
    except ValidationError:
        return None
    if body is None:
        return None
    if isinstance(body.message, str):
        return body.message
    if body.message:
        return str(body.message)
    return body.error


class RateHeaders(Wire):
    """What GitLab says of its rate limits in an answer's headers; each None when absent or no whole number."""

    #: ``RateLimit-Remaining``: requests left in this window.
    remaining: int | None = None
    #: ``RateLimit-Reset``: when the window ends (epoch seconds, on GitLab's clock).
    reset: int | None = None
    #: ``Retry-After``: seconds to wait (sent with a 429).
    retry_after: int | None = None

    @field_validator("remaining", "reset", "retry_after", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> int | None:
        text = value.strip() if isinstance(value, str) else ""
        return int(text) if text.isascii() and text.isdigit() else None

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> RateHeaders:
        lower = {key.lower(): value for key, value in headers.items()}
        return cls.model_validate(
            {
                "remaining": lower.get("ratelimit-remaining"),
                "reset": lower.get("ratelimit-reset"),
                "retry_after": lower.get("retry-after"),
            }
        )


_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


def next_page(headers: Mapping[str, str]) -> str | None:
    """Where a listing goes on: the ``Link: <...>; rel="next"`` URL (keyset and offset pagination both send it)."""
    for key, value in headers.items():
        if key.lower() == "link":
            found = _NEXT.search(value)
            if found:
                return found.group(1)
    return None


# -- parsing -------------------------------------------------------------------------------------------------------

M = TypeVar("M", bound=Wire)

_answers = Answers("GitLab", MalformedAnswer)
parse, listed, parse_list = _answers.parse, _answers.listed, _answers.parse_list


@dataclass(frozen=True)
class Unread:
    """An item of a listing that does not read as its model: what names it, as far as that reads, and why."""

    iid: int | None
    id: int | None
    why: str


def read(model: type[M], item: Any) -> M | Unread:
    """One item of a listing as ``model``, or what names it and why it does not read."""
    try:
        return model.model_validate(item)
    except ValidationError as error:
        fields = item if isinstance(item, dict) else {}
        iid, id_ = fields.get("iid"), fields.get("id")
        return Unread(iid=iid if type(iid) is int else None, id=id_ if type(id_) is int else None, why=problem(error))


def read_each(model: type[M], data: Any, what: str) -> tuple[list[M], list[Unread]]:
    """The items of a listing that read as ``model``, and those that do not; an answer that is no list at all is
    :class:`MalformedAnswer`."""
    got = [read(model, item) for item in listed(data, what)]
    return [g for g in got if not isinstance(g, Unread)], [g for g in got if isinstance(g, Unread)]
