"""Git through GitPython: the repository, throwaway worktrees on ``beflow/<key>`` branches, and commits."""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import functools
import getpass
import hashlib
import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beflow.errors import BeflowError, ConfigError, UsageError
from beflow.paths import ACPXRC, beflow_home, git_toplevel, path_key, slug
from beflow.system import startup
from beflow.system.files import FileTooLarge, NotRegularError, atomic_write, create_new, open_regular, read_regular

#: The top level of the git work tree around a path (found without git: see ``paths.git_toplevel``).
toplevel = git_toplevel

# GitPython is imported when first used: importing it costs a `git version` process and tens of milliseconds that
# commands which never touch git (`--help`, `issues`, `runs`) should not pay.
if TYPE_CHECKING:
    import git
else:
    git = startup.module("git")


class GitError(BeflowError):
    code = "git"


NOT_A_REPOSITORY = "{directory} is not inside a git repository"
RUN_IN_A_CHECKOUT = "Run beflow in a git checkout."


#: Seconds any one git command may take before it is killed (with what it started, a hook say) and the step fails
#: with a :class:`GitError`: a hung hook, a lock held by a stuck process or an unreachable remote must not hold a
#: run — or a watch waiting for it — forever.
GIT_TIMEOUT = 600.0

#: Variables that hold beflow's own secrets (the tracker's token): emptied in the environment of every git command,
#: which a hook or a configured command an agent planted could read, and which any process of the user can read
#: while it runs (``/proc/<pid>/environ``).
_WITHHELD: set[str] = set()


def withhold(names: Iterable[str]) -> None:
    """Keep the variables ``names`` out of every git command beflow runs from now on."""
    _WITHHELD.update(names)


@functools.cache
def _timed() -> tuple[type[git.Repo], type[git.Git]]:
    """GitPython's ``Repo`` and ``Git`` with :data:`GIT_TIMEOUT` on every git command they run (made on first use:
    GitPython is imported lazily)."""

    class TimedGit(git.Git):
        #: False for the push's own git (``push``), which reads no configuration file at all.
        hardened = True

        def execute(self, *args: Any, **kwargs: Any) -> Any:
            distrusted = _DISTRUSTED.get()
            if distrusted is not None and self.hardened:
                kwargs["env"] = {**_untrusted_env(self, distrusted), **(kwargs.get("env") or {})}
            if _WITHHELD:  # beflow's own secrets reach no git (the push gets its credential its own way)
                kwargs["env"] = {**dict.fromkeys(_WITHHELD, ""), **(kwargs.get("env") or {})}
            if kwargs.get("as_process") or kwargs.get("kill_after_timeout") is not None:
                return super().execute(*args, **kwargs)  # a long-lived cat-file process, or a timeout of its own
            kwargs["kill_after_timeout"] = GIT_TIMEOUT
            try:
                return super().execute(*args, **kwargs)
            except git.GitCommandError as exc:
                if "did not complete in" not in str(exc.stderr):
                    raise
                command = " ".join(str(part) for part in exc.command[:3])
                raise GitError(
                    f"{command} did not finish within {GIT_TIMEOUT:g} s and was stopped",
                    fix="Look for a git hook or another git process that hangs in this repository.",
                ) from None

    class TimedRepo(git.Repo):
        GitCommandWrapperType = TimedGit

    return TimedRepo, TimedGit


# -- after an agent: the repository is not trusted -----------------------------------------------------------------
#
# An agent runs as the user, in a worktree of the user's repository: it can write hooks, `core.hooksPath`,
# `core.fsmonitor`, filter drivers and the like into any git configuration it reaches, and git would run them in
# beflow's own git commands afterwards (the commit, the leak check, the branch update, the worktree's removal), with
# beflow's environment. Inside :func:`distrusting`, every git command beflow runs gets the settings below on top of
# every configuration file (git gives GIT_CONFIG_* entries precedence), the way git's own protections treat a
# repository it does not trust: no hook, no configured command runs.

#: Settings of every git command beflow runs after an agent. Single-valued keys: the last one read wins, and these
#: are read last. ``credential.helper`` empty resets the list of helpers.
UNTRUSTED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),  # no hook at all: none is found under /dev/null
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "ssh"),
    ("core.askPass", ""),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("gc.auto", "0"),  # `git gc --auto` after a commit would run the pre-auto-gc hook and take its time
    ("maintenance.auto", "false"),
    ("protocol.ext.allow", "never"),
    # What an agent can write beside the objects, which git would take on its word: replacement objects
    # (`refs/replace/*`), a commit-graph (parents, trees), a multi-pack-index (where an object lies), bitmaps.
    ("core.useReplaceRefs", "false"),
    ("core.commitGraph", "false"),
    ("core.multiPackIndex", "false"),
    ("pack.useBitmaps", "false"),
)
#: The keys of a filter driver (``filter.<name>.*``): each configured driver is turned off by emptying them (git
#: skips an empty command) and making it optional. Diff drivers (``diff.<name>.textconv|command``) are turned off
#: by the ``--no-ext-diff --no-textconv`` of every diff beflow runs.
_FILTER_OFF = (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))

#: Set while beflow's git commands follow an agent's run: the settings per directory, asked of git once.
_DISTRUSTED: contextvars.ContextVar[dict[str, dict[str, str]] | None] = contextvars.ContextVar(
    "beflow_git_distrusted", default=None
)


@contextlib.contextmanager
def distrusting() -> Iterator[None]:
    """Every git command beflow runs inside (in this task and the worker threads it starts) runs no hook and no
    configured command: see :data:`UNTRUSTED_CONFIG`."""
    token = _DISTRUSTED.set({})
    try:
        yield
    finally:
        _DISTRUSTED.reset(token)


def _sq(text: str) -> str:
    """``text`` quoted as git quotes the values of ``GIT_CONFIG_PARAMETERS`` (``quote.c``'s ``sq_quote_buf``)."""
    return "'" + text.replace("'", "'\\''").replace("!", "'\\!'") + "'"


def _config_env(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``GIT_CONFIG_PARAMETERS`` (how ``git -c`` passes settings on, to the git processes git itself starts in a
    submodule too) with ``pairs`` after the user's own entries. Git reads it after every configuration file and
    after ``GIT_CONFIG_COUNT``: its values win."""
    ours = " ".join(f"{_sq(key)}={_sq(value)}" for key, value in pairs)
    theirs = os.environ.get("GIT_CONFIG_PARAMETERS", "").strip()
    return {"GIT_CONFIG_PARAMETERS": f"{theirs} {ours}" if theirs else ours}


def _untrusted_env(runner: git.Git, cache: dict[str, dict[str, str]]) -> dict[str, str]:
    """The environment of a git command run in ``runner``'s directory after an agent (cached per directory)."""
    directory = str(runner.working_dir or os.getcwd())
    if directory not in cache:
        base = _config_env(UNTRUSTED_CONFIG)
        drivers: list[str] = []
        try:
            # `git config` runs nothing; it reads every file git would (includes too) in this directory.
            names = git.Git.execute(
                runner,
                ["git", "config", "-z", "--name-only", "--get-regexp", r"^filter\..*\.(clean|smudge|process)$"],
                env={**dict.fromkeys(_WITHHELD, ""), **base},
                kill_after_timeout=GIT_TIMEOUT,
            )
            drivers = sorted({name.split(".", 1)[1].rsplit(".", 1)[0] for name in str(names).split("\0") if name})
        except git.GitCommandError:  # exit 1: no filter driver is configured
            pass
        pairs = [*UNTRUSTED_CONFIG]
        pairs += [(f"filter.{name}.{key}", value) for name in drivers for key, value in _FILTER_OFF]
        cache[directory] = {**_config_env(pairs), "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": ""}
    return cache[directory]


def _repo(path: Path | str, **kwargs: Any) -> git.Repo:
    return _timed()[0](path, **kwargs)


#: Where a worktree-level call works: the worktree's path (a repository object is opened for the call and closed
#: after: GitPython keeps ``git cat-file`` processes per object), or the one object a run keeps open for all of its
#: calls (:func:`open_worktree`).
if TYPE_CHECKING:
    At = Path | git.Repo


@contextlib.contextmanager
def _at(where: At) -> Iterator[git.Repo]:
    if not isinstance(where, Path):
        yield where
        return
    with _repo(where) as repo:
        yield repo


def open_worktree(worktree: Worktree) -> git.Repo:
    """One repository object for ``worktree``, for every call of one delivery (its git pinned to the worktree's own
    git directory, as found before the agent ran); close it after."""
    return _pinned(worktree.path, worktree.git_dir)


def _git(directory: Path) -> git.Git:
    return _timed()[1](str(directory))


def open_repo(directory: Path) -> git.Repo:
    """The repository of the project directory; a clear error when there is none."""
    try:
        return _repo(directory, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UsageError(NOT_A_REPOSITORY.format(directory=directory), fix=RUN_IN_A_CHECKOUT) from None


def branch_for(key: str) -> str:
    """``beflow/<key>``, with the key made safe for a branch name."""
    return f"beflow/{slug(key)}"


@dataclass(frozen=True)
class Worktree:
    """A run's worktree. Its HEAD is detached: the agent's commits never move ``branch`` by themselves; beflow
    moves it (:func:`publish`) once it has checked every commit the run made (:func:`find_leaks`)."""

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


def worktree_path(worktrees_dir: Path, key: str) -> Path:
    """The worktree path for an issue; it must resolve inside the worktrees directory."""
    root = worktrees_dir.resolve()
    path = (root / slug(key)).resolve()
    if path.parent != root:
        raise UsageError(f"issue key {key!r} does not give a path inside {root}")
    return path


def _registered_worktrees(repo: git.Repo) -> dict[Path, str | None]:
    """Registered worktree paths and the branch each has checked out."""
    found: dict[Path, str | None] = {}
    current: Path | None = None
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line.removeprefix("worktree ")).resolve()
            found[current] = None
        elif line.startswith("branch ") and current is not None:
            found[current] = line.removeprefix("branch refs/heads/")
    return found


def resolve_base(repo: git.Repo, base: str) -> str:
    """The commit ``worktrees.base`` names; a :class:`ConfigError` when it names none."""
    if base == "HEAD":  # the default: read from the repository's files, no git process (a branch is a commit)
        with contextlib.suppress(ValueError, OSError):
            return _head_of(repo)
    try:
        return repo.commit(base).hexsha
    except (git.BadName, ValueError, git.GitCommandError):
        raise ConfigError(
            f"worktrees.base: {base!r} is not a commit in {repo.working_tree_dir}",
            fix="Set worktrees.base in .beflow/config.json to a branch, tag or commit of this repository "
            "(default HEAD).",
        ) from None


#: Facts about repositories that do not change while beflow runs, asked of git once per process (a watch asks
#: them once, not once per run): whether git knows who commits, which were pruned.
_IDENTITIES: dict[str, bool] = {}
_PRUNED: set[Path] = set()


def _common_dir(repo: git.Repo) -> Path:
    """The git directory the repository's worktrees share (read from ``commondir`` by GitPython: no process)."""
    return Path(repo.common_dir).resolve()


@contextlib.contextmanager
def _worktrees_locked(repo: git.Repo) -> Iterator[None]:
    """One ``git worktree add|remove|prune`` at a time per repository, across beflow processes: git itself races
    when two run at once ("failed to read .git/worktrees/<other>/commondir")."""
    common = _common_dir(repo)
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
    common = _common_dir(repo)
    if common not in _PRUNED:  # what killed runs left registered: once per process (a watch prunes once)
        if _stale_registrations(common):  # usually none: then no git process for it
            repo.git.worktree("prune")
        _PRUNED.add(common)
    registered = _registered_worktrees(repo)
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
            with _pinned(path, own) as left:  # its HEAD file detached at the branch's tip; no ref moves
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
        repo.git.worktree("add", "--detach", str(path), start)
    except git.GitCommandError as exc:
        raise GitError(f"git worktree add failed: {exc.stderr.strip()}") from None
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


def _pinned_env(path: Path, own: Path) -> dict[str, str]:
    """Git's environment for the worktree at ``path`` whose git directory is ``own``: its git directory, the
    repository's and its files named outright, so neither its ``.git`` file nor its ``commondir`` is read."""
    return {"GIT_DIR": str(own), "GIT_COMMON_DIR": str(own.parent.parent), "GIT_WORK_TREE": str(path)}


def _pinned(path: Path, own: Path | None) -> git.Repo:
    """A repository object for the worktree at ``path`` whose git commands are pinned to ``own`` (when known)."""
    repo = _repo(path)
    if own is not None:
        repo.git.update_environment(**_pinned_env(path, own))
    return repo


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


def branch_tip(repo: git.Repo, branch: str) -> str | None:
    """The commit ``branch`` points to, None when there is no such branch."""
    try:
        return str(repo.git.rev_parse("--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")).strip() or None
    except git.GitCommandError:
        return None


def _merge_base(path: Path, own: Path, commit: str) -> str:
    with _pinned(path, own) as repo:
        try:
            return str(repo.git.merge_base("HEAD", commit)).strip()
        except git.GitCommandError:  # unrelated histories: everything in HEAD counts as the run's
            return commit


def head(where: At) -> str:
    """The commit checked out in ``where``."""
    with _at(where) as repo:
        return _head_of(repo)


def _head_of(repo: git.Repo) -> str:
    """The commit HEAD names, read from the repository's files: no git process (``repo.head.commit`` starts a
    ``git cat-file`` to learn the object's type)."""
    return str(git.SymbolicReference.dereference_recursive(repo, "HEAD"))


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


def is_tracked(repo: git.Repo, relative: str) -> bool:
    return bool(repo.git.ls_files("--", relative).strip())


# -- the run's commit: built by beflow with explicit refs --------------------------------------------------------
#
# The worktree's HEAD file is the agent's: it may say `ref: refs/heads/feature` (a branch of the user's), and a
# `git commit` or `git reset` would then move that branch. So beflow never writes through it: it reads the commit
# HEAD names (once it knows it descends from where the run started), builds its commit with `write-tree` and
# `commit-tree` on that parent, and rewrites the HEAD file itself, detached (`update-ref --no-deref`). The branch
# moves only with `update-ref refs/heads/beflow/<key> NEW OLD` (:func:`publish`).


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
    with _at(worktree) as repo:
        pathspec = ["--", "."] if is_tracked(repo, ACPXRC) else ["--", ".", f":(exclude){ACPXRC}"]
        try:
            repo.git.add("-A", *pathspec, env=env)
        except git.GitCommandError as exc:  # e.g. a nested repository without a commit: the work must not be lost
            raise GitError(f"git add failed in {repo.working_tree_dir}: {exc.stderr.strip()}") from None
        commit, parent_tree = parent or head_named(repo, env)
        tree = _write_tree(repo, env)
        if tree == parent_tree:
            return None
        return _commit_on(repo, tree, commit, message, env, move=move)


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
    with _at(worktree) as repo:
        commit, tree = parent or head_named(repo, env)
        return _commit_on(repo, tree, commit, message, env, move=move)


def head_named(where: At, env: dict[str, str] | None = None) -> tuple[str, str]:
    """The commit the worktree's HEAD names and its tree, read (a symbolic HEAD is followed for reading, never
    written through)."""
    with _at(where) as repo:
        try:
            commit, tree = str(repo.git.rev_parse("HEAD^{commit}", "HEAD^{tree}", env=env)).split()
        except (git.GitCommandError, ValueError) as exc:
            why = exc.stderr.strip() if isinstance(exc, git.GitCommandError) else "it is not one commit"
            raise GitError(f"the worktree's HEAD names no commit: {why}") from None
    return commit, tree


def _write_tree(repo: git.Repo, env: dict[str, str] | None) -> str:
    try:
        return str(repo.git.write_tree(env=env)).strip()
    except git.GitCommandError as exc:
        raise GitError(f"git write-tree failed in {repo.working_tree_dir}: {exc.stderr.strip()}") from None


def _commit_on(
    repo: git.Repo, tree: str, parent: str, message: str, env: dict[str, str] | None, *, move: bool = True
) -> str:
    """``git commit-tree`` of ``tree`` on ``parent`` (no hook, no signing), then HEAD rewritten to it, detached
    (with ``move``)."""
    args = ["--no-gpg-sign", tree, "-p", parent, "-m", _clean_message(message)]
    try:
        try:
            commit = str(repo.git.commit_tree(*args, env=env)).strip()
        except git.GitCommandError:
            # Only a failed commit asks whether git knows who commits (two more processes): without an identity,
            # beflow commits as itself.
            if _has_identity(repo):
                raise
            ident = {"GIT_AUTHOR_NAME": "beflow", "GIT_AUTHOR_EMAIL": "beflow@localhost"}
            ident |= {"GIT_COMMITTER_NAME": "beflow", "GIT_COMMITTER_EMAIL": "beflow@localhost"}
            commit = str(repo.git.commit_tree(*args, env={**(env or {}), **ident})).strip()
    except git.GitCommandError as exc:
        raise GitError(f"git commit-tree failed in {repo.working_tree_dir}: {exc.stderr.strip()}") from None
    if move:
        move_head(repo, commit, "beflow: the run's commit", env)
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


def move_head(where: At, commit: str, why: str, env: dict[str, str] | None = None) -> None:
    """Rewrite the worktree's HEAD file to ``commit``, detached: whatever ref it named is left as it is."""
    with _at(where) as repo:
        try:
            repo.git.update_ref("--no-deref", "-m", why, "HEAD", commit, env=env)
        except git.GitCommandError as exc:
            raise GitError(f"could not set the worktree's HEAD to {commit[:12]}: {exc.stderr.strip()}") from None


def build(where: At, worktree: Worktree, message: str | None, *, empty: str | None = None) -> str:
    """The run's commit: what the agent's HEAD names, once it is known to descend from where the run started, with
    everything the agent left uncommitted committed on it (``message``; None: nothing is committed) — or, when
    nothing was left and ``empty`` is given, an empty commit with that message. HEAD is rewritten to it, detached.

    A sandboxed agent wrote its objects into the run's own object directory (:data:`RUN_OBJECTS`): beflow's commit
    is written beside them, in a quarantine, and what the run's commit and the worktree's index need is then
    brought into the repository's object store by a fetch that re-hashes and checks every object (the agent's
    bytes are never taken for what their names say); the ancestry is asked again of the objects brought in.
    """
    with _at(where) as repo:
        objects = run_objects_of(worktree)
        with _quarantined(worktree, objects) as env:
            named = head_named(repo, env)
            parent = named[0]
            _check_descent(repo, worktree, parent, env)
            made = None
            if message is not None:
                made = commit_all(repo, message, parent=named, env=env, move=False)
                if made is None and empty is not None:
                    made = commit_empty(repo, empty, parent=named, env=env, move=False)
            if env is not None and objects is not None:
                tips = [made or parent]
                with contextlib.suppress(GitError):  # an index git cannot write as a tree holds nothing to keep
                    tips.append(_write_tree(repo, env))  # what the agent staged and did not commit
                _import(worktree, env, tips)
                _check_descent(repo, worktree, parent, None)  # asked again, of the objects as brought in
        if made is not None:
            move_head(repo, made, "beflow: the run's commit")
        return made or parent


def _check_descent(repo: git.Repo, worktree: Worktree, head: str, env: dict[str, str] | None) -> None:
    try:
        repo.git.merge_base("--is-ancestor", worktree.base_commit, head, env=env)
        return
    except git.GitCommandError as exc:
        if exc.status != 1:
            why = exc.stderr.strip()
            raise GitError(f"the worktree's HEAD names {head[:12]}, which git cannot read: {why}") from None
    raise GitError(
        f"the worktree's HEAD names commit {head[:12]}, which does not descend from {worktree.base_commit[:12]}, "
        f"where the run started: beflow builds on no other history (the agent pointed HEAD elsewhere)",
        fix=f"Look at the worktree {worktree.path} and its HEAD before running the issue again.",
    )


# -- a sandboxed run's own objects ---------------------------------------------------------------------------------

#: The run's own object directory, in its worktree's git directory. In the sandbox it is the agent's object store
#: (mounted at ``<common>/objects``; the user's own objects are a read-only alternate), so the agent can change no
#: object of the user's; beflow brings what the run needs into the user's store itself (:func:`build`).
RUN_OBJECTS = "beflow-objects"


def make_run_objects(objects: Path, user_objects: Path) -> Path:
    """The run's object directory ``objects`` (:data:`RUN_OBJECTS` in the worktree's git directory), made if it is
    not there, its ``info/alternates`` naming ``user_objects`` (where the sandbox shows the user's objects)."""
    info = objects / "info"
    for directory in (objects, info, objects / "pack"):
        if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
            raise GitError(f"{directory} is not a directory of beflow's", fix=f"Remove {directory}.")
        directory.mkdir(mode=0o755, exist_ok=True)
    atomic_write(info / "alternates", f"{user_objects}\n", durable=False)
    return objects


def forget_run_objects_alternates(objects: Path) -> None:
    """Drop the alternates a sandbox gave the run's object directory: outside it, they name nothing of beflow's."""
    with contextlib.suppress(FileNotFoundError):
        info = objects / "info"
        if info.is_dir() and not info.is_symlink():
            (info / "alternates").unlink()


def run_objects_of(worktree: Worktree) -> Path | None:
    """The run's object directory of ``worktree``, if a sandbox made one (a directory, never a symlink)."""
    if worktree.git_dir is None:
        return None
    objects = worktree.git_dir / RUN_OBJECTS
    return objects if objects.is_dir() and not objects.is_symlink() else None


def _check_run_objects(objects: Path) -> None:
    """Every entry of the run's object directory is a directory or a regular file: git never follows a symlink
    the agent put there (to another repository's pack, say) nor opens a FIFO it made."""
    forget_run_objects_alternates(objects)
    pending = [objects]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    pending.append(Path(entry.path))
                elif not stat.S_ISREG(info.st_mode):
                    raise GitError(f"the run's object directory holds {entry.path}, which is not a regular file")


@contextlib.contextmanager
def _quarantined(worktree: Worktree, objects: Path | None) -> Iterator[dict[str, str] | None]:
    """The environment of beflow's git that writes objects for a run whose objects are in ``objects``: a fresh
    directory of its own, with the repository's objects and then the run's as alternates. None: no run objects,
    beflow writes into the repository's store (the objects there were checked: :mod:`beflow.repository.objectstore`)."""
    if objects is None or worktree.git_dir is None:
        yield None
        return
    _check_run_objects(objects)
    user = worktree.git_dir.parent.parent / "objects"
    with tempfile.TemporaryDirectory(prefix="beflow-import-") as scratch:
        send = Path(scratch) / "send"
        (send / "objects" / "info").mkdir(parents=True)
        (send / "refs").mkdir()
        (send / "objects" / "info" / "alternates").write_text(f"{user}\n{objects}\n", encoding="utf-8")
        _bare(send, worktree.base_commit, _SEND_CONFIG)
        yield {"GIT_OBJECT_DIRECTORY": str(send / "objects")}


def _bare(root: Path, commit: str, extra: str = "") -> None:
    """A bare repository's HEAD and config at ``root`` for ids like ``commit`` (SHA-1 or SHA-256), ``extra``
    sections after."""
    (root / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    formats = "\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n" if len(commit) == 64 else ""
    (root / "config").write_text(f"[core]\n\tbare = true\n{formats}{extra}", encoding="utf-8")


#: The sending side of an import reads the objects themselves only: nothing the run's directory holds beside them
#: (a commit-graph, a multi-pack-index, bitmaps) decides what is sent.
_SEND_CONFIG = "[core]\n\tcommitGraph = false\n\tmultiPackIndex = false\n[pack]\n\tuseBitmaps = false\n"


def _import(worktree: Worktree, env: dict[str, str], tips: Sequence[str]) -> None:
    """Bring ``tips`` and all they reach into the repository's object store from the quarantine of ``env``: a
    fetch, from beflow's isolated git (no configuration file read), whose index-pack re-hashes every object it
    receives and checks it (``fetch.fsckObjects``). What the repository has already (the run's start) is not
    sent again."""
    assert worktree.git_dir is not None
    send = Path(env["GIT_OBJECT_DIRECTORY"]).parent
    user = worktree.git_dir.parent.parent / "objects"
    for index, tip in enumerate(dict.fromkeys(tips)):
        (send / "refs" / "run").mkdir(exist_ok=True)
        (send / "refs" / "run" / str(index)).write_text(f"{tip}\n", encoding="utf-8")
    receive = send.parent / "receive"
    (receive / "refs" / "have").mkdir(parents=True)
    have = [c for c in (worktree.base_commit, worktree.tip, worktree.checked_from) if c]
    for index, commit in enumerate(dict.fromkeys(have)):
        (receive / "refs" / "have" / str(index)).write_text(f"{commit}\n", encoding="utf-8")
    _bare(receive, worktree.base_commit)
    settings = [
        ("fetch.fsckObjects", "true"),
        ("protocol.ext.allow", "never"),
        ("fetch.writeCommitGraph", "false"),
        ("gc.auto", "0"),
        ("maintenance.auto", "false"),
    ]
    try:
        with _isolated(receive, str(send), None, *settings, GIT_OBJECT_DIRECTORY=str(user)) as run:
            run("fetch", "--no-tags", "--no-write-fetch-head", "--", "beflow", "+refs/run/*:refs/run/*")
    except git.GitCommandError as exc:
        raise GitError(
            "the objects the agent wrote in the sandbox could not be brought into the repository (each is "
            f"re-hashed and checked on the way): {str(exc.stderr).strip()}"
        ) from None


def _has_identity(repo: git.Repo) -> bool:
    # Asked of git itself: GitPython's config reader misses GIT_CONFIG_GLOBAL, includes and the like. Once per
    # repository and process (the worktrees of one repository share its config).
    key = str(_common_dir(repo))
    if key not in _IDENTITIES:
        try:
            repo.git.var("GIT_AUTHOR_IDENT")
            repo.git.var("GIT_COMMITTER_IDENT")
            _IDENTITIES[key] = True
        except git.GitCommandError:
            _IDENTITIES[key] = False
    return _IDENTITIES[key]


def identity_env(directory: Path) -> dict[str, str]:
    """The author and committer git would use in ``directory``, as ``GIT_AUTHOR_NAME``, ... variables: for a git
    that cannot read the user's global config (a sandboxed agent's). Empty when git has none."""
    env: dict[str, str] = {}
    for role in ("AUTHOR", "COMMITTER"):
        try:
            ident = str(_git(directory).var(f"GIT_{role}_IDENT"))
        except (git.GitCommandError, git.GitCommandNotFound, OSError):
            continue
        match = re.match(r"^(.*) <([^>]*)>", ident)
        if match:
            env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = match[1], match[2]
    return env


def is_dirty(worktree: At) -> bool:
    """Uncommitted changes besides beflow's own managed file."""
    with _at(worktree) as repo:
        status = repo.git.status("--porcelain", "--untracked-files=all")
    lines = [line for line in status.splitlines() if line[3:] != ACPXRC]
    return bool(lines)


def changed_files(worktree: At, base: str, head: str) -> list[str]:
    """``STATUS\\tpath`` lines of what changed between two commits."""
    if base == head:
        return []
    with _at(worktree) as repo:
        return str(repo.git.diff("--name-status", "--no-ext-diff", "--no-textconv", base, head)).splitlines()


def diff(directory: Path, base: str, head: str) -> str:
    with _repo(directory) as repo:
        return str(repo.git.diff("--stat", "--patch", "--no-ext-diff", "--no-textconv", base, head))


def remove_worktree(repo: git.Repo, path: Path, *, prune_parent: bool = False) -> None:
    """Remove a worktree, keeping its branch; with ``prune_parent``, its directory too once no worktree is left in
    it (beflow's per-project folder under ``$BEFLOW_HOME/worktrees``)."""
    try:
        with _worktrees_locked(repo):
            repo.git.worktree("remove", "--force", str(path))
            if prune_parent:
                # Under the lock: no other run of this repository is adding a worktree there meanwhile.
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
    except git.GitCommandError as exc:
        raise GitError(f"could not remove worktree {path}: {exc.stderr.strip()}") from None


def delete_branch_at(repo: git.Repo, branch: str, commit: str) -> bool:
    """Delete ``branch`` if it still points at ``commit`` (checked by git itself, atomically); whether it did."""
    try:
        repo.git.update_ref("-d", f"refs/heads/{branch}", commit)
    except git.GitCommandError:
        return False
    _moved(f"refs/heads/{branch}", None)
    return True


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
    with _repo(directory, search_parent_directories=True) as repo:
        out = str(repo.git.for_each_ref("--format=%(refname)%00%(objectname)%00%(symref)"))
        common, own = _common_dir(repo), Path(repo.git_dir)
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


def full_ref(directory: Path, name: str) -> str | None:
    """The full name of the ref ``name`` names (``main``: ``refs/heads/main``); None for a commit or nothing."""
    with _repo(directory, search_parent_directories=True) as repo:
        try:
            return str(repo.git.rev_parse("--symbolic-full-name", name)).strip() or None
        except git.GitCommandError:
            return None


def verify_pack(pack: Path) -> str | None:
    """Why the pack at ``pack`` is not what its index says, every object in it re-hashed (``git index-pack
    --verify``, from beflow's isolated git: no configuration file read); None when it is."""
    with tempfile.TemporaryDirectory(prefix="beflow-verify-") as scratch:
        root = Path(scratch)
        (root / "objects").mkdir()
        (root / "refs").mkdir()
        _bare(root, pack.stem.removeprefix("pack-"))
        try:
            with _isolated(root, "", None) as run:
                run("index-pack", "--verify", str(pack))
        except git.GitCommandError as exc:
            return str(exc.stderr).strip().splitlines()[-1] if str(exc.stderr).strip() else f"exit {exc.status}"
    return None


def checkout_status(directory: At) -> dict[str, str]:
    """Every path ``git status`` reports in a checkout (untracked files one by one) and its two-letter status.

    Read with ``-z``, so that no path is quoted or mangled; a rename is reported under its new path.
    """
    with _at(directory) as repo:
        output = repo.git.status("--porcelain=v1", "-z", "--untracked-files=all", strip_newline_in_stdout=False)
    fields = output.split("\0")
    entries: dict[str, str] = {}
    index = 0
    while index < len(fields):
        entry = fields[index]
        index += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            index += 1  # the original path of a rename or copy follows
        entries[path] = code
    return entries


def is_ignored(directory: Path, relative: str) -> bool:
    """Whether git ignores ``relative`` in the checkout (a tracked file is never ignored)."""
    with _repo(directory) as repo:
        try:
            repo.git.check_ignore("-q", "--", relative)
        except git.GitCommandError:
            return False
    return True


def current_branch(directory: Path) -> str:
    """The branch checked out in ``directory``, or ``detached at <sha>``."""
    with _repo(directory) as repo:
        try:
            return repo.active_branch.name
        except TypeError:  # a detached HEAD
            return f"detached at {repo.head.commit.hexsha[:12]}"


def user_name(directory: Path) -> str:
    """Who is at the keyboard: git's ``user.name`` for this repository, else the login name."""
    try:
        name = str(_git(directory).config("--get", "user.name")).strip()
    except (git.GitCommandError, git.GitCommandNotFound, OSError):
        name = ""
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "user"


# -- keeping beflow's managed file out of the run's commits ------------------------------------------------------
#
# A linked worktree shares `info/exclude` with the user's repository, so nothing is written there. Instead the
# agent (through acpx) and the hooks get an environment whose `core.excludesFile` is a file beflow makes in the
# worktree's own git directory: the user's global excludes plus `/.acpxrc.json`. A tracked `.acpxrc.json` is
# marked skip-worktree in the worktree's own index. Both only make an accident unlikely; what guarantees that no
# injected byte reaches a branch is the check of every commit before the branch moves (find_leaks, publish).

#: The name of beflow's excludes file in a worktree's own git directory.
EXCLUDES_NAME = "beflow-exclude"
#: Bytes of the user's global excludes file copied into it, at most.
MAX_EXCLUDES = 1 << 20


def _user_excludes(repo: git.Repo) -> str:
    """The user's global excludes (``core.excludesFile``, else git's default ``$XDG_CONFIG_HOME/git/ignore``)."""
    try:
        configured = str(repo.git.config("--path", "--get", "core.excludesFile")).strip()
    except git.GitCommandError:
        configured = ""
    if configured:
        path = Path(configured)
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.environ.get("HOME", ""), ".config")
        path = Path(xdg) / "git" / "ignore"
    try:
        data = read_regular(path, limit=MAX_EXCLUDES)
    except (OSError, NotRegularError, FileTooLarge):
        return ""
    return data.decode("utf-8", errors="surrogateescape")


def excludes_env(directory: Path, excludes: Path) -> dict[str, str]:
    """The environment that makes git (run by the agent in ``directory``) ignore ``.acpxrc.json`` as well as all
    the user ignores globally: ``core.excludesFile`` set to ``excludes``, written here with both."""
    with _repo(directory, search_parent_directories=True) as repo:
        user = _user_excludes(repo)
    if user and not user.endswith("\n"):
        user += "\n"
    note = "# beflow: the .acpxrc.json it manages during a run is never the agent's to commit\n"
    # Not fsynced: it is written again before every run in the worktree, and nothing recovers from it.
    data = (user + note + f"/{ACPXRC}\n").encode("utf-8", errors="surrogateescape")
    atomic_write(excludes, data, durable=False)
    count = os.environ.get("GIT_CONFIG_COUNT", "")
    index = int(count) if count.isdigit() else 0  # the user's own GIT_CONFIG_KEY_<n> entries stay in force
    return {
        "GIT_CONFIG_COUNT": str(index + 1),
        f"GIT_CONFIG_KEY_{index}": "core.excludesFile",
        f"GIT_CONFIG_VALUE_{index}": str(excludes),
    }


def hide_managed_file(worktree: Path) -> dict[str, str]:
    """Keep ``.acpxrc.json`` out of what git stages in ``worktree``; the environment for what runs in it.

    Nothing of the user's repository changes: the excludes file lives in the worktree's private git directory,
    and the skip-worktree bit in the worktree's own index.
    """
    with _repo(worktree) as repo:
        git_dir = Path(repo.git_dir).absolute()  # the worktree's own, read from its `.git` file by GitPython
        if is_tracked(repo, ACPXRC):
            repo.git.update_index("--skip-worktree", "--", ACPXRC)
    return excludes_env(worktree, git_dir / EXCLUDES_NAME)


def unhide_managed_file(worktree: At) -> None:
    """Undo :func:`hide_managed_file`'s skip-worktree bit (the excludes file goes with the worktree)."""
    with _at(worktree) as repo:
        if is_tracked(repo, ACPXRC):
            repo.git.update_index("--no-skip-worktree", "--", ACPXRC)


@dataclass(frozen=True)
class Leak:
    """A commit made during a run that holds what beflow injected (or that beflow will not publish: ``said``)."""

    commit: str
    path: str
    what: str
    #: The whole description, when it is not "puts ``what`` in ``path``".
    said: str | None = None

    def describe(self) -> str:
        return self.said or f"commit {self.commit[:12]} puts {self.what} in {self.path}"


#: Bytes of an object read at a time while it is searched and hashed.
_CHUNK = 1 << 20
_BLOB_MODES = {"100644", "100755", "120000"}
#: The largest commit object (its headers and message) beflow checks and publishes. A message is read whole to be
#: checked for secrets, so a larger one is refused unread: no person writes a message of a megabyte, and a commit
#: of 150 MB once took beflow to 607 MB.
MAX_COMMIT = 1 << 20
_SECRET = "a secret value (an injected server's or beflow's own)"


class CorruptObject(GitError):
    """An object whose bytes do not hash to its id, or that is missing or not of the kind expected."""


class ObjectTooLarge(GitError):
    """An object larger than the reader was allowed to take (it was not read)."""


class ObjectReader:
    """Objects read through one ``git cat-file --batch`` of beflow's own, each re-hashed while it streams
    (``sha1("<type> <size>\\0" + content)``, SHA-256 in a SHA-256 repository): bytes that are not the object their
    id names are never taken for it, whatever a store that an agent could write holds. Close it after."""

    def __init__(self, repo: git.Repo) -> None:
        self._repo = repo
        self._process: Any = None

    def _start(self) -> Any:
        if self._process is None:
            self._process = self._repo.git.cat_file("--batch", as_process=True, istream=subprocess.PIPE)
        return self._process.proc

    def read(self, sha: str, kind: str, *, limit: int | None = None) -> bytes:
        """The content of object ``sha``, which must be a ``kind``, verified; at most ``limit`` bytes (a larger
        one raises :class:`ObjectTooLarge` unread)."""
        chunks: list[bytes] = []
        self.stream(sha, kind, chunks.append, limit=limit)
        return b"".join(chunks)

    def stream(self, sha: str, kind: str | None, take: Callable[[bytes], None], *, limit: int | None = None) -> int:
        """Hand the content of object ``sha`` (a ``kind``, unless None) to ``take`` a chunk at a time; raises
        :class:`CorruptObject` once the bytes are read if they do not hash to ``sha``. Its size."""
        process = self._start()
        process.stdin.write(f"{sha}\n".encode())
        process.stdin.flush()
        header = process.stdout.readline().decode("utf-8", "replace").split()
        if len(header) != 3 or header[0] != sha:
            self.close()
            raise CorruptObject(f"object {sha} is missing from the repository")
        found, size = header[1], int(header[2])
        if limit is not None and size > limit:
            self.close()  # what it would still say is never read: a fresh process serves the next object
            raise ObjectTooLarge(f"object {sha} is {size} bytes, more than {limit}")
        digest = hashlib.new("sha256" if len(sha) == 64 else "sha1", f"{found} {size}\0".encode())
        remaining = size
        while remaining > 0:
            chunk = process.stdout.read(min(_CHUNK, remaining))
            if not chunk:
                self.close()
                raise GitError(f"git cat-file stopped while reading object {sha}")
            remaining -= len(chunk)
            digest.update(chunk)
            take(chunk)
        process.stdout.read(1)  # the line end after the content
        if digest.hexdigest() != sha:
            raise CorruptObject(f"object {sha} is corrupt: its bytes are not the object its id names")
        if kind is not None and found != kind:
            raise CorruptObject(f"object {sha} is a {found}, not a {kind}")
        return size

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(OSError):
                process.proc.stdin.close()
            with contextlib.suppress(OSError):
                process.proc.kill()
            process.proc.wait()
            for stream in (process.proc.stdout, process.proc.stderr):
                if stream is not None:
                    stream.close()

    def __enter__(self) -> ObjectReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def find_leaks(worktree: At, since: str, head: str, needles: Sequence[bytes], *, managed: bool) -> list[Leak]:
    """Commits of ``since..head`` that carry injected content, or that beflow does not publish, first found first.

    ``needles`` are the injected file's bytes (found anywhere, in any file) and the secret values of the injected
    servers and of beflow itself (found in a file whose earlier version did not already hold them, in a file's
    path, or in a commit's message or headers: all of it is pushed). ``managed``: an injection happened, so any
    change to ``.acpxrc.json`` itself in a commit is a leak (during the run it held the servers).

    Every commit and blob the check reads is re-hashed as it is read (:class:`ObjectReader`): one whose bytes are
    not what its id names is a leak in itself, and a secret is exempted as already there only on the word of an
    earlier version so verified. Memory stays bounded: one commit at a time, none over :data:`MAX_COMMIT`.
    """
    wanted = [n for n in dict.fromkeys(needles) if n]
    leaks: list[Leak] = []
    with _at(worktree) as repo, ObjectReader(repo) as reader:
        for commit in _streamed(repo, "rev-list", "--reverse", head, f"^{since}", separator=b"\n"):
            sha = commit.decode("ascii", "replace").strip()
            if not sha:
                continue
            try:
                leaks += _commit_leaks(repo, reader, sha, wanted, managed)
            except ObjectTooLarge:
                why = f"its message is over {MAX_COMMIT >> 20} MiB, which beflow does not publish (nor read whole)"
                leaks.append(Leak(sha, "its message", "", said=f"commit {sha[:12]} is unpublishable: {why}"))
            except CorruptObject as error:
                leaks.append(Leak(sha, "", "", said=f"commit {sha[:12]} cannot be checked: {error.message}"))
    return leaks


def _commit_leaks(repo: git.Repo, reader: ObjectReader, commit: str, wanted: list[bytes], managed: bool) -> list[Leak]:
    raw = reader.read(commit, "commit", limit=MAX_COMMIT)
    headers, _, message = raw.partition(b"\n\n")
    leaks = []
    for text in _as_utf8(headers, message):
        if any(needle in text for needle in wanted):
            leaks.append(Leak(commit, "its message", _SECRET))
            break
    if any(needle in headers for needle in wanted):
        leaks.append(Leak(commit, "its author, committer or another header", _SECRET))
    if not wanted and not managed:
        return leaks
    fields = _streamed(repo, "diff-tree", "-r", "-m", "--root", "--no-renames", "--no-commit-id", "-z", commit)
    for meta_bytes in fields:
        meta, path_bytes = meta_bytes.decode("ascii", "replace"), next(fields, b"")
        parts = meta.lstrip(":").split()
        if len(parts) < 5 or parts[4][0] not in "AMT" or parts[1] not in _BLOB_MODES:
            continue
        old_sha, new_sha, path = parts[2], parts[3], path_bytes.decode("utf-8", "surrogateescape")
        if managed and path == ACPXRC:
            leaks.append(Leak(commit, path, "a version of .acpxrc.json, which held the injected servers"))
            continue
        if not wanted:
            continue
        if any(needle in path_bytes for needle in wanted):
            leaks.append(Leak(commit, "a file's name", "a secret value"))  # the name itself is not repeated
            continue
        try:
            found = _search(reader, new_sha, wanted)
            if found and old_sha.strip("0"):  # exempt only what a verified earlier version already held
                found -= _search(reader, old_sha, [wanted[i] for i in sorted(found)], indices=sorted(found))
        except CorruptObject as error:
            leaks.append(Leak(commit, path, "", said=f"commit {commit[:12]} cannot be checked: {error.message}"))
            continue
        if found:
            leaks.append(Leak(commit, path, _SECRET))
    return leaks


def _as_utf8(headers: bytes, message: bytes) -> list[bytes]:
    """The message as stored, and as UTF-8 when its ``encoding`` header names another (as a log shows it)."""
    texts = [message]
    for line in headers.split(b"\n"):
        if line.startswith(b"encoding "):
            with contextlib.suppress(LookupError, UnicodeError):
                texts.append(message.decode(line[9:].decode("ascii").strip()).encode("utf-8"))
    return texts


def _streamed(repo: git.Repo, verb: str, *args: str, separator: bytes = b"\0") -> Iterator[bytes]:
    """The output of ``git <verb> <args>``, one ``separator``-ended field at a time, as it comes."""
    handle = getattr(repo.git, verb.replace("-", "_"))(*args, as_process=True)  # kept: it kills the child when freed
    process = handle.proc
    tail = b""
    try:
        while chunk := process.stdout.read(_CHUNK):
            *fields, tail = (tail + chunk).split(separator)
            yield from fields
        if tail:
            yield tail
        error = process.stderr.read() if process.stderr else b""
        if process.wait() != 0:
            raise GitError(f"git {verb} failed: {error.decode('utf-8', 'replace').strip()}")
    finally:
        if process.poll() is None:  # left early: nothing more of it is wanted
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _search(reader: ObjectReader, sha: str, needles: Sequence[bytes], indices: Sequence[int] | None = None) -> set[int]:
    """Indices (into ``indices``, else ``needles``) of the needles the blob ``sha`` contains; read in chunks and
    re-hashed (:class:`CorruptObject` when its bytes are not the blob ``sha``)."""
    labels = list(indices) if indices is not None else list(range(len(needles)))
    keep = max(len(n) for n in needles) - 1
    tail = b""
    found: set[int] = set()

    def take(chunk: bytes) -> None:
        nonlocal tail
        window = tail + chunk
        found.update(labels[i] for i, needle in enumerate(needles) if labels[i] not in found and needle in window)
        tail = window[-keep:] if keep > 0 else b""

    reader.stream(sha, "blob", take)
    return found


def publish(worktree: At, branch: str, new: str, expected: str | None, message: str) -> None:
    """Move ``branch`` to ``new``, only if it still points to ``expected`` (None: only if it does not exist)."""
    with _at(worktree) as repo:
        elsewhere = [p for p, b in _registered_worktrees(repo).items() if b == branch]
        if elsewhere:
            raise GitError(f"branch {branch} is now checked out in {elsewhere[0]}, so beflow did not move it")
        try:
            repo.git.update_ref("-m", message, f"refs/heads/{branch}", new, expected or "0" * len(new))
        except git.GitCommandError as exc:
            raise GitError(
                f"branch {branch} changed during the run, so beflow did not move it: {exc.stderr.strip()}"
            ) from None
        _moved(f"refs/heads/{branch}", new)


def uncommit(worktree: At, commit: str) -> None:
    """Take ``worktree``'s HEAD back to ``commit``, keeping every file as it is (the commits' changes become
    uncommitted changes, as a mixed reset leaves them), and forget the commits in its HEAD's reflog, so nothing
    names them any more. HEAD is rewritten itself, detached: no ref it named moves."""
    with _at(worktree) as repo:
        move_head(repo, commit, "beflow: the run's commits undone")
        repo.git.read_tree(commit)  # the index of `commit`; the files are not touched
        repo.git.reflog("expire", "--expire=now", "--expire-unreachable=now", "HEAD")


def remote_url(directory: Path, remote: str, *, push: bool = False) -> str | None:
    """The URL of ``remote`` in the repository at ``directory`` (its push URL with ``push``; None when there is no
    such remote), with the user's ``insteadOf`` rewrites applied, as git itself would."""
    try:
        args = ["get-url", "--push", remote] if push else ["get-url", remote]
        return _git(directory).remote(*args).strip() or None
    except (git.GitCommandError, git.GitCommandNotFound, OSError):
        return None


@dataclass(frozen=True)
class PushAuth:
    """A token git authenticates with, for ``protocol://host`` only (``host[:port]``, as in the URL).

    git gets it through its credential protocol: beflow's helper (:mod:`beflow.repository.git_credential`) asks beflow
    for it
    over a socket that only the git command and what it starts inherit, and answers for that protocol and host
    alone. The token is in no environment, no argv, no file and no git setting.
    """

    token: str
    host: str
    protocol: str = "https"

    def __repr__(self) -> str:  # never the token (a traceback, a log)
        return f"PushAuth(protocol={self.protocol!r}, host={self.host!r})"


#: Variables of the push's environment emptied: configuration from a parent git (``git -c``), and an askpass
#: program that would be asked for any host (beflow's credential helper answers for one).
_PUSH_CLEARED = ("GIT_CONFIG_PARAMETERS", "GIT_ASKPASS")


def push(directory: Path, url: str, commit: str, branch: str, auth: PushAuth | None = None) -> None:
    """Push ``commit`` to ``branch`` of the repository at ``url`` (a fast-forward; never forced).

    The push goes exactly to ``url``: it runs in an empty repository of its own that borrows the objects of
    ``directory``'s (``objects/info/alternates``), with no configuration file read at all — not the repository's,
    whose ``pushurl``, ``insteadOf``, ``pushInsteadOf``, hooks or ``core.sshCommand`` an agent may have written, nor
    the system's or the user's global one. Only ``auth``'s credential helper and git's defaults apply; no hook runs.
    """
    with _repo(directory, search_parent_directories=True) as repo:
        objects = _common_dir(repo) / "objects"
    with tempfile.TemporaryDirectory(prefix="beflow-push-") as scratch:
        root = Path(scratch)
        (root / "objects" / "info").mkdir(parents=True)
        (root / "refs").mkdir()
        (root / "objects" / "info" / "alternates").write_text(f"{objects}\n", encoding="utf-8")
        (root / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
        formats = "\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n" if len(commit) == 64 else ""
        (root / "config").write_text(f"[core]\n\tbare = true\n{formats}", encoding="utf-8")
        with _isolated(root, url, auth) as run:
            try:
                run("push", "--no-verify", "--", "beflow", f"{commit}:refs/heads/{branch}")
            except git.GitCommandError as exc:
                raise _remote_failed("push", url, branch, exc) from None


@contextlib.contextmanager
def _isolated(
    root: Path, url: str, auth: PushAuth | None, *settings: tuple[str, str], **env: str
) -> Iterator[Callable[..., str]]:
    """Within the block, a runner of git commands (``run("push", ...)``: their output) in the scratch repository
    ``root``, which talk to ``url`` as the remote ``beflow``: only these settings (``settings``, ``auth``'s helper)
    and git's defaults apply — no configuration file (the repository's, the system's, the user's) is read, no hook
    runs, no redirect is followed. Every command of the block is limited to :data:`GIT_TIMEOUT`, as any of beflow's."""
    with _credential_helper(auth) as (helper, inherited):
        pairs = [
            # The URL goes in as a remote of this configuration, not in argv (readable by every user on the
            # machine), where credentials in it would show.
            ("remote.beflow.url", url),
            ("core.hooksPath", os.devnull),
            ("http.followRedirects", "false"),  # the token goes to the URL's host, never where it redirects
            ("credential.helper", ""),  # (resets the list: beflow's helper alone, if any)
            *settings,
            *helper,
        ]
        entries = {"GIT_CONFIG_COUNT": str(len(pairs))}
        for index, (key, value) in enumerate(pairs):
            entries |= {f"GIT_CONFIG_KEY_{index}": key, f"GIT_CONFIG_VALUE_{index}": value}
        environment = {
            **dict.fromkeys(_PUSH_CLEARED, ""),
            "GIT_DIR": str(root),
            **env,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_TRACE_REDACT": "1",
            **entries,
        }
        runner = _timed()[1](str(root))
        setattr(runner, "hardened", False)  # noqa: B010 - its configuration is all here: nothing else is read

        def run(*args: str) -> str:
            # Through `execute` (GitPython's own command builder would make `pass_fds` an option of git's): the
            # socket of the helper is passed to git, which passes it on to what it starts.
            command = [runner.GIT_PYTHON_GIT_EXECUTABLE or "git", *args]
            return str(runner.execute(command, env=environment, pass_fds=inherited))

        yield run


@contextlib.contextmanager
def _credential_helper(auth: PushAuth | None) -> Iterator[tuple[list[tuple[str, str]], tuple[int, ...]]]:
    """The settings that make git ask beflow's credential helper for ``auth``'s token, and the descriptor to pass
    on to git (none without ``auth``). The helper asks over one end of a socket pair; a thread of beflow's answers
    on the other, while the block lasts: nothing else can open either end (a pipe could be, through ``/proc``)."""
    if auth is None:
        yield [], ()
        return
    import shlex
    import socket
    import sys
    import threading

    from beflow.repository import git_credential

    ours, theirs = socket.socketpair()  # (neither inherited by any other child: only git gets `theirs`, by number)
    answer = auth.token.encode() + b"\n"

    def serve() -> None:
        with contextlib.suppress(OSError):
            while ours.recv(64):  # a helper's request: one answer each (git may ask more than once)
                ours.sendall(answer)

    thread = threading.Thread(target=serve, name="beflow-git-credential", daemon=True)
    thread.start()
    program = [sys.executable, "-I", "-S", git_credential.__file__, str(theirs.fileno()), auth.protocol, auth.host]
    try:
        yield [("credential.helper", "!" + shlex.join(program))], (theirs.fileno(),)
    finally:
        with contextlib.suppress(OSError):
            ours.shutdown(socket.SHUT_RDWR)
        thread.join()
        ours.close()
        theirs.close()


def _remote_failed(verb: str, url: str, branch: str, exc: git.GitCommandError) -> GitError:
    shown = without_credentials(url)
    said = str(exc.stderr).strip().replace(url, shown)
    return GitError(f"git {verb} {shown} {branch} failed: {said}")


def without_credentials(url: str) -> str:
    """``url`` without the user name and password it may carry (``https://user:token@host/...``), to show it."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc or not parts.scheme:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


# -- review rounds: what a branch's history says was answered, and the branch as another machine pushed it ---------


def trailer_values(directory: Path, branch: str, key: str, since: str | None = None) -> list[str]:
    """The values of every ``key:`` trailer in the commits of ``branch`` (those after ``since`` only, when given),
    newest first; none when there is no such branch."""
    with _repo(directory, search_parent_directories=True) as repo:
        tip = branch_tip(repo, branch)
        if tip is None:
            return []
        spec = f"%(trailers:key={key},valueonly,separator=%x00)%x01"
        revs = f"{since}..{tip}" if since is not None and since != tip else tip
        if since == tip:
            return []
        try:
            out = str(repo.git.log(f"--format={spec}", revs, "--"))
        except git.GitCommandError as exc:
            raise GitError(f"git log {branch} failed: {exc.stderr.strip()}") from None
    return [value.strip() for entry in out.split("\x01") for value in entry.split("\x00") if value.strip()]


def is_ancestor(directory: Path, older: str, newer: str) -> bool:
    """Whether ``older`` is ``newer`` or one of its ancestors."""
    with _repo(directory, search_parent_directories=True) as repo:
        try:
            repo.git.merge_base("--is-ancestor", older, newer)
        except git.GitCommandError:
            return False
    return True


def fetch(directory: Path, url: str, branch: str, auth: PushAuth | None = None) -> str | None:
    """The commit ``branch`` points to at ``url``, its objects fetched into the repository at ``directory``; None
    when the remote has no such branch. No local ref is moved (the caller decides).

    As :func:`push`: from an empty repository of its own (no configuration file of the repository's, the system's
    or the user's is read, no hook runs), writing the objects into the repository's object store."""
    with _repo(directory, search_parent_directories=True) as repo:
        objects = _common_dir(repo) / "objects"
        have = [c for c in (branch_tip(repo, branch), _head_of(repo)) if c]
    with tempfile.TemporaryDirectory(prefix="beflow-fetch-") as scratch:
        root = Path(scratch)
        (root / "objects").mkdir()
        (root / "refs" / "have").mkdir(parents=True)
        for index, commit in enumerate(have):  # what the repository has already: only the rest is fetched
            (root / "refs" / "have" / str(index)).write_text(f"{commit}\n", encoding="utf-8")
        (root / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
        (root / "config").write_text("[core]\n\tbare = true\n", encoding="utf-8")
        settings = [("protocol.ext.allow", "never"), ("fetch.writeCommitGraph", "false"), ("gc.auto", "0")]
        # The objects land in the repository's own store: the branch can then be moved to them.
        ref = f"refs/heads/{branch}"
        with _isolated(root, url, auth, *settings, GIT_OBJECT_DIRECTORY=str(objects)) as run:
            try:
                listed = run("ls-remote", "--", "beflow", ref).strip()
                if not listed:
                    return None
                run("fetch", "--no-tags", "--no-write-fetch-head", "--", "beflow", f"+{ref}:{ref}")
            except git.GitCommandError as exc:
                raise _remote_failed("fetch", url, branch, exc) from None
        return (root / ref).read_text(encoding="utf-8").strip() if (root / ref).is_file() else listed.split()[0]


def move_branch(directory: Path, branch: str, new: str, expected: str | None, message: str) -> None:
    """Move ``branch`` to ``new`` only if it still points to ``expected`` (None: only if it does not exist)."""
    with _repo(directory, search_parent_directories=True) as repo:
        try:
            repo.git.update_ref("-m", message, f"refs/heads/{branch}", new, expected or "0" * len(new))
        except git.GitCommandError as exc:
            why = exc.stderr.strip()
            raise GitError(f"branch {branch} changed meanwhile, so beflow did not move it: {why}") from None
        _moved(f"refs/heads/{branch}", new)
