"""The user's repository, and the one way beflow runs a git command.

GitPython gives the repository object: where its git directories and work tree are, what HEAD names (read from
the repository's files, no process). Every git command goes through :func:`run` (or :func:`streamed` and
:func:`stream` for output read as it comes), and so through :mod:`beflow.system.proc`: a process group of its own,
stopped whole at :data:`GIT_TIMEOUT`, its output capped, beflow's secrets withheld from its environment
(:func:`withhold`), pinned to a worktree's own git directory where one is known (:func:`pinned`), and, after an
agent, running no hook and no configured command (:func:`distrusting`). GitPython itself runs no git command.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beflow.errors import BeflowError, UsageError
from beflow.paths import git_toplevel
from beflow.system import proc, startup

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


class CommandFailed(GitError):
    """A git command that exited with another status than 0: the status and what git said."""

    def __init__(self, argv: Sequence[str], status: int | None, stderr: str) -> None:
        self.status = status
        self.stderr = stderr
        super().__init__(f"{' '.join(argv[:2])} failed: {stderr or f'exit {status}'}")


NOT_A_REPOSITORY = "{directory} is not inside a git repository"
RUN_IN_A_CHECKOUT = "Run beflow in a git checkout."

#: Seconds any one git command may take before it is stopped (with what it started, a hook say) and the step fails
#: with a :class:`GitError`: a hung hook, a lock held by a stuck process or an unreachable remote must not hold a
#: run — or a watch waiting for it — forever.
GIT_TIMEOUT = 600.0

#: The most of a git command's output kept: a listing (``status``, ``for-each-ref``) is read whole, and one longer
#: than this (a flood, a hook printing without end) fails the step rather than being read in part.
MAX_OUTPUT = 256 << 20

#: Variables that hold beflow's own secrets (the tracker's token): emptied in the environment of every git command,
#: which a hook or a configured command an agent planted could read, and which any process of the user can read
#: while it runs (``/proc/<pid>/environ``).
_WITHHELD: set[str] = set()


def withhold(names: Iterable[str]) -> None:
    """Keep the variables ``names`` out of every git command beflow runs from now on."""
    _WITHHELD.update(names)


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


def _untrusted_env(directory: str, pinned: Mapping[str, str], cache: dict[str, dict[str, str]]) -> dict[str, str]:
    """The environment of a git command run in ``directory`` after an agent (cached per directory)."""
    if directory not in cache:
        base = _config_env(UNTRUSTED_CONFIG)
        # `git config` runs nothing; it reads every file git would (includes too) in this directory. Exit 1: no
        # filter driver is configured.
        listed = _call(
            ["git", "config", "-z", "--name-only", "--get-regexp", r"^filter\..*\.(clean|smudge|process)$"],
            directory,
            {**_base_env(pinned), **base},
        )
        names = listed.stdout.decode("utf-8", "surrogateescape") if listed.returncode == 0 else ""
        drivers = sorted({name.split(".", 1)[1].rsplit(".", 1)[0] for name in names.split("\0") if name})
        pairs = [*UNTRUSTED_CONFIG]
        pairs += [(f"filter.{name}.{key}", value) for name in drivers for key, value in _FILTER_OFF]
        cache[directory] = {**_config_env(pairs), "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": ""}
    return cache[directory]


# -- the repository object -------------------------------------------------------------------------------------------


@functools.cache
def _repository() -> type[git.Repo]:
    """GitPython's ``Repo`` whose own git runner refuses to run anything (made on first use: GitPython is imported
    lazily): beflow's git commands go through :func:`run`, never through GitPython's."""

    class Refusing(git.Git):
        def execute(self, *args: Any, **kwargs: Any) -> Any:
            raise GitError(f"GitPython was asked to run git ({args[0] if args else ''}): beflow runs git itself")

    class Repository(git.Repo):
        GitCommandWrapperType = Refusing
        #: Git's environment for this repository's commands: its git directories named outright (see
        #: :func:`pinned`); empty: git finds them from the work tree, as usual.
        pinned: dict[str, str] = {}  # noqa: RUF012 - replaced per object, never changed in place

    return Repository


def open_at(path: Path) -> git.Repo:
    """The repository object of the work tree (or git directory) at ``path`` itself; close it after."""
    return _repository()(path)


def open_repo(directory: Path) -> git.Repo:
    """The repository of the project directory (the one around it); a clear error when there is none."""
    try:
        return _repository()(directory, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UsageError(NOT_A_REPOSITORY.format(directory=directory), fix=RUN_IN_A_CHECKOUT) from None


def pinned_env(path: Path, own: Path) -> dict[str, str]:
    """Git's environment for the worktree at ``path`` whose git directory is ``own``: its git directory, the
    repository's and its files named outright, so neither its ``.git`` file nor its ``commondir`` is read."""
    return {"GIT_DIR": str(own), "GIT_COMMON_DIR": str(own.parent.parent), "GIT_WORK_TREE": str(path)}


def pinned(path: Path, own: Path | None) -> git.Repo:
    """A repository object for the worktree at ``path`` whose git commands are pinned to ``own`` (when known)."""
    repo = open_at(path)
    if own is not None:
        repo.pinned = pinned_env(path, own)  # type: ignore[attr-defined]
    return repo


#: Where a worktree-level call works: the worktree's path, or the one repository object a run keeps open for all
#: of its calls (:func:`beflow.repository.worktrees.open_worktree`, pinned).
if TYPE_CHECKING:
    At = Path | git.Repo


@contextlib.contextmanager
def at(where: At) -> Iterator[git.Repo]:
    """The repository object of ``where``: the one given, or one opened for the block (and closed after)."""
    if not isinstance(where, Path):
        yield where
        return
    with open_at(where) as repo:
        yield repo


def directory_of(where: At) -> str:
    """The directory git runs in for ``where`` (for messages)."""
    return str(where) if isinstance(where, Path) else str(where.working_tree_dir or where.working_dir)


def common_dir(repo: git.Repo) -> Path:
    """The git directory the repository's worktrees share (read from ``commondir`` by GitPython: no process)."""
    return Path(repo.common_dir).resolve()


def head_of(repo: git.Repo) -> str:
    """The commit HEAD names, read from the repository's files: no git process."""
    return str(git.SymbolicReference.dereference_recursive(repo, "HEAD"))


# -- running git -------------------------------------------------------------------------------------------------------


def _base_env(pinned: Mapping[str, str]) -> dict[str, str]:
    """What every git command's environment holds over beflow's own: git's messages in English (some are read),
    the repository's git directories when pinned, and beflow's secrets emptied."""
    return {"LANGUAGE": "C", "LC_ALL": "C", **pinned, **dict.fromkeys(_WITHHELD, "")}


def _prepared(where: At, env: Mapping[str, str] | None, hardened: bool) -> tuple[str, dict[str, str]]:
    """The directory a git command of ``where`` runs in, and its environment over beflow's (``env`` last)."""
    directory = str(where) if isinstance(where, Path) else str(where.working_dir)
    pins = {} if isinstance(where, Path) else dict(getattr(where, "pinned", {}))
    extra = _base_env(pins)
    distrusted = _DISTRUSTED.get()
    if distrusted is not None and hardened:
        extra |= _untrusted_env(directory, pins, distrusted)
    return directory, {**extra, **(env or {})}


def _call(
    argv: list[str], directory: str, env: Mapping[str, str], stdin: bytes | None = None, pass_fds: Sequence[int] = ()
) -> proc.Completed:
    """``argv`` (a git command) run to its end, or stopped with all it started at :data:`GIT_TIMEOUT`."""
    timeout = GIT_TIMEOUT
    if not os.path.isdir(directory):
        raise GitError(f"{' '.join(argv[:2])}: {directory} is not a directory")
    done = proc.run_blocking(
        argv, cwd=Path(directory), env=env, stdin=stdin, pass_fds=pass_fds, timeout=timeout, max_capture=MAX_OUTPUT
    )
    if done.timed_out:
        raise GitError(
            f"{' '.join(argv[:3])} did not finish within {timeout:g} s and was stopped",
            fix="Look for a git hook or another git process that hangs in this repository.",
        )
    if "stdout" in done.clipped:
        raise GitError(f"{' '.join(argv[:2])} printed more than beflow reads ({MAX_OUTPUT >> 20} MiB)")
    return done


def run(
    where: At,
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    pass_fds: Sequence[int] = (),
    hardened: bool = True,
) -> str:
    """The output of ``git <args>`` run in ``where`` (as git wrote it: UTF-8, any other byte kept as a surrogate).
    A :class:`CommandFailed` when git exits with another status than 0; a :class:`GitError` when it was stopped at
    :data:`GIT_TIMEOUT`. ``env`` goes over everything else in git's environment; ``pass_fds`` are inherited by git
    (and what it starts). ``hardened=False`` leaves out the settings of :func:`distrusting`: for a git whose whole
    configuration is in ``env`` (no file is read)."""
    directory, environment = _prepared(where, env, hardened)
    argv = ["git", *args]
    done = _call(argv, directory, environment, stdin, pass_fds)
    if done.returncode != 0:
        raise CommandFailed(argv, done.returncode, done.stderr.decode("utf-8", "replace").strip())
    return done.stdout.decode("utf-8", "surrogateescape")


@contextlib.contextmanager
def stream(where: At, *args: str) -> Iterator[proc.Stream]:
    """``git <args>`` in ``where``, its input written and its output read as the caller goes (``cat-file
    --batch``), for as long as the block lasts: stopped when it ends."""
    directory, environment = _prepared(where, None, True)
    with proc.streaming(["git", *args], cwd=Path(directory), env=environment, stdin=True) as child:
        yield child


def streamed(where: At, *args: str, separator: bytes = b"\0") -> Iterator[bytes]:
    """The output of ``git <args>``, one ``separator``-ended field at a time, as it comes (a history of any length
    in bounded memory); a :class:`CommandFailed` at the end when git failed."""
    directory, environment = _prepared(where, None, True)
    argv = ["git", *args]
    with proc.streaming(argv, cwd=Path(directory), env=environment) as child:
        tail = b""
        while chunk := child.stdout.read1():
            *fields, tail = (tail + chunk).split(separator)
            yield from fields
        if tail:
            yield tail
        done = child.finish()
        if done.returncode != 0:
            raise CommandFailed(argv, done.returncode, done.stderr.decode("utf-8", "replace").strip())
