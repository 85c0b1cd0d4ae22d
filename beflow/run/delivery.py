"""What an unattended run delivers: the agent's work committed, checked, put on its branch and proposed.

After the agent, in one worker thread (:func:`deliver`, synchronous, every git command in :func:`git.distrusting`):
commit what changed → read every commit of the run for leaks (the injected file, a secret of the run) → move
``beflow/<key>`` to the run's commit, only if it is still where the run found it (compare-and-swap) → push it and
open or update its pull request through the code host (a run that succeeded, when the config asks for it). Anything
that fails closed leaves the branch where it was and the work in the kept worktree, uncommitted when its commits
were refused. The answer is a :class:`Verdict` naming what happened; the runner applies it to the run's record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from beflow.codehosts.base import CodeHost
from beflow.errors import BeflowError
from beflow.paths import ACPXRC
from beflow.records.record import Outcome, RunRecord
from beflow.repository import commits, excludes, git, leaks, objectstore, refs, run_objects, status, worktrees
from beflow.trackers.claims import ClaimLost

#: What became of the run's work: ``committed`` (the branch holds the run's commit), ``unchanged`` (no new commit:
#: nothing changed, or nothing was to be committed), ``refused`` (its commits were undone into uncommitted changes:
#: a leak, the injected file not put back, the repository's git directory changed), ``failed`` (git failed: the work
#: is kept as it was).
Delivered = Literal["committed", "unchanged", "refused", "failed"]
#: What became of its pull request: ``opened``, ``updated``, ``failed`` (the branch is committed either way),
#: ``lost`` (another machine holds the issue now: nothing of this run was published), or None (not asked for).
Proposed = Literal["opened", "updated", "failed", "lost"]


@dataclass(frozen=True)
class Proposal:
    """How a succeeded run's branch is proposed: the pull request's title, its body for how the run ended
    (``body(verdict)``), whether it is a draft, the code host, and the claim's ``held()`` (a claim whose lease must
    be proven before each write: GitHub's)."""

    host: CodeHost
    title: str
    body: Callable[[Verdict], str]
    draft: bool = True
    held: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext


@dataclass(frozen=True)
class Job:
    """One run's delivery: its worktree, how its agent ended, and what must be checked before the branch moves."""

    worktree: worktrees.Worktree
    #: The repository's directory (a push borrows its objects).
    directory: Path
    outcome: Outcome
    reason: str
    #: The commit message (None: ``after_run.commit`` is false, nothing is committed).
    message: str | None
    #: Bytes no commit may hold (the injected file, every secret of the run).
    needles: Sequence[bytes] = ()
    #: Whether the managed file was injected (its copies under another name are looked for too).
    managed: bool = False
    #: Why the work must not be committed at all, if it must not (the injected file not put back; the agent changed
    #: the repository's git directory).
    refuse: str | None = None
    #: Whether that refusal is for good: no retry (a person must look).
    refuse_for_good: bool = False
    #: Whether the managed file was hidden from git in the worktree (it is unhidden before the commit).
    hidden: bool = False
    run_id: str = ""
    proposal: Proposal | None = None
    #: A review round's commit message once it succeeded (with a ``Beflow-Feedback`` trailer per piece it
    #: answered): the round's commit on top of the branch, an empty one when the agent changed nothing.
    #: (the message, the message of an empty commit).
    answered: tuple[str, str] | None = None
    #: The agent's own commit messages made inert for what reads them once pushed (None: kept as written).
    words: Callable[[str], str] | None = None


@dataclass(frozen=True)
class Verdict:
    """What delivery did, for the run's record and its ending."""

    delivered: Delivered
    outcome: Outcome
    reason: str
    #: The run's commit on the branch (None: no new commit).
    commit: str | None = None
    changed_files: tuple[str, ...] = ()
    #: The worktree is kept for a person (dirty, refused, failed); else it can go.
    worktree_kept: bool = False
    #: The worktree still has changes nobody committed: kept, and so named in ``reason``.
    dirty: bool = False
    permanent: bool = False
    proposed: Proposed | None = None
    pull_request: str | None = None
    #: Why the claim was lost while publishing, if it was.
    claim_lost: str | None = None
    #: What the terminal is told.
    notices: tuple[str, ...] = field(default_factory=tuple)

    def onto(self, record: RunRecord) -> RunRecord:
        """``record`` with what delivery did written into it (its commit, files, pull request, whether the worktree
        is kept and whether the run is not to be tried again); the outcome is the run's ending to write."""
        record.commit = self.commit
        record.changed_files = list(self.changed_files)
        record.permanent = record.permanent or self.permanent
        record.worktree_kept = self.worktree_kept
        if self.pull_request is not None:
            record.pull_request = self.pull_request
        return record


def deliver(job: Job) -> Verdict:
    """Commit, check, move the branch and propose it (see the module's description). Whatever goes wrong while
    committing, the worktree is kept and named: the agent's work is never lost, and the run is still recorded."""
    # The agent has run: no hook, no configured command in beflow's git from here. One repository object of the
    # worktree serves every call (it holds git's `cat-file` processes: closed at the end).
    with git.distrusting(), contextlib.ExitStack() as stack:
        try:
            at = stack.enter_context(worktrees.open_worktree(job.worktree))
            verdict = _commit(job, at)
        except Exception as error:
            why = error.message if isinstance(error, BeflowError) else f"{type(error).__name__}: {error}"
            reason = f"{job.reason}; committing the work failed ({why}); the work is kept in {job.worktree.path}"
            return Verdict("failed", "failed", reason, worktree_kept=True)
        # A round that changed nothing still publishes its (empty) commit: it says, on the branch, what it answered.
        publish = verdict.outcome == "succeeded" or (job.answered is not None and verdict.outcome == "no_changes")
        if job.proposal is not None and publish and verdict.commit is not None:
            verdict = _propose(job, job.proposal, verdict)
    return verdict


def _commit(job: Job, at: git.At) -> Verdict:
    worktree, reason = job.worktree, job.reason
    if job.refuse is not None:
        return _refused(worktree, at, f"{reason}; {job.refuse}", permanent=job.refuse_for_good)
    objects = run_objects.run_objects_of(worktree)
    if objects is not None and (forged := objectstore.verify_directory(objects)):
        # The sandbox's agent wrote objects whose bytes are not what their names say: none is brought in.
        why = f"the agent wrote objects that are not what their names say ({', '.join(forged[:5])})"
        return _refused(worktree, at, f"{reason}; {why}", permanent=True)
    if job.hidden:
        excludes.unhide_managed_file(at)
    message, empty = job.message, None
    if job.message is not None and job.answered is not None and job.outcome == "succeeded":
        message, empty = job.answered
    try:
        # Built by beflow on what the agent's HEAD names, if that descends from the run's start; no ref moves.
        head, made = commits.build(at, worktree, message, empty=empty, words=job.words)
    except BeflowError as error:
        why = f"{reason}; {error.message}; the work is kept in {worktree.path}"
        return Verdict("failed", "failed", why, worktree_kept=True)
    # Every commit of the run (the agent's own included) is checked before the branch moves to it. A continued
    # branch is checked from the base (as it was when the run started), whole: it may hold commits no run of this
    # issue made (moved by hand, or by another run's agent, which shares the repository), and all of them would be
    # pushed.
    since = worktree.checked_from or worktree.base_commit
    found = leaks.find_leaks(at, since, head, job.needles, managed=job.managed)
    if found:
        return _refused(worktree, at, f"{reason}; {found[0].describe(_leak_name(at, worktree, found[0], head, made))}")
    if head != worktree.tip:
        try:
            commits.publish(at, worktree.branch, head, worktree.tip, f"beflow run {job.run_id}")
        except BeflowError as error:
            why = f"{reason}; {error.message}; the work is commit {head[:12]} in {worktree.path}"
            return Verdict("failed", "failed", why, worktree_kept=True)
    commit = head if head != worktree.base_commit else None
    changed = status.changed_files(at, worktree.base_commit, head)
    if job.message is None:
        # Nothing is committed: what changed is what the worktree's status says, left there for a person.
        changed += _status(at)
    outcome = job.outcome
    if outcome == "succeeded" and not changed:
        outcome, reason = "no_changes", "the agent finished without changing any file"
    dirty = status.is_dirty(at)
    if dirty:
        why = "after_run.commit is false" if job.message is None else "uncommitted changes"
        reason += f"; the worktree is kept ({why}): {worktree.path}"
    delivered: Delivered = "committed" if commit is not None else "unchanged"
    return Verdict(delivered, outcome, reason, commit, tuple(changed), worktree_kept=dirty, dirty=dirty)


def _refused(worktree: worktrees.Worktree, at: git.At, why: str, *, permanent: bool = False) -> Verdict:
    """Fail closed: the branch is not moved, the run's commits are undone into uncommitted changes (nothing names
    them any more), and the worktree is kept with the work."""
    with contextlib.suppress(Exception):
        commits.uncommit(at, worktree.base_commit)
    changed: list[str] = []
    with contextlib.suppress(Exception):
        changed = _status(at)
    # Whatever the agent achieved, the run did not deliver it: failed.
    reason = (
        f"{why}: nothing was committed and {worktree.branch} was not updated; the work is kept as uncommitted "
        f"changes in {worktree.path}"
    )
    return Verdict("refused", "failed", reason, None, tuple(changed), worktree_kept=True, permanent=permanent)


def _leak_name(at: git.At, worktree: worktrees.Worktree, leak: leaks.Leak, head: str, made: bool) -> str:
    """The leaking commit as the user can find it: the refusal undoes the run's commits (nothing names them any
    more), so only one already on the branch is named by its id."""
    if worktree.tip is not None and refs.is_ancestor(at, leak.commit, worktree.tip):
        return f"commit {leak.commit[:12]} on {worktree.branch}"
    if made and leak.commit == head:
        return "the agent's uncommitted work"
    return "a commit the agent made during the run"


def _status(at: git.At) -> list[str]:
    return [f"{code.strip()}\t{path}" for path, code in status.checkout_status(at).items() if path != ACPXRC]


def _propose(job: Job, proposal: Proposal, verdict: Verdict) -> Verdict:
    """Push the branch and open (or, on a retry, update) its pull request; a failure is said, not fatal: the work
    is committed on the branch either way."""
    assert verdict.commit is not None
    body = proposal.body(verdict)
    branch = job.worktree.branch
    try:
        with proposal.held():  # the claim is proven before the push (and again before the pull request)
            pass
        proposal.host.push(job.directory, branch)
        with proposal.held():
            pull = proposal.host.propose(branch, proposal.title, body, draft=proposal.draft)
    except ClaimLost as error:  # another machine runs the issue now: nothing more of this run is published
        notice = f"no pull request: {error.message}"
        reason = f"{verdict.reason}; not published: {error.message}"
        return replace(verdict, reason=reason, proposed="lost", claim_lost=error.message, notices=(notice,))
    except BeflowError as error:
        notice = f"no pull request: {error.message}"
        reason = f"{verdict.reason}; the pull request could not be opened: {error.message}"
        return replace(verdict, reason=reason, proposed="failed", notices=(notice,))
    said = f"pull request {'opened' if pull.opened else 'updated'}: {pull.url}"
    return replace(verdict, proposed="opened" if pull.opened else "updated", pull_request=pull.url, notices=(said,))
