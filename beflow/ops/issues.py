"""The issue operations: ``beflow issues ...`` and the MCP tools call exactly these (docs/architecture.md).

Every operation works on whatever tracker the project's config names (the context opens it: beflow.app). Operations an
agent bound to one issue may use are marked ``agent=True``. Every operation on one issue declares its
``issue_field``, and :meth:`beflow.ops.operations.Operation.call` refuses a key other than the bound issue's (a tool
argument can never pick another issue).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, computed_field

from beflow.errors import OutOfScopeError, UsageError
from beflow.ops import rounds
from beflow.ops.agent_words import agent_follow_up, agent_words, posted_words
from beflow.ops.operations import Context, Input, Key, operation
from beflow.records.store import RunStore
from beflow.trackers import handovers
from beflow.trackers.base import SetsPriority, StreamsListings, TakesRework, Tracker, WritesIntoProject
from beflow.trackers.claims import ClaimInfo
from beflow.trackers.issue import (
    DEFAULT_PRIORITY,
    MAX_TEXT,
    TRANSITIONS,
    Comment,
    Issue,
    Listing,
    ListingStream,
    Status,
    check_transition,
    normalize_key,
)

#: Bounds on what callers (agents above all) may send: enough for any real issue, not for a flood.
MAX_TITLE = 200
MAX_LABELS = 20

KeyField = Field(min_length=1, max_length=100, description="The issue key, as `beflow issues list` shows it (e.g. 7).")


def tracker(context: Context, *, writes: bool = False) -> Tracker:
    """The project's tracker, opened once per context; for an operation that ``writes``, one that may write (else
    the error that says why not, before the operation reads anything)."""
    opened = context.open_tracker()
    if writes and isinstance(opened, WritesIntoProject):
        opened.check_writable()
    return opened


# --- inputs and results --------------------------------------------------------------------------------------------


class ListIssues(Input):
    status: Status | None = Field(default=None, description="Only issues with this status.")
    label: str | None = Field(default=None, max_length=100, description="Only issues with this label.")


class IssueKey(Input):
    key: Key = KeyField


class NewIssue(Input):
    title: str = Field(min_length=1, max_length=MAX_TITLE, description="One line saying what is to be done.")
    body: str = Field(default="", max_length=MAX_TEXT, description="The details, in Markdown.")
    labels: list[str] = Field(default_factory=list, max_length=MAX_LABELS, description="Labels, e.g. ['bug'].")
    priority: int = Field(
        default=DEFAULT_PRIORITY, ge=0, le=1000, description="Lower runs first: 0 is the most urgent; 2 is the default."
    )
    status: Literal["open", "ready"] | None = Field(
        default=None,
        description="'ready' lets runs pick it up at once, 'open' waits for a person. Default: ready for people, "
        "open (always) for agents.",
    )


class NewComment(Input):
    key: Key = KeyField
    text: str = Field(min_length=1, max_length=MAX_TEXT, description="The comment, in Markdown.")


class SetStatus(Input):
    key: Key = KeyField
    status: Status = Field(description="The new status; only allowed transitions are accepted.")
    note: str | None = Field(default=None, max_length=MAX_TEXT, description="Why, added as a comment.")


class SetPriority(Input):
    key: Key = KeyField
    priority: int = Field(ge=0, le=1000, description="Lower runs first: 0 is the most urgent; 2 is the default.")


class ChangeStatus(Input):
    key: Key = KeyField
    note: str | None = Field(default=None, max_length=MAX_TEXT, description="Why, added as a comment.")


class PriorityChange(BaseModel):
    key: str
    title: str
    previous: int
    priority: int


class IssueView(Issue):
    """An issue with who holds a claim on it right now (a run working on it), if anyone."""

    claim: ClaimInfo | None = None


class Commented(BaseModel):
    key: str
    comment: Comment


class StatusChange(BaseModel):
    key: str
    title: str
    previous: Status
    status: Status

    @computed_field  # type: ignore[prop-decorator]
    @property
    def changed(self) -> bool:
        return self.previous != self.status


# --- the operations ------------------------------------------------------------------------------------------------


def stream_issues(context: Context, payload: ListIssues) -> ListingStream:
    """``issue.list`` row by row, for a caller that renders it as it comes (``issues list``): a tracker that can read
    its issues one at a time (the local one) never holds them all."""
    trackers = tracker(context)
    if isinstance(trackers, StreamsListings):
        return trackers.stream(status=payload.status, label=payload.label)
    return ListingStream.of(trackers.listing(status=payload.status, label=payload.label))


@operation(
    "issue.list",
    title="List issues",
    description="List the project's issues (key, title, status, labels, priority), optionally only those with one "
    "status or label. Reads the tracker; cheap. Files that could not be read are reported in `problems`.",
    safety="read",
    category="issues",
    tags=("issues", "list"),
    tracker=True,
    whole="`beflow issues list --json`",
)
def list_issues(context: Context, payload: ListIssues) -> Listing:
    return tracker(context).listing(status=payload.status, label=payload.label)


@operation(
    "issue.show",
    title="Read the issue",
    description="Read your issue: title, status, labels, body and every comment, oldest first. Call it at the start, "
    "and again to see comments people added while you worked. Reads the tracker; cheap, always current.",
    safety="read",
    agent=True,
    issue_field="key",
    category="issues",
    tags=("issues", "read"),
    tracker=True,
    whole="the issue file named in `path` (read it with your own tools), or `beflow issues show KEY --json`",
)
def show_issue(context: Context, payload: IssueKey) -> IssueView:
    trackers = tracker(context)
    issue = trackers.get(payload.key)
    return IssueView(**issue.model_dump(), claim=trackers.holder(issue.key))


@operation(
    "issue.new",
    title="File a follow-up issue",
    description="File a new issue for work you found but should not do now (a separate bug, a refactoring, a "
    "missing test). Agents' issues are filed as 'open', linked to your issue both ways: a person decides when they "
    "are ready. Do not use it for progress notes on your own issue — report progress or comment instead. Writes to "
    "the tracker.",
    safety="action",
    agent=True,
    category="issues",
    tags=("issues", "write", "follow-up"),
    tracker=True,
    names_actor=False,  # only agents' follow-ups name who filed them, and an agent's session says who it is
)
def new_issue(context: Context, payload: NewIssue) -> Issue:
    body, labels, priority = payload.body, payload.labels, payload.priority
    if context.bound_issue is not None:
        if payload.status == "ready":
            raise UsageError("issues filed by an agent are open; a person makes them ready", fix="Leave out status.")
        status = Status.OPEN
        # Nor may its labels make it ready or urgent (docs/safety.md): a person decides both.
        prefix = context.project.config.tracker.status_label_prefix()
        labels, priority, _ = agent_follow_up([agent_words(context, label) for label in labels], priority, prefix)
        body = f"{body}\n\n_Follow-up of issue {context.bound_issue}, filed by {context.actor}._".strip()
    else:
        status = Status(payload.status or "ready")
    trackers = tracker(context, writes=True)
    title, body = posted_words(context, payload.title), posted_words(context, body)
    issue = trackers.create(title, body, labels, priority, status)
    if status == Status.READY:  # (a person's, never an agent's: theirs are open)
        handovers.mark(trackers, issue.key, f"{context.actor} filed it ready")
    if context.bound_issue is not None:
        # The link back: whoever reads the bound issue sees what was split off it.
        trackers.comment(context.bound_issue, f"Follow-up filed: issue {issue.key} — {issue.title}", context.actor)
    return issue


@operation(
    "issue.comment",
    title="Comment on the issue",
    description="Add a comment to your issue: what you found, what you changed, a question for the people who "
    "read it. Comments are kept forever; keep them short and useful (for a running status line, report progress "
    "instead). Writes to the tracker.",
    safety="action",
    agent=True,
    issue_field="key",
    category="issues",
    tags=("issues", "write", "comment"),
    tracker=True,
)
def comment_issue(context: Context, payload: NewComment) -> Commented:
    key, trackers = payload.key, tracker(context, writes=True)
    text = posted_words(context, payload.text)  # an agent's comment: its run's secrets masked, inert on GitHub
    comment = trackers.comment(key, text, author=context.actor)
    return Commented(key=normalize_key(key), comment=comment)


class Reworked(BaseModel):
    key: str
    comment: Comment
    #: Where the issue is now: an issue that was in review is back in the queue (ready) for a review round.
    status: Status
    #: Why it stays in review, when it does (its rounds reached ``feedback.max_rounds``).
    why: str | None = None
    #: It was in review and is back in the queue for a review round (an issue not yet in review is left where it
    #: is: its next run reads the comment with the issue, and its first review round answers it).
    queued: bool = False


@operation(
    "issue.rework",
    title="Ask for rework on an issue",
    description="Leave a comment on an issue as rework feedback: an issue in review goes back into the queue, and "
    "its next run is a review round that continues its branch with this comment in its prompt. Local tracker "
    "only (on GitHub, review the pull request or mention beflow's trigger). Writes to the tracker.",
    safety="action",
    issue_field="key",
    category="issues",
    tags=("issues", "write", "comment", "rounds"),
    tracker=True,
)
def rework_issue(context: Context, payload: NewComment) -> Reworked:
    trackers = tracker(context, writes=True)
    if not isinstance(trackers, TakesRework):
        raise UsageError(
            "--rework is the local tracker's: this project's tracker is not local",
            fix="On GitHub, review the pull request or mention the trigger (feedback.trigger) in a comment.",
        )
    issue = trackers.get(payload.key)
    comment = trackers.rework(issue.key, payload.text, context.actor)
    status, why, queued = issue.status, None, False
    most = context.project.config.feedback.max_rounds
    done = rounds.completed(RunStore(context.project.directory).records([issue.key]))
    if status == Status.REVIEW and done >= most:  # no more rounds: it stays in review, and says why
        planned = rounds.Plan(done + 1, capped=True)
        rounds.note_end(trackers, issue.key, planned, most)
        why = rounds.end_reason(planned, most)
    elif status == Status.REVIEW:  # back into the queue: the next run is a review round
        status = trackers.set_status(issue.key, Status.READY, author=context.actor).status
        queued = True
    return Reworked(key=issue.key, comment=comment, status=status, why=why, queued=queued)


#: What an agent bound to its issue may set it to: its work is ready for a person to look at (review), or it cannot
#: be done (failed). Queueing it again (ready), accepting the work (done) and closing it are a person's decisions:
#: an agent that could would re-queue itself past max_attempts, or approve itself past review.
AGENT_STATUSES = frozenset({Status.REVIEW, Status.FAILED})


def _change(context: Context, key: str, status: Status, note: str | None) -> StatusChange:
    if context.bound_issue is not None and status not in AGENT_STATUSES:
        raise OutOfScopeError(
            f"issue.set_status: an agent sets its issue to review or failed only; {status.value} is a person's "
            "decision",
            fix="Set review when the work is ready for a person, failed (with a note) when it cannot be done.",
        )
    trackers = tracker(context, writes=True)
    before = trackers.get(key)
    note = posted_words(context, note) if note is not None else None  # an agent's note is a comment, as its own
    if status == Status.READY:  # a person's hand-over, even of an issue labelled ready by hand (an agent sets none)
        check_transition(before.key, before.status, status)  # (no mark for a move that is refused)
        handovers.mark(trackers, before.key, f"{context.actor} moved it to ready")
    after = trackers.set_status(before.key, status, note=note, author=context.actor)
    return StatusChange(key=after.key, title=after.title, previous=before.status, status=after.status)


@operation(
    "issue.set_status",
    title="Set the issue's status",
    description="Move your issue to 'review' when the work is ready for a person, or 'failed' when it cannot be "
    "done (say why in `note`). An agent can set no other status (ready, done and closed are a person's decisions); "
    "only allowed transitions are accepted; the error lists them. Writes to the tracker.",
    safety="action",
    agent=True,
    issue_field="key",
    category="issues",
    tags=("issues", "write", "status"),
    tracker=True,
)
def set_status(context: Context, payload: SetStatus) -> StatusChange:
    return _change(context, payload.key, payload.status, payload.note)


@operation(
    "issue.close",
    title="Close an issue",
    description="Close an issue nobody will work on (any more). A run working on it is stopped by `beflow watch`. "
    "`issue.reopen` undoes it.",
    safety="action",
    issue_field="key",
    category="issues",
    tags=("issues", "write", "status"),
    tracker=True,
)
def close_issue(context: Context, payload: ChangeStatus) -> StatusChange:
    return _change(context, payload.key, Status.CLOSED, payload.note)


@operation(
    "issue.reopen",
    title="Reopen an issue",
    description="Make a closed, done or failed issue ready again, so that runs pick it up.",
    safety="action",
    issue_field="key",
    category="issues",
    tags=("issues", "write", "status"),
    tracker=True,
)
def reopen_issue(context: Context, payload: ChangeStatus) -> StatusChange:
    return _change(context, payload.key, Status.READY, payload.note)


#: The statuses a person may move an issue to (from the dashboard): every one but ``in_progress``, which only a run
#: sets (a run that starts claims the issue first).
PERSON_STATUSES = frozenset(Status) - {Status.IN_PROGRESS}


def person_choices(current: Status) -> list[Status]:
    """Where a person may move an issue from ``current``: the tracker's transitions, in the statuses' order."""
    return [s for s in Status if s in TRANSITIONS[current] and s in PERSON_STATUSES]


@operation(
    "issue.set_priority",
    title="Set an issue's priority",
    description="Change an issue's priority, and so its place in the queue (lower runs first; 0 is the most urgent). "
    "Local tracker only (elsewhere, change it in the tracker: a `priority:N` label, Linear's priority). Writes to "
    "the tracker.",
    safety="action",
    issue_field="key",
    category="issues",
    tags=("issues", "write", "priority"),
    tracker=True,
)
def set_priority(context: Context, payload: SetPriority) -> PriorityChange:
    trackers = tracker(context, writes=True)
    if not isinstance(trackers, SetsPriority):
        raise UsageError(
            "issue.set_priority is the local tracker's: this project's tracker keeps priorities itself",
            fix="Change the priority in the tracker (a `priority:N` label on GitHub and GitLab, Linear's priority).",
        )
    before = trackers.get(payload.key)
    after = trackers.set_priority(before.key, payload.priority, author=context.actor)
    return PriorityChange(key=after.key, title=after.title, previous=before.priority, priority=after.priority)
