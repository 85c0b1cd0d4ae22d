"""What every tracker speaks: the :class:`Tracker` protocol, and the capabilities only some trackers have.

Runs, the dispatcher and the operations behind ``beflow issues`` and the MCP server only ever talk to a tracker
through this protocol, so the local tracker and GitHub are interchangeable; what differs by tracker is a member
here, never a check elsewhere (docs/spec.md states the contract, docs/architecture.md says how to add a tracker).
The issue and its parts are :mod:`beflow.trackers.issue`'s; who runs an issue, :mod:`beflow.trackers.claims`'.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

from beflow.records.record import Answer, Question
from beflow.trackers.blockers import Blocker
from beflow.trackers.claims import Claim, ClaimInfo, ClaimStore
from beflow.trackers.issue import DEFAULT_PRIORITY, Comment, Issue, Listing, ListingStream, Status
from beflow.trackers.triggers import Heard


@runtime_checkable
class Tracker(Protocol):
    """Where issues live. Every method raises :class:`~beflow.errors.BeflowError` subclasses only."""

    #: A short description for people: ``local issues in /repo/.beflow/issues``.
    description: str
    #: The tracker, named the same on every machine (``github:owner/name``): a fleet names workflows with it.
    identity: str
    #: Who runs which issue: the tracker's own store, or the engine's over it (the ``claims=`` argument every
    #: tracker's constructor takes, :data:`~beflow.trackers.claims.ClaimsOver`).
    claims: ClaimStore

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

    def inert(self, text: str) -> str:
        """An agent's words as the tracker shows them, made to act on nothing (no mention, no issue closed or
        linked) where the tracker reads words as actions; as they are elsewhere."""
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
class KnowsBlockers(Protocol):
    """An issue may wait for others (the local tracker's ``blocked_by``, GitHub's issue dependencies, GitLab's
    blocking links, Linear's relations): a watch holds a ready issue back, and says why, until they are done."""

    def blockers(self, issue: Issue) -> list[Blocker]:
        """The issues ``issue`` (as a listing gave it) is blocked by, each with its status now. Asked only of an issue
        about to be dispatched; no request where the listing said it has none."""
        ...


@runtime_checkable
class HearsTriggers(Protocol):
    """A mention of the trigger by a person who may give beflow work (``mention``: the trigger, None: not heard), or
    an assignment to the token's user (``assign``), hands an open issue over: labelled ready by the tracker itself
    (docs/config.md#triggers). Only what changed since the last call is read: a watch asks once a poll."""

    def hear(self, mention: str | None, assign: bool) -> Heard: ...


@runtime_checkable
class MarksHandOvers(Protocol):
    """beflow's own hand-overs leave a mark on the issue only beflow's token writes, so that with ``triggers.label:
    false`` a ready label a person adds by hand starts nothing (docs/config.md#triggers, beflow.trackers.handovers).
    A tracker without it refuses ``triggers.label: false`` (beflow.app)."""

    #: Whether the config asks for marks (``triggers.label: false``): without, :meth:`mark_handed` does nothing.
    marks_hand_overs: bool

    def mark_handed(self, key: str, why: str) -> None:
        """Leave the mark that beflow handed ``key`` over, for ``why`` (shown to people, made inert)."""
        ...

    def unhanded(self, issue: Issue) -> str | None:
        """None when beflow handed ``issue`` over since its last run started; else why not. One request, asked only
        of an issue about to be dispatched."""
        ...


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


class AgentSession(Protocol):
    """One run shown as an agent's session on its issue (Linear's agent sessions): what it thinks, does and answers,
    as it goes. Every method is a request to the tracker (call it off the event loop); the words are the caller's to
    make inert and masked."""

    def thought(self, text: str) -> None: ...

    def action(self, action: str, parameter: str, *, ephemeral: bool = False) -> None:
        """A step: a tool call (``ephemeral``: the next activity replaces it), a progress line."""
        ...

    def respond(self, text: str, link: str | None = None) -> None:
        """The run's end: what it did, and the pull request it opened (``link``), which the session links to."""
        ...

    def error(self, text: str) -> None:
        """The run failed: why."""
        ...

    def elicit(self, text: str) -> None:
        """The run waits for a person: the agent's question (the session awaits their input)."""
        ...

    def stop_asked(self) -> bool:
        """Whether a person sent the session a stop signal (one cheap request)."""
        ...


@runtime_checkable
class HostsAgentSessions(Protocol):
    """A run can be an agent's session on the issue (Linear, with an app's token): opened as soon as the run starts,
    its steps and its end said there, and a person's stop signal heard. None: not with this token."""

    def agent_session(self, key: str) -> AgentSession | None: ...


@runtime_checkable
class ReadsPullRequests(Protocol):
    """The tracker's own code-host integration reads the pull requests beflow opens (Linear moves an issue named after
    ``Fixes`` in a title or body, in any part of it): the agent's words there, quoted ones too, made to act on
    nothing for it, as they are made inert for the code host."""

    def pull_request_inert(self, text: str) -> str: ...


@runtime_checkable
class HearsAnswers(Protocol):
    """A person may answer a run's question the tracker's own way too (on Linear, in the run's agent session, where
    the question was an elicitation): besides the first trusted comment after the question, that answer counts.
    The question itself is always one comment (:mod:`beflow.ops.questions`)."""

    def answer_of(self, key: str, question: Question, run_id: str) -> Answer | None:
        """A trusted person's answer to ``question`` given the tracker's own way, once there is one."""
        ...


@runtime_checkable
class TakesRework(Protocol):
    """A person asks for rework with a comment the next review round answers (``beflow issues comment --rework``:
    the local tracker; on GitHub, a review of the pull request or a mention of the trigger does it)."""

    def rework(self, key: str, text: str, author: str) -> Comment: ...


@runtime_checkable
class SetsPriority(Protocol):
    """An issue's priority changes in place (the queue's order, from the dashboard or ``issue.set_priority``): the
    local tracker's front matter. Elsewhere the tracker's own priority is the one to change (GitHub's and GitLab's
    ``priority:N`` label, Linear's priority field), in the tracker."""

    def set_priority(self, key: str, priority: int, author: str = "beflow") -> Issue: ...


@runtime_checkable
class WritesIntoProject(Protocol):
    """Its issues are files of the project (the local tracker): a write is refused, before anything is read, where
    the project is in no git work tree (as ``beflow init`` refuses there)."""

    def check_writable(self) -> None: ...


@runtime_checkable
class FlagsIssues(Protocol):
    """An issue can carry a flag for people beside its status (``needs-human``: beflow stopped fixing its failed
    checks): a label under the status prefix on GitHub and GitLab (``beflow:needs-human``), a label of the local
    issue's front matter (``needs-human``). A person lifts it by removing the label."""

    def flag_label(self, flag: str) -> str:
        """The label that says ``flag`` on an issue (:attr:`Issue.labels` holds it while it is flagged)."""
        ...

    def flag(self, key: str, flag: str, note: str) -> Issue:
        """Put ``flag`` on the issue, with ``note`` as one comment saying why."""
        ...


@runtime_checkable
class SetsUpLabels(Protocol):
    """Statuses are labels that must exist first (``beflow init`` creates them, ``beflow doctor`` names the
    missing ones)."""

    #: Where the labels are made, for people: ``GitHub issues of octo/hello``.
    labels_home: str

    def missing_labels(self) -> list[str]: ...

    def ensure_labels(self) -> list[str]: ...


@runtime_checkable
class NamesUnreadable(Protocol):
    """Issues it skips because they cannot be read (a hostile label on GitHub), by key, with why, as of its last
    listing: a watch names each once (the local tracker reports its files as ``Listing.problems`` instead)."""

    unreadable: dict[str, str]


class Finding(NamedTuple):
    """One thing a tracker or a code host found of its service, shown by ``beflow doctor`` as a line of its own."""

    #: The line's name (``gitlab``): the same finding of the tracker and of the code host is shown once.
    name: str
    ok: bool
    detail: str
    #: What to change when it is wrong (or worth a look).
    fix: str | None = None
    #: ok, but worth a look.
    warning: bool = False


@runtime_checkable
class ChecksAccess(Protocol):
    """Its service can be asked what beflow may do there (the token's scopes, the project, the right to push):
    ``beflow doctor`` shows each finding. A code host may answer it too (:mod:`beflow.codehosts.base`)."""

    def access_checks(self) -> list[Finding]: ...


@runtime_checkable
class ChecksSetup(Protocol):
    """Its service's setup can fail every run alike (a Jira workflow without a transition beflow takes): checked
    before any run starts, as :mod:`beflow.run.preflight` checks the configuration; a problem is a
    :class:`~beflow.errors.ConfigError` (the watch holds dispatching back and says so, ``--auto`` stops)."""

    def check_setup(self) -> None: ...


class RateBudget(NamedTuple):
    """What a rate-limited API last said of its limit."""

    remaining: int | None
    reset: float | None  # when it resets, seconds since the epoch
    limited: int  # requests refused for the limit so far


@runtime_checkable
class MetersRequests(Protocol):
    """Its API is rate limited (GitHub): what is left of the limit, as the API last said (the dashboard shows it)."""

    def rate_budget(self) -> RateBudget: ...
