"""The run's commit, built by beflow with explicit refs, and the branch moved to it.

The worktree's HEAD file is the agent's: it may say ``ref: refs/heads/feature`` (a branch of the user's), and a
``git commit`` or ``git reset`` would then move that branch. So beflow never writes through it: it reads the commit
HEAD names (once it knows it descends from where the run started), builds its commit with ``write-tree`` and
``commit-tree`` on that parent, and rewrites the HEAD file itself, detached (``update-ref --no-deref``). The branch
moves only with ``update-ref refs/heads/beflow/<key> NEW OLD`` (:func:`publish`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from beflow.paths import ACPXRC
from beflow.repository.authors import FALLBACK_IDENTITY, has_identity
from beflow.repository.git import CommandFailed, GitError, directory_of, run
from beflow.repository.leaks import MAX_COMMIT
from beflow.repository.refs import head_named, move_head, update_branch
from beflow.repository.run_objects import import_objects, quarantined, run_objects_of
from beflow.repository.status import is_tracked
from beflow.repository.worktrees import Worktree, registered_worktrees

if TYPE_CHECKING:
    from beflow.repository.git import At


def commit_all(
    worktree: At,
    message: str,
    *,
    parent: tuple[str, str] | None = None,
    env: dict[str, str] | None = None,
    move: bool = True,
) -> str | None:
    """Stage everything the agent changed and commit it on ``parent`` (a commit and its tree; default: the commit
    HEAD names), HEAD rewritten to it, detached (unless ``move`` is false); the sha, or None when nothing changed.
    ``env``: where objects are written.

    An untracked ``.acpxrc.json`` is never staged: it can only be beflow's own injection.
    """
    pathspec = ["--", "."] if is_tracked(worktree, ACPXRC) else ["--", ".", f":(exclude){ACPXRC}"]
    try:
        run(worktree, "add", "-A", *pathspec, env=env)
    except CommandFailed as exc:  # e.g. a nested repository without a commit: the work must not be lost
        raise GitError(f"git add failed in {directory_of(worktree)}: {exc.stderr}") from None
    commit, parent_tree = parent or head_named(worktree, env)
    tree = _write_tree(worktree, env)
    if tree == parent_tree:
        return None
    return _commit_on(worktree, tree, commit, message, env, move=move)


def commit_empty(
    worktree: At,
    message: str,
    *,
    parent: tuple[str, str] | None = None,
    env: dict[str, str] | None = None,
    move: bool = True,
) -> str:
    """A commit that changes nothing, with ``message``, on ``parent`` (a commit and its tree; default: the commit
    HEAD names), HEAD rewritten to it (a review round whose agent changed no file still says, on the branch, what
    it answered)."""
    commit, tree = parent or head_named(worktree, env)
    return _commit_on(worktree, tree, commit, message, env, move=move)


def _write_tree(where: At, env: dict[str, str] | None) -> str:
    try:
        return run(where, "write-tree", env=env).strip()
    except CommandFailed as exc:
        raise GitError(f"git write-tree failed in {directory_of(where)}: {exc.stderr}") from None


def _commit_on(where: At, tree: str, parent: str, message: str, env: dict[str, str] | None, *, move: bool) -> str:
    """``git commit-tree`` of ``tree`` on ``parent`` (no hook, no signing), then HEAD rewritten to it, detached
    (with ``move``)."""
    args = ["commit-tree", "--no-gpg-sign", tree, "-p", parent, "-m", _clean_message(message)]
    try:
        try:
            commit = run(where, *args, env=env).strip()
        except CommandFailed:
            # Only a failed commit asks whether git knows who commits (two more processes): without an identity,
            # beflow commits as itself.
            if has_identity(where):
                raise
            commit = run(where, *args, env={**(env or {}), **FALLBACK_IDENTITY}).strip()
    except CommandFailed as exc:
        raise GitError(f"git commit-tree failed in {directory_of(where)}: {exc.stderr}") from None
    if move:
        move_head(where, commit, "beflow: the run's commit", env)
    return commit


def _clean_message(message: str) -> str:
    """``message`` as ``git commit -m`` would keep it: no trailing spaces, no run of blank lines, none at either
    end (``commit-tree`` takes a message as it is)."""
    lines = [line.rstrip() for line in message.splitlines()]
    kept: list[str] = []
    for line in lines:
        if line or (kept and kept[-1]):
            kept.append(line)
    return "\n".join(kept).strip("\n")


#: The most commits of an agent's whose messages are reworded one by one; a run that made more is refused (a person
#: looks): each costs a git process, and no agent's honest work is that many commits.
MOST_REWORDED = 1000


def reworded(where: At, base: str, head: str, words: Callable[[str], str], env: dict[str, str] | None = None) -> str:
    """The agent's commits ``base..head`` made again with their messages through ``words`` (made inert for what reads
    commit messages: a forge closes ``Fixes #12`` when the branch merges, Jira runs ``WID-1 #done``), their trees,
    authors, committers and dates kept, merges too; ``head`` itself when no message changes. A signature is dropped
    with the message it signed."""
    lines = run(where, "rev-list", "--reverse", "--topo-order", "--parents", f"{base}..{head}", env=env).splitlines()
    if not lines:
        return head
    if len(lines) > MOST_REWORDED:
        raise GitError(f"the agent made {len(lines):,} commits (beflow rewords at most {MOST_REWORDED:,})")
    shas = "".join(line.split()[0] + "\n" for line in lines)
    sizes = run(where, "cat-file", "--batch-check=%(objectsize)", env=env, stdin=shas.encode()).split()
    if any(int(size) > MAX_COMMIT for size in sizes):
        return head  # (read whole by nobody: the leak check refuses such a commit unread)
    made: dict[str, str] = {}
    for line in lines:
        sha, *parents = line.split()
        header, _, message = run(where, "cat-file", "commit", sha, env=env).partition("\n\n")
        new_parents = [made.get(parent, parent) for parent in parents]
        said = words(message)
        if said == message and new_parents == parents:
            made[sha] = sha
            continue
        fields = dict(_identity(header))
        args = ["commit-tree", "--no-gpg-sign", fields["tree"]]
        for parent in new_parents:
            args += ["-p", parent]
        people = {**(env or {}), **_person("AUTHOR", fields["author"]), **_person("COMMITTER", fields["committer"])}
        try:
            made[sha] = run(where, *args, env=people, stdin=said.encode("utf-8", "surrogateescape")).strip()
        except CommandFailed as exc:
            raise GitError(f"git commit-tree failed rewording the agent's commit {sha[:12]}: {exc.stderr}") from None
    return made[lines[-1].split()[0]]


def _identity(header: str) -> Iterator[tuple[str, str]]:
    """A commit header's ``tree``, ``author`` and ``committer`` (the first of each; continuation lines skipped)."""
    for line in header.splitlines():
        name, _, value = line.partition(" ")
        if name in ("tree", "author", "committer"):
            yield name, value


def _person(role: str, value: str) -> dict[str, str]:
    """``Name <email> 1700000000 +0100`` as git's ``GIT_<role>_NAME``, ``_EMAIL`` and ``_DATE`` (kept as they were)."""
    name, _, rest = value.partition(" <")
    email, _, when = rest.rpartition("> ")
    return {f"GIT_{role}_NAME": name, f"GIT_{role}_EMAIL": email, f"GIT_{role}_DATE": f"@{when}"}


def build(
    where: At,
    worktree: Worktree,
    message: str | None,
    *,
    empty: str | None = None,
    words: Callable[[str], str] | None = None,
) -> tuple[str, bool]:
    """The run's commit: what the agent's HEAD names, once it is known to descend from where the run started, with
    everything the agent left uncommitted committed on it (``message``; None: nothing is committed) — or, when
    nothing was left and ``empty`` is given, an empty commit with that message. HEAD is rewritten to it, detached.
    The answer is that commit and whether beflow made it (else it is the agent's HEAD). ``words``: the agent's own
    commits are made again with their messages through it first (:func:`reworded`).

    A sandboxed agent wrote its objects into the run's own object directory: beflow's commit is written beside
    them, in a quarantine, and what the run's commit and the worktree's index need is then brought into the
    repository's object store by a fetch that re-hashes and checks every object
    (:mod:`beflow.repository.run_objects`); the ancestry is asked again of the objects brought in.
    """
    objects = run_objects_of(worktree)
    with quarantined(worktree, objects) as env:
        named = head_named(where, env)
        parent = agents = named[0]
        _check_descent(where, worktree, parent, env)
        # (an agent that made no commit of its own costs no git process here)
        if (
            words is not None
            and parent != worktree.base_commit
            and (again := reworded(where, worktree.base_commit, parent, words, env)) != parent
        ):
            parent, named = again, (again, named[1])  # (the same tree: only messages change)
        made = None
        if message is not None:
            made = commit_all(where, message, parent=named, env=env, move=False)
            if made is None and empty is not None:
                made = commit_empty(where, empty, parent=named, env=env, move=False)
        if env is not None and objects is not None:
            tips = [made or parent]
            with contextlib.suppress(GitError):  # an index git cannot write as a tree holds nothing to keep
                tips.append(_write_tree(where, env))  # what the agent staged and did not commit
            import_objects(worktree, env, tips)
            _check_descent(where, worktree, parent, None)  # asked again, of the objects as brought in
    if made is not None or parent != agents:
        move_head(where, made or parent, "beflow: the run's commit")
    return made or parent, made is not None


def _check_descent(where: At, worktree: Worktree, head: str, env: dict[str, str] | None) -> None:
    try:
        run(where, "merge-base", "--is-ancestor", worktree.base_commit, head, env=env)
        return
    except CommandFailed as exc:
        if exc.status != 1:
            raise GitError(f"the worktree's HEAD names {head[:12]}, which git cannot read: {exc.stderr}") from None
    raise GitError(
        f"the worktree's HEAD names commit {head[:12]}, which does not descend from {worktree.base_commit[:12]}, "
        f"where the run started: beflow builds on no other history (the agent pointed HEAD elsewhere)",
        fix=f"Look at the worktree {worktree.path} and its HEAD before running the issue again.",
    )


def publish(worktree: At, branch: str, new: str, expected: str | None, message: str) -> None:
    """Move ``branch`` to ``new``, only if it still points to ``expected`` (None: only if it does not exist)."""
    elsewhere = [p for p, b in registered_worktrees(worktree).items() if b == branch]
    if elsewhere:
        raise GitError(f"branch {branch} is now checked out in {elsewhere[0]}, so beflow did not move it")
    update_branch(worktree, branch, new, expected, message, "during the run")


def uncommit(worktree: At, commit: str) -> None:
    """Take ``worktree``'s HEAD back to ``commit``, keeping every file as it is (the commits' changes become
    uncommitted changes, as a mixed reset leaves them), and forget the commits in its HEAD's reflog, so nothing
    names them any more. HEAD is rewritten itself, detached: no ref it named moves."""
    move_head(worktree, commit, "beflow: the run's commits undone")
    run(worktree, "read-tree", commit)  # the index of `commit`; the files are not touched
    run(worktree, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "HEAD")
