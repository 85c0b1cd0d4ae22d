"""What every code host speaks: where a run's branch is pushed and proposed as a pull request.

A code host is chosen apart from the tracker (``code_host`` in the config; a GitHub tracker implies GitHub's for its
repository): the local tracker can open GitHub pull requests, and a tracker of another kind can too. Delivery
(:mod:`beflow.run.delivery`) is its one caller in a run; docs/architecture.md says how to add one. A code host that
can say what its token may do answers :class:`~beflow.trackers.base.ChecksAccess`, as a tracker does
(``beflow doctor`` asks both).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from beflow.trackers.base import Tracker


@dataclass(frozen=True)
class PullRequest:
    """A pull request of a run's branch: where people see it, and whether this call opened it (else it was open
    already and was updated)."""

    url: str
    opened: bool = False


@runtime_checkable
class CodeHost(Protocol):
    """Where branches go. Every method raises :class:`~beflow.errors.BeflowError` subclasses only, and may be
    called from a worker thread (delivery runs in one)."""

    #: A short description for people: ``GitHub repository octo/hello``.
    description: str

    def push(self, directory: Path, branch: str) -> str:
        """Push ``branch`` of the repository at ``directory`` (a fast-forward, never forced) to the URL the host
        resolved when it was opened, before any agent ran; the commit pushed."""
        ...

    def fetch(self, directory: Path, branch: str) -> str | None:
        """The commit ``branch`` points to on the host (another machine may have pushed it), its objects fetched
        into the repository at ``directory`` from the URL resolved when the host was opened; None when the host
        has no such branch. No local branch is moved."""
        ...

    def propose(self, branch: str, title: str, body: str, *, draft: bool) -> PullRequest:
        """Open a pull request from ``branch`` to the default branch, or update the one open for it."""
        ...

    def find(self, branch: str) -> PullRequest | None:
        """The open pull request of ``branch``, if there is one."""
        ...

    def held_secrets(self) -> list[str]:
        """Values that must never reach the agent, a log or a record (its token, however it was found)."""
        ...

    def branch_url(self, branch: str) -> str:
        """Where people see ``branch`` on the host (a pull request's body links best of N's other candidates)."""
        ...

    def commit_inert(self, text: str) -> str:
        """An agent's commit message made so that the host acts on nothing in it once the branch is pushed or merged
        (a closing keyword closes an issue when the commit reaches the default branch)."""
        ...


@dataclass(frozen=True)
class Landing:
    """What a code host says of a branch's open pull request, for landing it (``after_review.merge``): its head
    commit, the trusted people whose latest review approves it (never beflow's own token user) and those whose latest
    review asks for changes, and its head's checks (by name) that failed, that have not finished and that passed."""

    number: int
    branch: str
    head: str
    url: str
    draft: bool = False
    approved_by: tuple[str, ...] = ()
    changes_requested_by: tuple[str, ...] = ()
    failing: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    passed: tuple[str, ...] = ()


@runtime_checkable
class Lands(Protocol):
    """A code host that can merge a pull request beflow opened, once people approved it and its checks passed
    (:mod:`beflow.ops.landing` decides; the host reads and merges). Methods block and raise
    :class:`~beflow.errors.BeflowError` subclasses only."""

    def landing(self, branch: str) -> Landing | None:
        """The open pull request of ``branch`` as it is now (None: none is open)."""
        ...

    def land(self, landing: Landing, method: str) -> bool:
        """Merge ``landing``'s pull request by ``method`` (``merge``, ``squash``, ``rebase``) only while its head is
        still ``landing.head`` (the host refuses otherwise), then delete its branch; whether it was merged (False:
        the head moved, or the host would not merge it now)."""
        ...


@dataclass(frozen=True)
class Opened:
    """A project's tracker and code host, opened together (:func:`beflow.app.open_project`): a watch, a fleet's
    dispatcher and its workers each hold one."""

    tracker: Tracker
    code_host: CodeHost | None
