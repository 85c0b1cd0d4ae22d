"""What Jira Cloud's REST API (v3) answers, as the Jira tracker reads it: lenient models of the parts beflow uses
(fields it does not read are ignored), its errors, and what its answers say of the rate limit."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError, field_validator

from beflow.errors import BeflowError
from beflow.trackers.wire import Answers, Wire, problem


class MalformedAnswer(BeflowError):
    """Jira's answer (or a proxy's in its place) does not have the shape beflow reads."""

    code = "jira_malformed"

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            fix="Jira (or a proxy before it) answered differently from its API's description; beflow reads it again "
            "at its next look. Check tracker.site if it goes on.",
        )


_answers = Answers("Jira", MalformedAnswer)
parse = _answers.parse
parse_list = _answers.parse_list


class GroupName(Wire):
    name: str = ""
    groupId: str | None = None


class Groups(Wire):
    items: list[GroupName] = Field(default_factory=list)


class User(Wire):
    accountId: str = Field(min_length=1, max_length=128)
    displayName: str = ""
    #: With ``expand=groups``: the groups the account is in.
    groups: Groups | None = None


class RoleActor(Wire):
    actorUser: User | None = None
    actorGroup: GroupName | None = None


class ProjectRole(Wire):
    id: int | None = None
    name: str = ""
    actors: list[RoleActor] = Field(default_factory=list)


class StatusCategory(Wire):
    #: ``new``, ``indeterminate`` or ``done`` (``undefined`` for a category Jira does not know).
    key: str


class StatusDetails(Wire):
    id: str = ""
    name: str
    statusCategory: StatusCategory


class Priority(Wire):
    id: str = ""
    name: str = ""


class Fields(Wire):
    summary: str
    status: StatusDetails
    labels: list[str] = Field(default_factory=list)
    priority: Priority | None = None
    created: dt.datetime
    updated: dt.datetime
    #: The description, as an Atlassian Document Format document (None: empty).
    description: Any = None


class Issue(Wire):
    id: str = Field(pattern=r"^[0-9]{1,20}$")
    key: str = Field(pattern=r"^[A-Z][A-Z0-9_]{0,19}-[0-9]{1,12}$")
    fields: Fields


class SearchPage(Wire):
    """A page of ``/search/jql``: its issues as Jira gave them (each read on its own), and the next page's token."""

    issues: list[Any] = Field(default_factory=list)
    nextPageToken: str | None = None
    isLast: bool | None = None


class Comment(Wire):
    id: str = Field(pattern=r"^[0-9]{1,20}$")
    author: User | None = None
    body: Any = None
    created: dt.datetime
    updated: dt.datetime | None = None

    @property
    def number(self) -> int:
        return int(self.id)


class CommentPage(Wire):
    comments: list[Any] = Field(default_factory=list)
    startAt: int = 0
    maxResults: int = 0
    total: int = 0


class Transition(Wire):
    id: str
    name: str
    to: StatusDetails
    isAvailable: bool = True


class Transitions(Wire):
    transitions: list[Transition] = Field(default_factory=list)


class Created(Wire):
    id: str
    key: str


class Permission(Wire):
    key: str = ""
    havePermission: bool = False


class MyPermissions(Wire):
    permissions: dict[str, Permission] = Field(default_factory=dict)


class Project(Wire):
    id: str
    key: str
    name: str = ""


class IssueTypeStatuses(Wire):
    """An issue type of a project and the statuses its workflow has (``GET /project/{key}/statuses``)."""

    id: str
    name: str
    subtask: bool = False
    statuses: list[StatusDetails] = Field(default_factory=list)


class IssueType(Wire):
    id: str
    name: str
    subtask: bool = False


class CreateMetaPage(Wire):
    """A page of the issue types one may create in a project (``GET /issue/createmeta/{key}/issuetypes``)."""

    issueTypes: list[IssueType] = Field(default_factory=list)
    startAt: int = 0
    total: int = 0


class WorkflowStatus(Wire):
    """A status of a workflow read (``POST /workflows``): ``statusReference`` is what its transitions name."""

    statusReference: str
    name: str = ""


class WorkflowTransition(Wire):
    id: str = ""
    name: str
    toStatusReference: str = ""
    #: ``INITIAL`` (creates the issue), ``GLOBAL`` (from any status) or ``DIRECTED``.
    type: str = ""


class WorkflowDefinition(Wire):
    id: str = ""
    name: str = ""
    transitions: list[WorkflowTransition] = Field(default_factory=list)


class WorkflowRead(Wire):
    """What ``POST /workflows`` answers for a project's issue type: its workflow(s) and their statuses."""

    statuses: list[WorkflowStatus] = Field(default_factory=list)
    workflows: list[WorkflowDefinition] = Field(default_factory=list)


class ErrorBody(Wire):
    errorMessages: list[str] = Field(default_factory=list)
    errors: dict[str, str] = Field(default_factory=dict)
    message: str | None = None


def error_message(data: Any) -> str | None:
    """What Jira's error answer says, in one line (its messages, then its fields' errors)."""
    try:
        body = ErrorBody.model_validate(data)
    except ValidationError:
        return None
    said = [*body.errorMessages, *(f"{field}: {text}" for field, text in body.errors.items())]
    if body.message:
        said.append(body.message)
    return "; ".join(said) or None


class RateHeaders(Wire):
    """What Jira says of its rate limits in an answer's headers; each None when absent or not a whole number."""

    remaining: int | None = None
    #: ``X-RateLimit-Reset``: when the limit lifts (epoch seconds), from Jira's ISO 8601 timestamp.
    reset: int | None = None
    #: ``Retry-After``: seconds to wait (sent with a 429, and with some 503s).
    retry_after: int | None = None
    #: ``RateLimit-Reason``: which of Jira's limits it is (``jira-burst-based``, ``jira-per-issue-on-write``,
    #: ``jira-quota-tenant-based``, ...); None when absent or not such a word.
    reason: str | None = None

    @field_validator("reason", mode="before")
    @classmethod
    def _word(cls, value: Any) -> str | None:
        text = value.strip() if isinstance(value, str) else ""
        return text if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,59}", text) else None

    @field_validator("remaining", "retry_after", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> int | None:
        text = value.strip() if isinstance(value, str) else ""
        return int(text) if text.isascii() and text.isdigit() else None

    @field_validator("reset", mode="before")
    @classmethod
    def _stamp(cls, value: Any) -> int | None:
        if not isinstance(value, str):
            return None
        try:
            when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return int((when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp())

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> RateHeaders:
        lower = {key.lower(): value for key, value in headers.items()}
        return cls.model_validate(
            {
                "remaining": lower.get("x-ratelimit-remaining"),
                "reset": lower.get("x-ratelimit-reset"),
                "retry_after": lower.get("retry-after"),
                "reason": lower.get("ratelimit-reason"),
            }
        )


@dataclass(frozen=True)
class Unread:
    """An issue of a listing that does not read: its key as far as it reads, and why."""

    key: str | None
    why: str


def read_issue(item: Any) -> Issue | Unread:
    try:
        return Issue.model_validate(item)
    except ValidationError as error:
        key = item.get("key") if isinstance(item, dict) else None
        return Unread(key if isinstance(key, str) and len(key) < 40 else None, problem(error))
