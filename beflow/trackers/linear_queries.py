"""The GraphQL documents beflow sends to Linear, one constant each, and the filter of its issue listing.

Each document is complete (its fragments included), names its operation (``BeflowIssues``: Linear's logs and the
rate-limit headers are per request, and a name says which request it was) and selects what
:mod:`beflow.trackers.linear_wire` reads, no more: Linear bills every query by its complexity (every field a tenth of
a point, every object one, a connection multiplies its nodes by ``first``), so the listings ask for few fields and
pages of a bounded size. The tests validate every document against Linear's published schema, so a field Linear
renamed fails the suite, naming the document and the field.

Issues are read by ``id`` as Linear takes it: its UUID or its identifier (``ENG-123``) alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The page size of the listings: Linear's default is 50; a page of issues with its labels stays well below
#: Linear's cap on one query's complexity.
PAGE = 50

USER = """
fragment BeflowUser on User {
  id
  name
  displayName
  app
  active
}
"""

STATE = """
fragment BeflowState on WorkflowState {
  id
  name
  type
  position
}
"""

#: An issue as beflow reads it (with :data:`STATE` and :data:`USER`). Its first 20 labels by name (a connection
#: multiplies the cost of a listing by its page size), and the ids of all of them: the names of an issue with more
#: are read from its team's labels.
ISSUE = """
fragment BeflowIssue on Issue {
  id
  identifier
  title
  description
  priority
  createdAt
  updatedAt
  url
  state { ...BeflowState }
  team { id key }
  project { id name }
  labels(first: 20) { nodes { id name } }
  labelIds
  assignee { ...BeflowUser }
  delegate { ...BeflowUser }
}
"""

#: A comment as beflow reads it (with :data:`USER`).
COMMENT = """
fragment BeflowComment on Comment {
  id
  body
  createdAt
  updatedAt
  editedAt
  archivedAt
  parentId
  user { ...BeflowUser }
}
"""

SESSION = """
fragment BeflowSession on AgentSession {
  id
  status
  createdAt
  updatedAt
  startedAt
  endedAt
  url
  issue { id identifier }
  appUser { id }
  creator { id name }
  externalLinks { label url }
}
"""

#: An activity, its content one of the six kinds of ``AgentActivityContent``.
ACTIVITY = """
fragment BeflowActivity on AgentActivity {
  id
  createdAt
  updatedAt
  ephemeral
  signal
  signalMetadata
  user { id name app }
  sourceComment { id }
  content {
    __typename
    ... on AgentActivityThoughtContent { type body }
    ... on AgentActivityActionContent { type action parameter result }
    ... on AgentActivityResponseContent { type body }
    ... on AgentActivityElicitationContent { type body }
    ... on AgentActivityErrorContent { type body reasonCode }
    ... on AgentActivityPromptContent { type body title }
  }
}
"""


def _document(operation: str, *fragments: str) -> str:
    """An operation with the fragments it spreads (each once)."""
    return (
        operation.strip()
        + "\n"
        + "".join(fragment for n, fragment in enumerate(fragments) if fragment not in fragments[:n])
    )


# -- reads -----------------------------------------------------------------------------------------------------------

#: Who the token is: a person (a personal API key, or OAuth on a person's behalf) or an app user (OAuth with
#: ``actor=app``: the only kind that may open agent sessions); and the workspace, whose ``urlKey`` is in every URL.
VIEWER = _document(
    """
query BeflowViewer {
  viewer { ...BeflowUser email }
  organization { id name urlKey }
}
""",
    USER,
)

#: A team by its key, with its workflow states (by ``position``: the order Linear shows them in) and its labels.
TEAM = _document(
    """
query BeflowTeam($key: String!) {
  teams(filter: { key: { eq: $key } }, first: 1) {
    nodes {
      id
      key
      name
      states(first: 100) { nodes { ...BeflowState } }
      labels(first: 250) { nodes { id name } pageInfo { hasNextPage endCursor } }
    }
  }
}
""",
    STATE,
)

#: The workflow states of a team (a team with more than a page of states is none Linear makes).
WORKFLOW_STATES = _document(
    """
query BeflowWorkflowStates($teamKey: String!) {
  workflowStates(filter: { team: { key: { eq: $teamKey } } }, first: 100) {
    nodes { ...BeflowState team { id key } }
  }
}
""",
    STATE,
)

#: A team's issues matching ``filter`` (:func:`issue_filter`), the last updated first, a page at a time.
ISSUES = _document(
    """
query BeflowIssues($filter: IssueFilter!, $first: Int!, $after: String) {
  issues(filter: $filter, first: $first, after: $after, orderBy: updatedAt) {
    nodes { ...BeflowIssue }
    pageInfo { hasNextPage endCursor }
  }
}
""",
    ISSUE,
    STATE,
    USER,
)

#: What changed since the last look: ids and times alone, the cheapest question an idle poll asks (one request, a
#: fraction of a point for each issue).
CHANGED = """
query BeflowChanged($filter: IssueFilter!, $first: Int!) {
  issues(filter: $filter, first: $first, orderBy: updatedAt) {
    nodes { id identifier updatedAt }
    pageInfo { hasNextPage endCursor }
  }
}
"""

#: The issues one issue is blocked by: the relations of type ``blocks`` that point at it (its inverse relations), each
#: with the blocking issue's state. Asked only of an issue about to be dispatched.
BLOCKERS = _document(
    """
query BeflowBlockers($id: String!, $first: Int!) {
  issue(id: $id) {
    inverseRelations(first: $first) {
      nodes { type issue { id identifier state { ...BeflowState } } }
    }
  }
}
""",
    STATE,
)

#: One issue with its first page of comments by creation (Linear gives the latest first).
ISSUE_WITH_COMMENTS = _document(
    """
query BeflowIssue($id: String!, $first: Int!) {
  issue(id: $id) {
    ...BeflowIssue
    comments(first: $first, orderBy: createdAt) {
      nodes { ...BeflowComment }
      pageInfo { hasNextPage endCursor }
    }
  }
}
""",
    ISSUE,
    STATE,
    USER,
    COMMENT,
)

#: The next pages of an issue's comments; ``includeArchived`` also gives the ones deleted since, and ``filter`` picks
#: (a claim reads beflow's own, ``{"user": {"isMe": {"eq": true}}}``, deleted ones too: an id once taken stays taken).
COMMENTS = _document(
    """
query BeflowComments($id: String!, $first: Int!, $after: String, $includeArchived: Boolean, $filter: CommentFilter) {
  issue(id: $id) {
    id
    comments(first: $first, after: $after, orderBy: createdAt, includeArchived: $includeArchived, filter: $filter) {
      nodes { ...BeflowComment }
      pageInfo { hasNextPage endCursor }
    }
  }
}
""",
    COMMENT,
    USER,
)

#: One comment by its id, with the issue it is on: how a claim is read back.
COMMENT_BY_ID = _document(
    """
query BeflowComment($id: String!) {
  comment(id: $id) {
    ...BeflowComment
    issue { id identifier }
  }
}
""",
    COMMENT,
    USER,
)

#: An agent session with its activities (a person's prompts and ``stop`` signal among them), the latest first.
AGENT_SESSION = _document(
    """
query BeflowAgentSession($id: String!, $first: Int!, $after: String) {
  agentSession(id: $id) {
    ...BeflowSession
    activities(first: $first, after: $after, orderBy: createdAt) {
      nodes { ...BeflowActivity }
      pageInfo { hasNextPage endCursor }
    }
  }
}
""",
    SESSION,
    ACTIVITY,
)

#: The latest agent sessions of an issue: a person's delegation or mention opened one that waits for its agent.
ISSUE_SESSIONS = _document(
    """
query BeflowIssueSessions($id: String!) {
  issue(id: $id) {
    id
    agentSessions(first: 10) { nodes { ...BeflowSession } }
  }
}
""",
    SESSION,
)

#: The people's messages (prompts) in an issue's latest agent sessions, for review rounds: who wrote each (a member
#: of the workspace or not), and whether it is a stop signal.
ISSUE_PROMPTS = """
query BeflowIssuePrompts($id: String!) {
  issue(id: $id) {
    id
    url
    agentSessions(first: 10) {
      nodes {
        id
        startedAt
        url
        appUser { id }
        activities(first: 50, filter: {type: {in: ["prompt", "elicitation"]}}) {
          nodes {
            id
            createdAt
            signal
            user { id name displayName app active guest }
            content {
              __typename
              ... on AgentActivityPromptContent { type body }
              ... on AgentActivityElicitationContent { type body }
            }
          }
        }
      }
    }
  }
}
"""

#: The rate-limit budgets left, for ``beflow doctor``.
RATE_LIMIT_STATUS = """
query BeflowRateLimitStatus {
  rateLimitStatus {
    kind
    limits { type allowedAmount remainingAmount requestedAmount period reset }
  }
}
"""

# -- writes ----------------------------------------------------------------------------------------------------------

#: A comment on an issue (``input``: ``issueId``, ``body``; ``id`` a UUID beflow chooses, which makes the create
#: happen at most once: a second create with the same id fails, so a retry after a lost answer cannot double it).
COMMENT_CREATE = _document(
    """
mutation BeflowCommentCreate($input: CommentCreateInput!) {
  commentCreate(input: $input) {
    success
    comment { ...BeflowComment issue { id } }
  }
}
""",
    COMMENT,
    USER,
)

#: beflow's own comment edited in place (the progress comment).
COMMENT_UPDATE = _document(
    """
mutation BeflowCommentUpdate($id: String!, $input: CommentUpdateInput!) {
  commentUpdate(id: $id, input: $input) {
    success
    comment { ...BeflowComment }
  }
}
""",
    COMMENT,
    USER,
)

#: An issue's state, assignee, delegate or labels changed (``input`` holds only what changes).
ISSUE_UPDATE = _document(
    """
mutation BeflowIssueUpdate($id: String!, $input: IssueUpdateInput!) {
  issueUpdate(id: $id, input: $input) {
    success
    issue { ...BeflowIssue }
  }
}
""",
    ISSUE,
    STATE,
    USER,
)

#: An issue filed in a team (``beflow issues create``; ``input``: ``teamId``, ``title``, ``description``, ``labelIds``,
#: ``priority``, ``stateId``, ``projectId``, and ``id`` a UUID beflow chooses: a retry cannot file it twice).
ISSUE_CREATE = _document(
    """
mutation BeflowIssueCreate($input: IssueCreateInput!) {
  issueCreate(input: $input) {
    success
    issue { ...BeflowIssue }
  }
}
""",
    ISSUE,
    STATE,
    USER,
)

#: A label of a team (beflow's status labels: ``beflow:failed``, ...), made when the team has none of the name.
LABEL_CREATE = """
mutation BeflowLabelCreate($input: IssueLabelCreateInput!) {
  issueLabelCreate(input: $input) {
    success
    issueLabel { id name }
  }
}
"""

#: An agent session opened by beflow on an issue (an app token only; a session opened by a person's delegation or
#: mention arrives by webhook or in the issue's sessions instead).
AGENT_SESSION_CREATE_ON_ISSUE = _document(
    """
mutation BeflowAgentSessionCreate($input: AgentSessionCreateOnIssue!) {
  agentSessionCreateOnIssue(input: $input) {
    success
    agentSession { ...BeflowSession }
  }
}
""",
    SESSION,
)

#: A session's links (the pull request), or its plan.
AGENT_SESSION_UPDATE = _document(
    """
mutation BeflowAgentSessionUpdate($id: String!, $input: AgentSessionUpdateInput!) {
  agentSessionUpdate(id: $id, input: $input) {
    success
    agentSession { ...BeflowSession }
  }
}
""",
    SESSION,
)

#: An activity of beflow's in a session: ``content`` is ``{"type": "thought", "body": ...}``, ``{"type": "action",
#: "action": ..., "parameter": ..., "result": ...}``, ``response``, ``elicitation`` or ``error`` with a body.
AGENT_ACTIVITY_CREATE = _document(
    """
mutation BeflowAgentActivityCreate($input: AgentActivityCreateInput!) {
  agentActivityCreate(input: $input) {
    success
    agentActivity { ...BeflowActivity }
  }
}
""",
    ACTIVITY,
)

#: Every document beflow sends, by its operation's name (the tests validate each against Linear's schema).
DOCUMENTS: dict[str, str] = {
    "BeflowViewer": VIEWER,
    "BeflowTeam": TEAM,
    "BeflowWorkflowStates": WORKFLOW_STATES,
    "BeflowIssues": ISSUES,
    "BeflowChanged": CHANGED,
    "BeflowIssue": ISSUE_WITH_COMMENTS,
    "BeflowBlockers": BLOCKERS,
    "BeflowComments": COMMENTS,
    "BeflowComment": COMMENT_BY_ID,
    "BeflowAgentSession": AGENT_SESSION,
    "BeflowIssueSessions": ISSUE_SESSIONS,
    "BeflowIssuePrompts": ISSUE_PROMPTS,
    "BeflowRateLimitStatus": RATE_LIMIT_STATUS,
    "BeflowCommentCreate": COMMENT_CREATE,
    "BeflowCommentUpdate": COMMENT_UPDATE,
    "BeflowIssueUpdate": ISSUE_UPDATE,
    "BeflowIssueCreate": ISSUE_CREATE,
    "BeflowLabelCreate": LABEL_CREATE,
    "BeflowAgentSessionCreate": AGENT_SESSION_CREATE_ON_ISSUE,
    "BeflowAgentSessionUpdate": AGENT_SESSION_UPDATE,
    "BeflowAgentActivityCreate": AGENT_ACTIVITY_CREATE,
}


def issue_filter(
    team: str,
    *,
    project: str | None = None,
    labels: Sequence[str] = (),
    state_types: Sequence[str] = (),
    updated_after: str | None = None,
    delegate: str | None = None,
    handed: bool = False,
) -> dict[str, Any]:
    """The ``IssueFilter`` of a team's issues (by its key): in ``project`` (by name) if given, in a state of one of
    ``state_types``, updated after ``updated_after`` (ISO 8601), and carrying every one of ``labels`` (each without
    regard to case) or delegated to the user ``delegate`` (an id: beflow's app user) whatever their labels; ``handed``:
    or delegated to the token's own user (whoever asks: Linear's ``isMe``; only an app user can be a delegate)."""
    parts: list[dict[str, Any]] = [{"team": {"key": {"eq": team}}}]
    if project is not None:
        parts.append({"project": {"name": {"eq": project}}})
    if state_types:
        parts.append({"state": {"type": {"in": list(state_types)}}})
    if updated_after is not None:
        parts.append({"updatedAt": {"gt": updated_after}})
    # Every label, each matched without regard to case (Linear keeps a label's name as typed, and finds it so).
    labelled: list[dict[str, Any]] = [{"labels": {"some": {"name": {"eqIgnoreCase": name}}}} for name in labels]
    given: list[dict[str, Any]] = [{"delegate": {"id": {"eq": delegate}}}] if delegate is not None else []
    if handed:
        given += [{"delegate": {"isMe": {"eq": True}}}]
    if labelled and given:
        parts.append({"or": [{"and": labelled}, *given]})
    else:
        parts.extend(labelled)
    return {"and": parts}
