"""What Linear's GraphQL API answers, as beflow reads it: tolerant models of the objects its queries
(:mod:`beflow.trackers.linear_queries`) select, parsed where an answer is read and passed inward as models.

As with GitHub's and GitLab's (:mod:`beflow.trackers.github_wire`, :mod:`beflow.trackers.gitlab_wire`), the models are
lenient where Linear is: a field its schema makes nullable is optional, a field beflow does not read is ignored, and a
kind Linear may add to (a workflow state's ``type``, a session's ``status``) is a string with the known values named.
A field beflow reads that is of another type (an ``id`` that is a number, an ``updatedAt`` that is no time) is no
guess: a whole answer that does not read is :class:`MalformedAnswer`, naming the request and the field; an item of a
listing that does not read is that item's :class:`Unread`, and the other items are read.

The shapes are those of Linear's published schema (its TypeScript SDK's ``schema.graphql``; the tests hold a pinned
copy and check beflow's queries and the fake Linear's answers against it). Linear answers errors the GraphQL way, in
an ``errors`` list beside ``data``, with the kind of error in ``extensions`` (``code`` such as ``RATELIMITED``, and
``type`` such as ``ratelimited``, the one its SDK reads), under an HTTP status that may be 200, 400 or 429: beflow
reads the errors, not the status.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import Discriminator, Field, Tag, ValidationError, field_validator

from beflow.errors import BeflowError
from beflow.trackers.wire import Answers, Wire, problem

#: An id as Linear gives them (a UUID, as a string; ``7`` is no id).
Id = Annotated[str, Field(strict=True, min_length=1)]
#: An issue's identifier: its team's key and its number (``ENG-123``).
Identifier = Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9_]+-[0-9]+$")]


class MalformedAnswer(BeflowError):
    """Linear's answer (or a proxy's in its place) does not have the shape beflow reads."""

    code = "linear_malformed"

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            fix="Linear (or a proxy before it) answered differently from its schema; beflow reads it again at its "
            "next look. Check tracker.api_url if it goes on.",
        )


# -- pages -----------------------------------------------------------------------------------------------------------

N = TypeVar("N")


class Ref(Wire):
    """Something named by its id alone."""

    id: Id


class PageInfo(Wire):
    hasNextPage: bool
    endCursor: str | None = None


class Connection(Wire, Generic[N]):
    """A page of a Linear connection (``nodes`` and where the next page starts)."""

    nodes: list[N]
    pageInfo: PageInfo = PageInfo(hasNextPage=False)


# -- people, the workspace, teams ----------------------------------------------------------------------------------


class User(Wire):
    """A user as Linear embeds one (``assignee``, ``delegate``, a comment's ``user``) or answers ``viewer``."""

    id: Id
    name: str
    displayName: str | None = None
    email: str | None = None
    #: An app user: the actor of an OAuth app installed with ``actor=app`` (an agent), not a person.
    app: bool = False
    active: bool = True


class Organization(Wire):
    id: Id
    name: str | None = None
    #: The workspace's part of every URL (``https://linear.app/<urlKey>/issue/ENG-1``).
    urlKey: str


class Viewer(Wire):
    """The answer to ``BeflowViewer``: who the token is, in which workspace."""

    viewer: User
    organization: Organization

    @property
    def is_app(self) -> bool:
        """Whether the token is an app's (``actor=app``): only an app may open agent sessions and post activities."""
        return self.viewer.app


#: The kinds of workflow state Linear has (``WorkflowState.type``): every state of a team is of one of them.
STATE_TYPES = ("triage", "backlog", "unstarted", "started", "completed", "canceled")


class WorkflowState(Wire):
    """A state of a team's workflow: ``name`` is the team's, ``type`` the kind beflow maps its statuses by."""

    id: Id
    name: str
    #: One of :data:`STATE_TYPES` (a string: Linear may add kinds, and a state of one beflow does not know is left be).
    type: Annotated[str, Field(strict=True, min_length=1)]
    position: float | None = None


class TeamRef(Wire):
    id: Id
    key: Annotated[str, Field(strict=True, min_length=1)]


class Label(Wire):
    id: Id
    name: str


class Team(TeamRef):
    """A team with its workflow states and labels (``BeflowTeam``)."""

    name: str | None = None
    states: Connection[WorkflowState]
    labels: Connection[Label]

    def started(self) -> WorkflowState | None:
        """The team's first state of type ``started`` (by position): where a claimed issue goes."""
        started = [state for state in self.states.nodes if state.type == "started"]
        return min(started, key=lambda state: state.position or 0.0, default=None)


class Teams(Wire):
    """The answer to ``BeflowTeam``: the team of the key, if there is one."""

    teams: Connection[Team]


class ProjectRef(Wire):
    id: Id
    name: str


# -- issues and comments -----------------------------------------------------------------------------------------------

#: Linear's priorities: 0 none, 1 urgent, 2 high, 3 normal (medium), 4 low.
NO_PRIORITY, URGENT, HIGH, NORMAL, LOW = 0, 1, 2, 3, 4


class Related(Wire):
    """The issue at the other end of a relation, as ``BeflowBlockers`` selects it."""

    id: Id
    identifier: Identifier
    state: WorkflowState


class Relation(Wire):
    """A relation pointing at an issue (``type`` ``blocks``: ``issue`` blocks it)."""

    type: str
    issue: Related


class Relations(Wire):
    inverseRelations: Connection[Relation]


class Issue(Wire):
    """An issue as ``BeflowIssue`` (the fragment) selects it; ``labels`` read as the labels themselves."""

    id: Id
    identifier: Identifier
    title: str
    description: str | None = None
    #: 0 (none) to 4 (low); a Float in Linear's schema.
    priority: Annotated[float, Field(strict=True, ge=0, le=4)]
    createdAt: dt.datetime
    updatedAt: dt.datetime
    url: str
    state: WorkflowState
    team: TeamRef
    project: ProjectRef | None = None
    labels: list[Label] = Field(default_factory=list)
    #: The ids of all its labels (``labels`` is a first page of them).
    labelIds: list[Id] | None = None
    assignee: User | None = None
    #: The agent the issue is delegated to (an app user), the person staying its assignee.
    delegate: User | None = None

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        # A connection (``labels { nodes { ... } }``): its nodes are the labels.
        if isinstance(value, dict) and "nodes" in value:
            return value["nodes"]
        return [] if value is None else value

    @property
    def label_names(self) -> list[str]:
        return [label.name for label in self.labels]

    @property
    def labels_complete(self) -> bool:
        """Whether ``labels`` holds every label of the issue (else the rest are named by the team's labels)."""
        return self.labelIds is None or {label.id for label in self.labels} >= set(self.labelIds)

    @property
    def rank(self) -> int:
        """Where the issue stands in the queue: urgent (1) first, low (4), then no priority (5)."""
        return int(self.priority) or 5


class Comment(Wire):
    """A comment on an issue; one made by an integration may have no ``user``."""

    id: Id
    body: str
    createdAt: dt.datetime
    updatedAt: dt.datetime
    editedAt: dt.datetime | None = None
    #: When it was deleted (a read with ``includeArchived`` gives deleted comments too).
    archivedAt: dt.datetime | None = None
    #: The comment this one answers in its thread.
    parentId: str | None = None
    user: User | None = None


class IssueWithComments(Issue):
    """An issue with its first page of comments (``BeflowIssue``, the query)."""

    comments: Connection[Comment]


class IssueRef(Wire):
    id: Id
    identifier: Identifier | None = None


class CommentOnIssue(Comment):
    """A comment read by its id, with the issue it is on (``BeflowComment``)."""

    issue: IssueRef | None = None


# -- agent sessions and activities -----------------------------------------------------------------------------------

#: A session's statuses (``AgentSessionStatus``).
SESSION_STATUSES = ("pending", "active", "awaitingInput", "complete", "error", "stale")


class ExternalLink(Wire):
    label: str
    url: str


class UserRef(Wire):
    id: Id
    name: str | None = None
    app: bool = False


class AgentSession(Wire):
    """An agent session: opened on an issue when it is delegated to the agent or the agent is mentioned (or by the
    agent itself), it holds the run's activities."""

    id: Id
    #: One of :data:`SESSION_STATUSES`.
    status: Annotated[str, Field(strict=True, min_length=1)]
    createdAt: dt.datetime
    updatedAt: dt.datetime
    startedAt: dt.datetime | None = None
    endedAt: dt.datetime | None = None
    url: str | None = None
    issue: IssueRef | None = None
    appUser: UserRef
    creator: UserRef | None = None
    externalLinks: list[ExternalLink] = Field(default_factory=list)


class Thought(Wire):
    """A thought: what the agent is about to do or noticed (the first activity, within seconds of the claim)."""

    type: Literal["thought"] = "thought"
    body: str


class Action(Wire):
    """An action: a tool call (``action`` what, ``parameter`` on what), with its ``result`` once it has one."""

    type: Literal["action"] = "action"
    action: str
    parameter: str
    result: str | None = None


class Response(Wire):
    """A response: the run's outcome (it ends the session's turn: the session is ``complete``)."""

    type: Literal["response"] = "response"
    body: str


class Elicitation(Wire):
    """An elicitation: a question to a person (the session awaits input)."""

    type: Literal["elicitation"] = "elicitation"
    body: str


class Error(Wire):
    """An error: the run failed (the session is ``error``)."""

    type: Literal["error"] = "error"
    body: str
    reasonCode: str | None = None


class Prompt(Wire):
    """A prompt: a person's message to the agent (the delegation's, or a follow-up in the session)."""

    type: Literal["prompt"] = "prompt"
    body: str
    title: str | None = None


class OtherContent(Wire):
    """A kind of content Linear added after the schema beflow knows: read, and left be."""

    type: str


def _content_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("thought", "action", "response", "elicitation", "error", "prompt") else "other"


Content = Annotated[
    Annotated[Thought, Tag("thought")]
    | Annotated[Action, Tag("action")]
    | Annotated[Response, Tag("response")]
    | Annotated[Elicitation, Tag("elicitation")]
    | Annotated[Error, Tag("error")]
    | Annotated[Prompt, Tag("prompt")]
    | Annotated[OtherContent, Tag("other")],
    Discriminator(_content_kind),
]

#: A signal on an activity (``AgentActivitySignal``): ``stop`` on a person's prompt asks the agent to stop.
STOP = "stop"


class AgentActivity(Wire):
    """An activity of a session: beflow's (thought, action, response, elicitation, error) or a person's (prompt)."""

    id: Id
    createdAt: dt.datetime
    updatedAt: dt.datetime | None = None
    #: An ephemeral activity is replaced by the next one (a progress line).
    ephemeral: bool = False
    signal: str | None = None
    signalMetadata: Any = None
    user: UserRef
    #: The comment the activity came from (a prompt written as a comment in the issue).
    sourceComment: Ref | None = None
    content: Content

    @property
    def stops(self) -> bool:
        """Whether this is a person's ``stop`` signal."""
        return self.signal == STOP


class AgentSessionWithActivities(AgentSession):
    """A session with a page of its activities (``BeflowAgentSession``)."""

    activities: Connection[AgentActivity]


#: What beflow posts in a session.
Said = Thought | Action | Response | Elicitation | Error


def content_input(content: Said) -> dict[str, Any]:
    """The ``content`` of an ``agentActivityCreate`` input (a JSONObject): the content's own fields, none left null."""
    return content.model_dump(exclude_none=True)


# -- what the mutations answer ---------------------------------------------------------------------------------------


class CommentCreated(Wire):
    """``commentCreate`` and ``commentUpdate`` answer the comment (a created one with its issue)."""

    success: bool
    comment: CommentOnIssue


class IssueUpdated(Wire):
    success: bool
    issue: Issue | None = None


class LabelCreated(Wire):
    success: bool
    issueLabel: Label


class SessionWritten(Wire):
    success: bool
    agentSession: AgentSession


class ActivityCreated(Wire):
    success: bool
    agentActivity: AgentActivity


# -- errors and rate limits ------------------------------------------------------------------------------------------

#: ``extensions.code`` of the errors beflow acts on (Linear's SDK reads ``extensions.type``, the same in words).
RATELIMITED = "RATELIMITED"
AUTHENTICATION_ERROR = "AUTHENTICATION_ERROR"
FORBIDDEN = "FORBIDDEN"
INVALID_INPUT = "INVALID_INPUT"
#: A GraphQL document Linear's schema does not validate (a bug of beflow's, or a field Linear removed).
GRAPHQL_VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"


class ErrorExtensions(Wire):
    code: str | None = None
    #: The kind in words (``ratelimited``, ``authentication error``, ``invalid input``, ...).
    type: str | None = None
    userError: bool | None = None
    userPresentableMessage: str | None = None


class GraphQLError(Wire):
    message: str = ""
    path: list[str | int] | None = None
    extensions: ErrorExtensions = ErrorExtensions()

    @property
    def code(self) -> str | None:
        """The kind of error: ``extensions.code``, else its words of ``extensions.type`` as a code."""
        if self.extensions.code:
            return self.extensions.code
        kind = self.extensions.type
        return kind.upper().replace(" ", "_") if kind else None

    @property
    def text(self) -> str:
        return self.extensions.userPresentableMessage or self.message or (self.code or "error")


class Envelope(Wire):
    """A GraphQL answer: ``data`` (null when the request failed whole), and the ``errors`` if any."""

    data: dict[str, Any] | None = None
    errors: list[GraphQLError] = Field(default_factory=list)

    @field_validator("errors", mode="before")
    @classmethod
    def _errors(cls, value: Any) -> Any:
        return [] if value is None else value

    @property
    def codes(self) -> list[str]:
        return [code for error in self.errors if (code := error.code)]

    @property
    def rate_limited(self) -> bool:
        return RATELIMITED in self.codes


def _millis(value: Any) -> dt.datetime | None:
    text = value.strip() if isinstance(value, str) else ""
    if not (text.isascii() and text.isdigit()):
        return None
    return dt.datetime.fromtimestamp(int(text) / 1000, dt.UTC)


def _whole(value: Any) -> int | None:
    text = value.strip() if isinstance(value, str) else ""
    return int(text) if text.isascii() and text.isdigit() else None


@dataclass(frozen=True)
class RateHeaders:
    """What Linear says of its rate limits in an answer's headers; each None when absent or no number.

    Linear meters each token by two leaky buckets, requests and complexity points, and some endpoints by a third;
    every answer says what is left of each and when the bucket is full again (epoch milliseconds), and ``X-Complexity``
    what the request cost: https://linear.app/developers/rate-limiting
    """

    requests_limit: int | None = None
    requests_remaining: int | None = None
    requests_reset: dt.datetime | None = None
    complexity_limit: int | None = None
    complexity_remaining: int | None = None
    complexity_reset: dt.datetime | None = None
    #: What this request cost (``X-Complexity``).
    complexity: int | None = None
    endpoint_name: str | None = None
    endpoint_remaining: int | None = None
    endpoint_reset: dt.datetime | None = None
    #: Seconds to wait, when sent (Linear's SDK reads it with a rate-limit error).
    retry_after: int | None = None

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> RateHeaders:
        lower = {key.lower(): value for key, value in headers.items()}
        name = lower.get("x-ratelimit-endpoint-name")
        return cls(
            requests_limit=_whole(lower.get("x-ratelimit-requests-limit")),
            requests_remaining=_whole(lower.get("x-ratelimit-requests-remaining")),
            requests_reset=_millis(lower.get("x-ratelimit-requests-reset")),
            complexity_limit=_whole(lower.get("x-ratelimit-complexity-limit")),
            complexity_remaining=_whole(lower.get("x-ratelimit-complexity-remaining")),
            complexity_reset=_millis(lower.get("x-ratelimit-complexity-reset")),
            complexity=_whole(lower.get("x-complexity")),
            endpoint_name=name.strip() if isinstance(name, str) and name.strip() else None,
            endpoint_remaining=_whole(lower.get("x-ratelimit-endpoint-requests-remaining")),
            endpoint_reset=_millis(lower.get("x-ratelimit-endpoint-requests-reset")),
            retry_after=_whole(lower.get("retry-after")),
        )

    def resumes(self, now: dt.datetime, *, limited: bool = False) -> dt.datetime | None:
        """When a spent budget allows requests again: the latest reset of the buckets that are empty (or
        ``Retry-After`` from ``now``). ``limited``: the answer was ``RATELIMITED`` though no bucket is empty (the
        request cost more complexity than was left): the latest reset of any bucket. None when nothing says."""
        buckets = (
            (self.requests_remaining, self.requests_reset),
            (self.complexity_remaining, self.complexity_reset),
            (self.endpoint_remaining, self.endpoint_reset),
        )
        spent = [reset for remaining, reset in buckets if remaining == 0 and reset is not None]
        if self.retry_after is not None:
            spent.append(now + dt.timedelta(seconds=self.retry_after))
        if not spent and limited:
            spent = [reset for _, reset in buckets if reset is not None]
        return max(spent, default=None)


class RateLimit(Wire):
    """One bucket as ``rateLimitStatus`` reports it (``type``: ``requestCount``, ``queryComplexity``, ...)."""

    type: str
    allowedAmount: float
    remainingAmount: float
    #: The bucket's period, and when it is full again (epoch milliseconds).
    period: float
    reset: float


class RateLimitStatus(Wire):
    kind: str
    limits: list[RateLimit]


class RateLimitAnswer(Wire):
    """The answer to ``BeflowRateLimitStatus`` (``beflow doctor``)."""

    rateLimitStatus: RateLimitStatus


# -- parsing -------------------------------------------------------------------------------------------------------

M = TypeVar("M", bound=Wire)

_answers = Answers("Linear", MalformedAnswer)
parse, listed, parse_list = _answers.parse, _answers.listed, _answers.parse_list


@dataclass(frozen=True)
class Unread:
    """An item of a listing that does not read as its model: what names it, as far as that reads, and why."""

    id: str | None
    identifier: str | None
    why: str


def read(model: type[M], item: Any) -> M | Unread:
    """One item of a listing as ``model``, or what names it and why it does not read."""
    try:
        return model.model_validate(item)
    except ValidationError as error:
        fields = item if isinstance(item, dict) else {}
        id_, identifier = fields.get("id"), fields.get("identifier")
        return Unread(
            id=id_ if isinstance(id_, str) else None,
            identifier=identifier if isinstance(identifier, str) else None,
            why=problem(error),
        )


def read_each(model: type[M], nodes: Any, what: str) -> tuple[list[M], list[Unread]]:
    """The nodes of a page that read as ``model``, and those that do not; ``nodes`` that are no list at all are
    :class:`MalformedAnswer`."""
    got = [read(model, item) for item in listed(nodes, what)]
    return [g for g in got if not isinstance(g, Unread)], [g for g in got if isinstance(g, Unread)]
