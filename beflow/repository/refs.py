"""Branches and the other refs: what they point to, and moving them only from where they were.

beflow's branches are ``beflow/<key>``; a run's worktree has its HEAD detached, and a branch moves only by
compare-and-swap (``update-ref NAME NEW OLD``). The refs this process moved itself are remembered, so that a look at
the refs around another run's agent does not take them for the agent's (:mod:`beflow.repository.objectstore`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from beflow.errors import ConfigError
from beflow.paths import slug
from beflow.repository.git import CommandFailed, GitError, at, common_dir, head_of, open_repo, run
from beflow.system.files import FileTooLarge, NotRegularError, read_regular

if TYPE_CHECKING:
    import git

    from beflow.repository.git import At


def branch_for(key: str) -> str:
    """``beflow/<key>``, with the key made safe for a branch name."""
    return f"beflow/{slug(key)}"


def candidate_branch(key: str, candidate: int) -> str:
    """``beflow-attempts/<key>/c<N>``: a best-of-N candidate's branch (not under ``beflow/<key>``: git cannot hold
    ``beflow/7`` and ``beflow/7/c1`` at once)."""
    return f"beflow-attempts/{slug(key)}/c{candidate}"


def review_branch(key: str) -> str:
    """``beflow-attempts/<key>/review``: where best of N's reviewer works (it commits nothing: the branch goes)."""
    return f"beflow-attempts/{slug(key)}/review"


def planted_branch(key: str) -> str:
    """``beflow-attempts/<key>/planted``: where a ``beflow/<key>`` that appeared while best of N's candidates ran
    is set aside (an unsandboxed agent can write any ref): kept for a person to look at, never pushed."""
    return f"beflow-attempts/{slug(key)}/planted"


def branch_tip(where: At, branch: str) -> str | None:
    """The commit ``branch`` points to, None when there is no such branch."""
    try:
        return run(where, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}").strip() or None
    except CommandFailed:
        return None


def resolve_base(repo: git.Repo, base: str) -> str:
    """The commit ``worktrees.base`` names; a :class:`ConfigError` when it names none."""
    if base == "HEAD":  # the default: read from the repository's files, no git process (a branch is a commit)
        with contextlib.suppress(ValueError, OSError):
            return head_of(repo)
    with contextlib.suppress(CommandFailed):
        if not base.startswith("-"):  # (never an option of git's)
            return run(repo, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}").strip()
    raise ConfigError(
        f"worktrees.base: {base!r} is not a commit in {repo.working_tree_dir}",
        fix="Set worktrees.base in .beflow/config.json to a branch, tag or commit of this repository (default HEAD).",
    )


def head(where: At) -> str:
    """The commit checked out in ``where``."""
    with at(where) as repo:
        return head_of(repo)


def head_named(where: At, env: dict[str, str] | None = None) -> tuple[str, str]:
    """The commit the worktree's HEAD names and its tree, read (a symbolic HEAD is followed for reading, never
    written through)."""
    try:
        commit, tree = run(where, "rev-parse", "HEAD^{commit}", "HEAD^{tree}", env=env).split()
    except (CommandFailed, ValueError) as exc:
        why = exc.stderr if isinstance(exc, CommandFailed) else "it is not one commit"
        raise GitError(f"the worktree's HEAD names no commit: {why}") from None
    return commit, tree


def move_head(where: At, commit: str, why: str, env: dict[str, str] | None = None) -> None:
    """Rewrite the worktree's HEAD file to ``commit``, detached: whatever ref it named is left as it is."""
    try:
        run(where, "update-ref", "--no-deref", "-m", why, "HEAD", commit, env=env)
    except CommandFailed as exc:
        raise GitError(f"could not set the worktree's HEAD to {commit[:12]}: {exc.stderr}") from None


def update_branch(where: At, branch: str, new: str, expected: str | None, message: str, changed: str) -> None:
    """Move ``branch`` to ``new`` only if it still points to ``expected`` (None: only if it does not exist);
    ``changed`` says, in the error, when it did not."""
    try:
        run(where, "update-ref", "-m", message, f"refs/heads/{branch}", new, expected or "0" * len(new))
    except CommandFailed as exc:
        raise GitError(f"branch {branch} changed {changed}, so beflow did not move it: {exc.stderr}") from None
    _moved(f"refs/heads/{branch}", new)


def move_branch(directory: Path, branch: str, new: str, expected: str | None, message: str) -> None:
    """Move ``branch`` to ``new`` only if it still points to ``expected`` (None: only if it does not exist)."""
    update_branch(directory, branch, new, expected, message, "meanwhile")


def set_aside(where: At, branch: str, aside: str, new: str | None, message: str) -> str | None:
    """Move ``branch`` to ``new`` (None: delete it), keeping what it pointed to at ``aside`` (made new: refused if
    it exists); the
    commit set aside, or None when ``branch`` did not exist. The ref itself is replaced (``--no-deref``): a branch
    planted as a symbolic ref moves nothing it names. Refused (a :class:`GitError`) when either changed meanwhile."""
    planted = branch_tip(where, branch)
    if planted is None:
        return None
    zero = "0" * len(planted)
    try:
        run(where, "update-ref", "--no-deref", "-m", message, f"refs/heads/{aside}", planted, zero)
        if new is None:
            run(where, "update-ref", "--no-deref", "-m", message, "-d", f"refs/heads/{branch}", planted)
        else:
            run(where, "update-ref", "--no-deref", "-m", message, f"refs/heads/{branch}", new, planted)
    except CommandFailed as exc:
        raise GitError(f"branch {branch} could not be set aside as {aside}: {exc.stderr}") from None
    _moved(f"refs/heads/{aside}", planted)
    _moved(f"refs/heads/{branch}", new)
    return planted


def delete_branch_at(where: At, branch: str, commit: str) -> bool:
    """Delete ``branch`` if it still points at ``commit`` (checked by git itself, atomically); whether it did."""
    try:
        # (--no-deref: a branch an agent made a symbolic ref deletes itself, never the ref it names)
        run(where, "update-ref", "--no-deref", "-d", f"refs/heads/{branch}", commit)
    except CommandFailed:
        return False
    _moved(f"refs/heads/{branch}", None)
    return True


def is_ancestor(where: At, older: str, newer: str) -> bool:
    """Whether ``older`` is ``newer`` or one of its ancestors."""
    try:
        run(where, "merge-base", "--is-ancestor", older, newer)
    except CommandFailed:
        return False
    return True


def current_branch(directory: Path) -> str:
    """The branch checked out in ``directory``, or ``detached at <sha>``."""
    with open_repo(directory) as repo:
        try:
            return repo.active_branch.name
        except TypeError:  # a detached HEAD
            return f"detached at {head_of(repo)[:12]}"


def full_ref(directory: Path, name: str) -> str | None:
    """The full name of the ref ``name`` names (``main``: ``refs/heads/main``); None for a commit or nothing."""
    try:
        return run(directory, "rev-parse", "--symbolic-full-name", name).strip() or None
    except CommandFailed:
        return None


#: The refs this process moved itself, and to what (None: deleted): not news when another run's store is compared.
_OWN_MOVES: dict[str, str | None] = {}


def _moved(ref: str, value: str | None) -> None:
    _OWN_MOVES[ref] = value


def moved_by_beflow(ref: str, value: str | None) -> bool:
    """Whether this process itself set ``ref`` to ``value`` (None: deleted it)."""
    return ref in _OWN_MOVES and _OWN_MOVES[ref] == value


def ref_values(directory: Path) -> dict[str, str]:
    """Every ref of the repository of ``directory`` and what it points to (a symbolic one: ``ref: <target>``), the
    entries of its ``packed-refs`` file as ``packed-refs:<name>``, and its checkout's ``HEAD`` file as it reads."""
    with open_repo(directory) as repo:
        out = run(repo, "for-each-ref", "--format=%(refname)%00%(objectname)%00%(symref)")
        common, own = common_dir(repo), Path(repo.git_dir)
    values: dict[str, str] = {}
    for line in out.splitlines():
        name, value, target = [*line.split("\0"), "", ""][:3]
        values[name] = f"ref: {target}" if target else value
    for path, prefix in ((common / "packed-refs", "packed-refs:"), (own / "HEAD", "")):
        try:
            data = read_regular(path, limit=256 << 20, follow_symlinks=False).decode("utf-8", "replace")
        except FileNotFoundError:
            continue
        except (OSError, NotRegularError, FileTooLarge) as exc:
            values[f"{prefix}{path.name}"] = f"(unreadable: {exc})"
            continue
        if not prefix:
            values["HEAD"] = data.strip()
            continue
        for entry in data.splitlines():
            sha, _, name = entry.partition(" ")
            if name and not entry.startswith(("#", "^")):
                values[f"{prefix}{name}"] = sha
    return values
