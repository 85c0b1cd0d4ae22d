"""The user's repository stays the user's: what an agent must never change in its git directory is put back.

An agent runs as the user in a worktree that shares the user's git directory, so it can write the repository's
``config`` (a ``pushurl``, a filter driver), plant ``hooks/``, or edit ``info/`` (``exclude``, ``attributes``).
Around every agent session :func:`guarded` takes a snapshot (:mod:`beflow.repository.snapshot`: bytes, modes,
symlinks, which files exist) of :data:`~beflow.repository.snapshot.GUARDED` — in the git directory, in each
submodule's (``modules/**``), and each linked worktree's ``config.worktree`` — and of the user's global git config
files (:data:`~beflow.repository.snapshot.GLOBAL`: every repository's git reads them, the next run's ``git worktree
add`` too, before its agent), journals it under ``$BEFLOW_HOME/git-journal/`` (:mod:`beflow.system.journal`:
fsynced, ``0600``, since a config may hold credentials) before the agent starts, and afterwards puts back, byte for
byte, whatever changed; the caller records it and does not publish the run. When beflow is killed outright,
:func:`recover` (``beflow restore``, and every beflow command at start) puts the repository back from the journal
once its process is gone.

Refs, objects, the index and logs are not put back: runs change them legitimately (the agent's commits, beflow's
worktree and branch). An unattended run notes the object store and the refs beside this snapshot
(:mod:`beflow.repository.objectstore`): an object the agent changed, or a ref the run builds on that moved, fails the
run; and beflow checks what reaches a branch separately (:func:`beflow.repository.leaks.find_leaks`).

Several runs of one repository in one process (a watch) share one snapshot: the first takes it, the last drops
its journal, and a change found when any of them ends is put back and told to every run still active (any of
their agents may have made it). A beflow process that finds a live journal of another process for the same
repository takes that snapshot as its own, so it never takes a change of the other's agent for the user's, and
tells that process what it found through a note beside its journal (``<journal>.changed``), read when its runs end.
The global config is guarded the same way, as one more root shared by the runs of every repository. While any
agent is at work on the repository, or on any repository (:func:`agent_at_work`), another run's git is distrusted
from its start: the config may hold that agent's changes already.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from beflow.errors import BeflowError
from beflow.paths import beflow_home, path_key
from beflow.repository import objectstore
from beflow.repository.snapshot import GLOBAL, GitDirError, Item, compare_places, put_back, snapshot_places, take
from beflow.system.files import atomic_write, read_regular, remove
from beflow.system.journal import Journal, Owned, this_process

# --- the journal ----------------------------------------------------------------------------------------------


class Entry(Owned):
    """The journal of one guarded repository (or of the global git config) by one process (``pid``,
    ``pid_start``: :class:`~beflow.system.journal.Owned`)."""

    git_dir: Path
    items: dict[str, Item]
    #: What the snapshot looked at, absent paths too (an entry without it: the paths of its items).
    places: list[str] = Field(default_factory=list)

    def looked_at(self) -> list[str]:
        return self.places or list(self.items)


#: An entry holds the guarded files' bytes (each at most ``snapshot.MAX_FILE``); anything bigger is damage.
MAX_ENTRY = 64 << 20


def journal_dir() -> Path:
    return beflow_home() / "git-journal"


def _journal() -> Journal[Entry]:
    return Journal(journal_dir(), Entry, limit=MAX_ENTRY)


def _key(git_dir: Path) -> str:
    return path_key(git_dir)


def _name(git_dir: Path, pid: int) -> str:
    return f"{_key(git_dir)}-{pid}"


def _told_path(journal: Path) -> Path:
    """Where other beflows note what they found changed (and put back) while this journal's runs were active."""
    return journal.with_suffix(".changed")


@contextlib.contextmanager
def _locked(git_dir: Path) -> Iterator[None]:
    from filelock import FileLock

    path = beflow_home() / "locks" / f"gitdir-{_key(git_dir)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path, thread_local=False):
        yield


def _entries_of(git_dir: Path) -> list[tuple[Path, Entry | None]]:
    """The journal entries of ``git_dir``, each process's; a damaged one as ``None``."""
    return _journal().entries(f"{_key(git_dir)}-")


def _drop(path: Path) -> None:
    """Drop a journal entry and the note of changes told to its owner."""
    _journal().drop(path)
    remove(_told_path(path))


def recover() -> list[str]:
    """Put back every repository a dead beflow left guarded; what was done, one line each."""
    done: list[str] = []
    for path, entry in _journal().entries():
        if entry is None:  # nothing ran on its strength; moved aside (a directory or a FIFO cannot be dropped)
            with contextlib.suppress(FileNotFoundError):  # (gone meanwhile)
                _journal().quarantine(path)
            continue
        if entry.owner_alive():
            continue
        with _locked(entry.git_dir):
            others = [e for p, e in _entries_of(entry.git_dir) if p != path and e is not None and e.owner_alive()]
            if not others and entry.git_dir.is_dir():  # a live one puts back the same snapshot itself
                try:
                    now = take(entry.git_dir, compare_places(entry.git_dir, entry.looked_at()))
                    changed, saved = put_back(entry.git_dir, entry.items, now)
                except (GitDirError, OSError) as exc:
                    done.append(f"could not put back {_where(entry.git_dir)} as it was before a run: {exc}")
                    continue
                if changed:
                    found = f" (the versions found are saved as {saved})" if saved is not None else ""
                    done.append(
                        f"put back {_listed(entry.git_dir, changed)} as before the run of beflow pid "
                        f"{entry.pid}, which was killed{found}"
                    )
            _drop(path)
    return done


def has_entries() -> bool:
    """Whether a guarded repository may need putting back (one directory listed)."""
    try:
        return any(name.endswith(".json") for name in os.listdir(journal_dir()))
    except OSError:
        return False


# --- the guard ------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Guard:
    """One run's guard of a repository: ``changed`` is what was found changed (and put back) while it was active."""

    git_dir: Path
    #: What changed: paths in the git directory, relative to it, and the user's global config files, absolute.
    changed: list[str] = field(default_factory=list)
    #: Where the changed files were saved, as found, before they were put back.
    saved: Path | None = None
    #: Why what changed could not all be put back (the journal then stays for ``beflow restore``).
    failed: str | None = None
    #: The same run's guard of the user's global git config (:data:`GLOBAL`), ended with this one.
    home: Guard | None = None
    #: The object store and the refs as they were before the run (its own, not shared:
    # :mod:`beflow.repository.objectstore`),
    #: and what was found changed in them when it ended.
    store: objectstore.Watch | None = None
    found: objectstore.Found | None = None


@dataclass(eq=False)
class _Shared:
    items: dict[str, Item]
    places: list[str]
    journal: Path
    guards: list[Guard] = field(default_factory=list)


_ACTIVE: dict[Path, _Shared] = {}
_ACTIVE_LOCK = threading.Lock()


def common_git_dir(directory: Path) -> Path:
    """The git directory the worktrees of ``directory``'s repository share (no git process)."""
    from beflow.repository import git

    with git.open_repo(directory) as repo:
        return Path(repo.common_dir).resolve()


def agent_at_work(directory: Path) -> bool:
    """Whether an agent may be at work on ``directory``'s repository right now: a run of this process, or a live
    beflow's journal, guards it — or guards the user's global git config, which every repository reads (a run's
    agent on another repository). Its config and hooks may be the agent's until that run ends."""
    git_dir = common_git_dir(directory)
    with _ACTIVE_LOCK:
        if git_dir in _ACTIVE or GLOBAL in _ACTIVE:
            return True
    return any(_journal().live(f"{_key(root)}-") for root in (git_dir, GLOBAL))


def begin(directory: Path, store: tuple[Path, str, str] | None = None) -> Guard:
    """Snapshot (and journal) the guarded files of ``directory``'s repository and the user's global git config, or
    join the snapshots active; with ``store`` (the project's checkout, the run's branch and ``worktrees.base``),
    note the repository's object store and refs too, compared when the guard ends."""
    guard = _join(common_git_dir(directory))
    try:
        guard.home = _join(GLOBAL)
        if store is not None:
            try:
                guard.store = objectstore.watch(*store)
            except (OSError, BeflowError) as exc:
                raise GitDirError(f"the repository's object store and refs could not be read: {exc}") from None
    except BaseException:
        end(guard)
        raise
    return guard


def _join(git_dir: Path) -> Guard:
    guard = Guard(git_dir)
    with _ACTIVE_LOCK:
        shared = _ACTIVE.get(git_dir)
        if shared is None:
            with _locked(git_dir):
                items, places = None, []
                for path, entry in _entries_of(git_dir):
                    if entry is not None and entry.owner_alive():
                        # Another beflow's agent may be at work: its snapshot is the user's.
                        items, places = entry.items, entry.looked_at()
                    elif entry is not None and items is None:
                        try:  # a killed beflow's
                            put_back(git_dir, entry.items, take(git_dir, compare_places(git_dir, entry.looked_at())))
                        except OSError as exc:
                            raise GitDirError(
                                f"{git_dir}: a killed run's changes could not be put back ({exc.strerror})",
                                fix="Fix the cause, then run `beflow restore`.",
                            ) from None
                        _drop(path)
                    else:
                        _drop(path)
                if items is None:
                    places = snapshot_places(git_dir)
                    items = take(git_dir, places)
                owner = this_process()
                entry = Entry(git_dir=git_dir, pid=owner.pid, pid_start=owner.pid_start, items=items, places=places)
                journal = _journal().write(_name(git_dir, owner.pid), entry)
            shared = _ACTIVE[git_dir] = _Shared(items, places, journal)
        shared.guards.append(guard)
    return guard


def end(guard: Guard) -> list[str]:
    """Put back whatever changed in the guarded files; what did (for every run active on the repository, and for
    every run active anywhere when it was the global git config)."""
    _leave(guard)
    home = guard.home
    if home is not None:
        _leave(home)
        found = [path if path.startswith("(") else str(GLOBAL / path) for path in home.changed]
        guard.changed += [path for path in found if path not in guard.changed]
        guard.failed = guard.failed or home.failed
        guard.saved = guard.saved or home.saved
    if guard.store is not None:
        from beflow.repository import git

        try:
            with git.distrusting():  # the repository's config may have been the agent's until just now
                guard.found = objectstore.compare(guard.store)
        except (OSError, BeflowError) as exc:
            guard.found = objectstore.Found(objects=[f"(the object store could not be compared: {exc})"])
    return guard.changed


def _leave(guard: Guard) -> list[str]:
    with _ACTIVE_LOCK:
        shared = _ACTIVE[guard.git_dir]
        with _locked(guard.git_dir):
            failed, saved = None, None
            try:
                now = take(guard.git_dir, compare_places(guard.git_dir, shared.places))
                changed, saved = put_back(guard.git_dir, shared.items, now)
            except (OSError, BeflowError) as exc:  # the journal stays: `beflow restore` tries again
                failed = str(exc)
                changed = ["(your global git config)" if guard.git_dir == GLOBAL else "(the git directory)"]
            # Another beflow's run on the repository may be the one whose agent did it: it is told too, through a
            # note beside its journal, read when it ends. What others noted for this process is read here.
            told = _told_path(shared.journal)
            with contextlib.suppress(OSError, ValueError):
                noted = json.loads(read_regular(told, limit=1 << 20))
                changed += [path for path in noted if isinstance(path, str) and path not in changed]
            remove(told)
            if changed:
                for path, entry in _entries_of(guard.git_dir):
                    if path != shared.journal and entry is not None and entry.owner_alive():
                        with contextlib.suppress(OSError, ValueError):
                            earlier = json.loads(read_regular(_told_path(path), limit=1 << 20))
                            changed_there = [*earlier, *(c for c in changed if c not in earlier)]
                            atomic_write(_told_path(path), json.dumps(changed_there), mode=0o600)
                            continue
                        atomic_write(_told_path(path), json.dumps(changed), mode=0o600)
            for other in shared.guards:
                other.changed += [path for path in changed if path not in other.changed]
                other.failed = other.failed or failed
                other.saved = saved or other.saved
            shared.guards.remove(guard)
            if not shared.guards:
                del _ACTIVE[guard.git_dir]
                if failed is None:
                    _journal().drop(shared.journal)
    return guard.changed


@contextlib.contextmanager
def guarded(directory: Path) -> Iterator[Guard]:
    """The guarded files of ``directory``'s repository, put back after the body however it ends."""
    guard = begin(directory)
    try:
        yield guard
    finally:
        end(guard)


def _where(root: Path) -> str:
    return "your global git config" if root == GLOBAL else str(root)


def _listed(root: Path, changed: list[str]) -> str:
    """``config, hooks/pre-push in /repo/.git``, ``your global git config /home/me/.gitconfig``, or both."""
    if root == GLOBAL:
        return f"your global git config {', '.join(str(GLOBAL / path) for path in changed)}"
    inside = [path for path in changed if not Path(path).is_absolute()]
    outside = [path for path in changed if Path(path).is_absolute()]
    said = [f"{', '.join(inside)} in {root}"] if inside else []
    said += [f"your global git config {', '.join(outside)}"] if outside else []
    return " and ".join(said)


def describe(guard: Guard) -> str:
    """What the run's record and terminal say about a guard that found changes."""
    what = _listed(guard.git_dir, guard.changed)
    if guard.failed is not None:
        return (
            f"the agent changed {what}, which a run must not touch, and beflow could not put it all back "
            f"({guard.failed}); run `beflow restore` once the cause is fixed"
        )
    saved = f" (the versions it found are saved as {guard.saved})" if guard.saved is not None else ""
    return f"the agent changed {what}, which a run must not touch; beflow put them back as they were{saved}"
