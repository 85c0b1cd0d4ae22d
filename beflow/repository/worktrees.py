"""Throwaway worktrees on ``beflow/<key>`` branches: made (or found again), known by the repository's own
registrations, given the user's ignored files they ask for, and removed."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from beflow.errors import ConfigError, UsageError
from beflow.paths import beflow_home, path_key, slug
from beflow.repository.git import CommandFailed, GitError, common_dir, distrusting, pinned, run
from beflow.repository.refs import branch_tip, move_head, resolve_base
from beflow.repository.status import is_dirty
from beflow.system.files import FileTooLarge, NotRegularError, create_new, open_regular, read_regular

if TYPE_CHECKING:
    import git

    from beflow.repository.git import At


@dataclass(frozen=True)
class Worktree:
    """A run's worktree. Its HEAD is detached: the agent's commits never move ``branch`` by themselves; beflow
    moves it (:func:`beflow.repository.commits.publish`) once it has checked every commit the run made
    (:func:`beflow.repository.leaks.find_leaks`)."""

    path: Path
    branch: str
    base_commit: str  # where this attempt started: the diff of the run is base_commit..commit
    continued: bool  # the branch existed from an earlier attempt
    #: What ``branch`` pointed to when the attempt started (None: it did not exist), for a compare-and-swap update.
    tip: str | None = None
    #: Where a directory found at ``path`` that was no worktree of the repository was moved, kept (None: none was).
    set_aside: Path | None = None
    #: The worktree's own git directory (``<common>/worktrees/<id>``), found from the repository's registrations
    #: before the agent ran: beflow's git after the agent is pinned to it, never led by the worktree's ``.git`` file
    #: (None: not known, the worktree's own ``.git`` is followed).
    git_dir: Path | None = None
    #: Where the leak check reads a continued branch from: ``worktrees.base`` as it was when the run started (an
    #: agent that moves that ref meanwhile does not shorten the check). None: from ``base_commit``.
    checked_from: str | None = None


def open_worktree(worktree: Worktree) -> git.Repo:
    """One repository object for ``worktree``, for every call of one delivery (its git pinned to the worktree's own
    git directory, as found before the agent ran); close it after."""
    return pinned(worktree.path, worktree.git_dir)


def worktree_path(worktrees_dir: Path, key: str) -> Path:
    """The worktree path for an issue; it must resolve inside the worktrees directory."""
    root = worktrees_dir.resolve()
    path = (root / slug(key)).resolve()
    if path.parent != root:
        raise UsageError(f"issue key {key!r} does not give a path inside {root}")
    return path


def registered_worktrees(where: At) -> dict[Path, str | None]:
    """Registered worktree paths and the branch each has checked out."""
    found: dict[Path, str | None] = {}
    current: Path | None = None
    for line in run(where, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line.removeprefix("worktree ")).resolve()
            found[current] = None
        elif line.startswith("branch ") and current is not None:
            found[current] = line.removeprefix("branch refs/heads/")
    return found


#: The repositories whose stale registrations this process pruned: once per process (a watch prunes once).
_PRUNED: set[Path] = set()


@contextlib.contextmanager
def _worktrees_locked(repo: git.Repo) -> Iterator[None]:
    """One ``git worktree add|remove|prune`` at a time per repository, across beflow processes: git itself races
    when two run at once ("failed to read .git/worktrees/<other>/commondir")."""
    common = common_dir(repo)
    path = beflow_home() / "locks" / f"worktrees-{path_key(common)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(path, thread_local=False):
        yield


def create_worktree(repo: git.Repo, path: Path, branch: str, base: str) -> Worktree:
    """A worktree at ``path`` on ``branch``: continued when the branch exists, else new from ``base``.

    A worktree left at ``path`` by an interrupted run of the same branch is reused as it is: it may hold the
    agent's uncommitted work.
    """
    with _worktrees_locked(repo):
        return _create_worktree(repo, path, branch, base)


def _create_worktree(repo: git.Repo, path: Path, branch: str, base: str) -> Worktree:
    common = common_dir(repo)
    if common not in _PRUNED:  # what killed runs left registered: once per process (a watch prunes once)
        if _stale_registrations(common):  # usually none: then no git process for it
            run(repo, "worktree", "prune")
        _PRUNED.add(common)
    registered = registered_worktrees(repo)
    tip = branch_tip(repo, branch)
    elsewhere = [p for p, b in registered.items() if b == branch and p != path]
    if elsewhere:
        raise GitError(
            f"branch {branch} is checked out in {elsewhere[0]}",
            fix=f"Finish or remove that checkout first (git worktree remove {elsewhere[0]}).",
        )
    if path in registered:
        held = registered[path]
        if held is not None and held != branch:
            raise GitError(f"{path} is a worktree of {held!r}, not {branch!r}", fix="Remove it with git.")
        own = own_git_dir(common, path)
        checked_from = resolve_base(repo, base)
        if held == branch and tip is not None:  # made by an earlier beflow, which let the agent commit to the branch
            with pinned(path, own) as left:  # its HEAD file detached at the branch's tip; no ref moves
                move_head(left, tip, "beflow: detached")
        # Its HEAD may hold commits an interrupted run never checked: they are checked with this run's.
        start = tip or _merge_base(path, own, checked_from)
        return Worktree(path, branch, start, continued=True, tip=tip, git_dir=own, checked_from=checked_from)
    # A directory there that git does not know (a run that ended while another made it, a copy by hand) is kept,
    # moved aside, rather than failing this and every later run of the issue: what is in it stays the user's.
    aside = _set_aside(path) if path.exists() or path.is_symlink() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    start = tip or resolve_base(repo, base)
    try:
        run(repo, "worktree", "add", "--detach", str(path), start)
    except CommandFailed as exc:
        raise GitError(f"git worktree add failed: {exc.stderr}") from None
    own = own_git_dir(common, path)
    since = resolve_base(repo, base) if tip is not None else None
    return Worktree(
        path, branch, start, continued=tip is not None, tip=tip, set_aside=aside, git_dir=own, checked_from=since
    )


def own_git_dir(common: Path, path: Path) -> Path:
    """The git directory of the worktree at ``path``: the registration in ``<common>/worktrees/`` whose ``gitdir``
    names ``path/.git``. Read from the repository's side, never from the worktree's ``.git`` file (an agent that
    points that at the user's checkout would have beflow's git commit and move HEAD there)."""
    wanted = (path / ".git").absolute()
    root = common / "worktrees"
    for name in sorted(os.listdir(root)) if root.is_dir() and not root.is_symlink() else []:
        entry = root / name
        try:
            named = read_regular(entry / "gitdir", limit=1 << 16, follow_symlinks=False).decode().strip()
        except (OSError, NotRegularError, FileTooLarge, UnicodeDecodeError):
            continue
        if not entry.is_symlink() and entry.is_dir() and Path(named).absolute() == wanted:
            return entry
    raise GitError(f"{path} is not registered as a worktree of {common.parent}", fix="Remove it with git.")


def _set_aside(path: Path) -> Path:
    """Move ``path`` to a free name beside it (``<name>.left-<n>``); where it went."""
    for n in range(1, 1000):
        aside = path.with_name(f"{path.name}.left-{n}")
        if not aside.exists() and not aside.is_symlink():
            try:
                path.rename(aside)
            except OSError as error:
                raise GitError(
                    f"{path} exists but is not a worktree of this repository, and could not be moved aside: {error}",
                    fix="Move it away.",
                ) from None
            return aside
    raise GitError(f"{path} exists but is not a worktree of this repository", fix="Move it away.")


def _stale_registrations(common: Path) -> bool:
    """Whether ``git worktree prune`` may have anything to do: a registered worktree whose ``gitdir`` file is
    missing, unreadable, or names a place that is gone (anything unexpected counts as stale: git then decides)."""
    try:
        entries = list((common / "worktrees").iterdir())
    except FileNotFoundError:
        return False
    except OSError:
        return True
    for entry in entries:
        try:
            target = (entry / "gitdir").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return True
        if not target or not Path(target).exists():
            return True
    return False


def _merge_base(path: Path, own: Path, commit: str) -> str:
    with pinned(path, own) as repo:
        try:
            return run(repo, "merge-base", "HEAD", commit).strip()
        except CommandFailed:  # unrelated histories: everything in HEAD counts as the run's
            return commit


def remove_worktree(repo: git.Repo, path: Path, *, prune_parent: bool = False) -> None:
    """Remove a worktree, keeping its branch; with ``prune_parent``, its directory too once no worktree is left in
    it (beflow's per-project folder under ``$BEFLOW_HOME/worktrees``)."""
    try:
        with _worktrees_locked(repo):
            run(repo, "worktree", "remove", "--force", str(path))
            if prune_parent:
                # Under the lock: no other run of this repository is adding a worktree there meanwhile.
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
    except CommandFailed as exc:
        raise GitError(f"could not remove worktree {path}: {exc.stderr}") from None


def remove_left(repo: git.Repo, path: Path, known: set[str]) -> str | None:
    """Remove the worktree a killed run left at ``path``, as a run that ends removes its own: its branch (and what
    beflow committed on it) stays. Kept when it holds what no check has seen, which a finished run would have
    committed or kept: uncommitted changes, or a HEAD that is none of ``known`` (the commits the run's record
    names). Why it was kept, or None: removed, or no worktree of the repository there (another beflow removed it).

    The worktree's content is the agent's: beflow's git is pinned to its registration in the repository (never led
    by its ``.git`` file) and distrusted (no hook, no configured command)."""
    with distrusting(), _worktrees_locked(repo):
        if path not in registered_worktrees(repo):
            return None
        try:
            with pinned(path, own_git_dir(common_dir(repo), path)) as left:
                if is_dirty(left):
                    return "it holds uncommitted changes"
                head = run(left, "rev-parse", "--verify", "--quiet", "HEAD").strip()
        except CommandFailed as exc:
            return f"git could not read it ({exc.stderr or 'no reason given'})"
        except GitError as error:
            return error.message
        except Exception as error:  # no repository object could be opened there (its .git file is not git's)
            return f"git could not read it ({type(error).__name__})"
        if head not in known:
            return f"it holds commit {head[:12]}, which beflow never checked"
        try:
            run(repo, "worktree", "remove", "--force", str(path))
        except CommandFailed as exc:
            return f"git could not remove it ({exc.stderr or 'no reason given'})"
        if path.parent.parent == beflow_home() / "worktrees":  # beflow's own folder: gone with its last worktree
            with contextlib.suppress(OSError):
                path.parent.rmdir()
    return None


#: The largest ``.worktreeinclude`` read.
MAX_INCLUDE_LIST = 1 << 20


def copy_included(repo_dir: Path, worktree: Path, patterns: list[str]) -> list[str]:
    """Copy the git-ignored files named by ``patterns`` (and ``.worktreeinclude``) into the new worktree.

    The sources are the user's own, in their checkout (a symlink there is theirs, and read through); only regular
    files are copied (a FIFO is never waited on). The worktree holds what the branch holds, which an agent may have
    written (a dangling ``.env`` symlink, a directory replaced by a link): each file is created there through no
    symlink, and only where nothing is at all, so nothing is ever written outside it."""
    globs = [p.strip() for p in patterns]
    include_file = repo_dir / ".worktreeinclude"
    try:
        listed = read_regular(include_file, limit=MAX_INCLUDE_LIST).decode("utf-8")
    except FileNotFoundError:
        listed = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{include_file}: cannot read it: {exc}", fix="Make it a text file of globs.") from None
    globs += [line.strip() for line in listed.splitlines()]
    globs = [g for g in globs if g and not g.startswith("#")]
    if not globs:
        return []
    copied = []
    root = repo_dir.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            source = Path(dirpath) / name
            relative = source.relative_to(root).as_posix()
            if any(fnmatch.fnmatch(relative, g) or fnmatch.fnmatch(name, g) for g in globs):
                try:
                    fd = open_regular(source, below=None)
                except OSError:
                    continue  # not a regular file (or gone): nothing to copy
                try:
                    # Tracked files come from git: never overwrite the checkout, nor write through a link in it.
                    mode = stat.S_IMODE(os.fstat(fd).st_mode)
                    if create_new(worktree / relative, fd, below=worktree, mode=mode):
                        copied.append(relative)
                except NotRegularError:
                    continue  # a directory on the way is a link (the branch's): the path is git's
                finally:
                    os.close(fd)
    return sorted(copied)
