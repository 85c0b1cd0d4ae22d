"""The user's repository stays the user's: what an agent must never change in its git directory is put back.

An agent runs as the user in a worktree that shares the user's git directory, so it can write the repository's
``config`` (a ``pushurl``, a filter driver), plant ``hooks/``, or edit ``info/`` (``exclude``, ``attributes``).
Around every agent session :func:`guarded` takes a snapshot of :data:`GUARDED` (bytes, modes, symlinks, which files
exist) — in the git directory, in each submodule's (``modules/**``), and each linked worktree's ``config.worktree`` —
and of the user's global git config files (:data:`GLOBAL`: every repository's git reads them, the next run's
``git worktree add`` too, before its agent), journals it under ``$BEFLOW_HOME/git-journal/`` (fsynced, ``0600``: a
config may hold credentials) before the agent starts, and afterwards puts back, byte for byte, whatever changed; the
caller records it and does not publish the run. When beflow is killed outright, :func:`recover` (``beflow
restore``, and every beflow command at start) puts the repository back from the journal once its process is gone.

Refs, objects, the index and logs are not put back: runs change them legitimately (the agent's commits, beflow's
worktree and branch). An unattended run notes the object store and the refs beside this snapshot
(:mod:`beflow.repository.objectstore`): an object the agent changed, or a ref the run builds on that moved, fails the
run; and
beflow checks what reaches a branch separately (:func:`beflow.repository.leaks.find_leaks`).

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

import base64
import contextlib
import json
import os
import shutil
import stat
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from beflow.errors import BeflowError
from beflow.paths import beflow_home, path_key
from beflow.repository import objectstore
from beflow.system import liveness
from beflow.system.files import FileTooLarge, NotRegularError, atomic_write, fsync_dir, read_note, read_regular, remove

#: What is guarded, relative to the repository's common git directory. ``config.worktree`` holds per-worktree
#: settings once ``extensions.worktreeConfig`` is on; ``objects/info/alternates`` would let objects of another
#: repository in.
GUARDED = ("config", "config.worktree", "hooks", "info", "objects/info/alternates")
#: A file this large in the guarded places is not snapshotted byte for byte; it is refused (fail closed).
MAX_FILE = 8 << 20
#: The root of the user's global git config files, guarded as one more "git directory" (its paths are absolute, kept
#: relative to it): every run shares its snapshot, whatever the repository.
GLOBAL = Path("/")
#: What a snapshot says of a place that a symlink stands in the way of (never followed).
BEHIND_LINK = "(behind a symlink)"
#: How deep submodules' git directories are looked for under ``modules/`` (names with slashes, nested submodules).
MAX_MODULE_DEPTH = 32


def global_config_files(environ: dict[str, str] | None = None) -> list[Path]:
    """The user's global git config files, as git finds them: ``$GIT_CONFIG_GLOBAL`` alone when it is set, else
    ``~/.gitconfig`` and ``$XDG_CONFIG_HOME/git/config`` (``~/.config/git/config``), each in its directory's real
    place; a symlink's target too, which ``git config --global`` writes."""
    env = os.environ if environ is None else environ
    configured = env.get("GIT_CONFIG_GLOBAL")
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    if configured:
        files = [Path(os.path.expanduser(configured))]
    else:
        files = [home / ".gitconfig", Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "git" / "config"]
    absolute = [Path(os.path.abspath(path)) for path in files]
    found = [Path(os.path.realpath(path.parent)) / path.name for path in absolute]
    found += [Path(os.path.realpath(path)) for path in found if path.is_symlink()]
    return list(dict.fromkeys(found))


def _snapshot_places(root: Path) -> list[str]:
    """What a snapshot of ``root`` looks at, absent paths too: the user's global config files (:data:`GLOBAL`), or a
    git directory's :data:`GUARDED` paths, those of its submodules' git directories and its linked worktrees'
    ``config.worktree``."""
    if root == GLOBAL:
        return [str(path.relative_to(GLOBAL)) for path in global_config_files()]
    return _places(root)


def _compare_places(root: Path, places: list[str]) -> list[str]:
    """What is looked at again after the agent: the snapshot's places, and in a git directory what is guarded there
    now (a submodule's git directory the agent made up). The global config's are the snapshot's alone: what the
    agent points a symlink at now is not the user's config, and must never be taken for one (nor removed)."""
    return places if root == GLOBAL else list(dict.fromkeys([*places, *_places(root)]))


def _places(root: Path) -> list[str]:
    """A git directory's guarded paths as it is now: :data:`GUARDED`, those of its submodules' git directories
    (``modules/**``) and its linked worktrees' ``config.worktree``, never through a symlink."""
    places = list(GUARDED)

    def modules(relative: str, depth: int) -> None:
        """A folder under ``modules/``: submodules' git directories, or the folders of a name with slashes."""
        if depth > MAX_MODULE_DEPTH:
            raise GitDirError(f"{root / relative}: submodules nested too deep to guard")
        for name in _directories(root / relative):
            inner = f"{relative}/{name}"
            if (root / inner / "HEAD").exists() or (root / inner / "config").exists():  # a submodule's git directory
                places.extend(f"{inner}/{guarded}" for guarded in GUARDED)
                modules(f"{inner}/modules", depth + 1)
            else:
                modules(inner, depth + 1)

    if not (root / "modules").is_symlink():
        modules("modules", 0)
    if not (root / "worktrees").is_symlink():
        places += [f"worktrees/{name}/config.worktree" for name in _directories(root / "worktrees")]
    return places


def _directories(path: Path) -> list[str]:
    """The directories in ``path`` (sorted), symlinks left out: nothing guarded is ever reached through one."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return []
    return [name for name in names if (path / name).is_dir() and not (path / name).is_symlink()]


def _behind_link(root: Path, relative: str) -> bool:
    """Whether a directory on the way to ``root / relative`` is a symlink."""
    path = root
    for part in relative.split("/")[:-1]:
        path = path / part
        if path.is_symlink():
            return True
    return False


def _gone(root: Path, relative: str) -> bool:
    """A path of a linked worktree that was removed meanwhile (a run's own, when it ends): nothing to put back."""
    parts = relative.split("/")
    if root == GLOBAL or len(parts) < 3 or parts[0] != "worktrees":
        return False
    return not (root / "worktrees" / parts[1]).is_dir()


class GitDirError(BeflowError):
    """The guarded files could not be read: nothing runs on a repository that could not be put back."""


class Item(BaseModel):
    """One path of the snapshot: a regular file (its bytes, base64), a directory, a symlink, or something else
    (a FIFO: noted, never opened)."""

    kind: Literal["file", "dir", "link", "other"]
    mode: int = 0
    data: str | None = None
    link: str | None = None


class Entry(BaseModel):
    """The journal of one guarded repository by one process."""

    git_dir: Path
    pid: int
    pid_start: float | None = None
    items: dict[str, Item]
    #: What the snapshot looked at, absent paths too (an entry without it: the paths of its items).
    places: list[str] = Field(default_factory=list)

    def looked_at(self) -> list[str]:
        return self.places or list(self.items)


def _take(git_dir: Path, places: Iterable[str]) -> dict[str, Item]:
    """The ``places`` under ``git_dir`` as they are now (absent ones are simply not in it)."""
    items: dict[str, Item] = {}

    def visit(relative: str) -> None:
        path = git_dir / relative
        if _behind_link(git_dir, relative):  # never followed: what it points at is not the user's guarded file
            items[relative] = Item(kind="other", link=BEHIND_LINK)
            return
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise GitDirError(f"{path}: cannot read it ({exc.strerror})") from None
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISLNK(info.st_mode):
            items[relative] = Item(kind="link", link=os.readlink(path))
        elif stat.S_ISDIR(info.st_mode):
            items[relative] = Item(kind="dir", mode=mode)
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                raise GitDirError(f"{path}: cannot list it ({exc.strerror})") from None
            for name in names:
                visit(f"{relative}/{name}")
        elif stat.S_ISREG(info.st_mode):
            try:
                data = read_regular(path, limit=MAX_FILE, follow_symlinks=False)
            except (OSError, NotRegularError, FileTooLarge) as exc:
                raise GitDirError(f"{path}: cannot read it ({exc})") from None
            items[relative] = Item(kind="file", mode=mode, data=base64.b64encode(data).decode("ascii"))
        else:
            items[relative] = Item(kind="other", mode=mode)

    for name in dict.fromkeys(places):
        if name not in items and not _gone(git_dir, name):
            visit(name)
    return items


def _changes(git_dir: Path, before: dict[str, Item], now: dict[str, Item]) -> list[str]:
    changed = (path for path in before.keys() | now.keys() if before.get(path) != now.get(path))
    return sorted(path for path in changed if not _gone(git_dir, path))


def _save_aside(git_dir: Path, now: dict[str, Item], changed: list[str]) -> Path | None:
    """The changed files as they were found, saved under ``$BEFLOW_HOME/saved/`` (``0600``, pruned with the other
    saved versions after some days) before they are put back: a change that was the user's own, made during the
    run (``git push -u`` writes ``config``), is not lost. Where they went (None: no file to save)."""
    import datetime as dt

    from beflow.mcp.journal import prune_saved, saved_dir

    found = [(relative, now[relative]) for relative in changed if relative in now and now[relative].kind == "file"]
    if not found:
        return None
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    place = "gitconfig" if git_dir == GLOBAL else path_key(git_dir.parent)
    prefix = f"git-{place}-{stamp}-{os.getpid()}"
    for relative, item in found:
        name = relative.replace("/", "%")
        atomic_write(
            saved_dir() / f"{prefix}-{name}", base64.b64decode(item.data or ""), mode=0o600, below=beflow_home()
        )
    prune_saved()
    return saved_dir() / f"{prefix}-*"


def _put_back(git_dir: Path, before: dict[str, Item], now: dict[str, Item]) -> tuple[list[str], Path | None]:
    """Make the guarded paths what ``before`` says (what was found saved aside first): the paths that differed,
    and where what was found went."""
    changed = _changes(git_dir, before, now)
    saved = _save_aside(git_dir, now, changed) if changed else None
    blocked: list[str] = []  # a symlink in the way, which beflow never follows: nothing is removed or written there
    # What was added (or changed kind) goes first, deepest first: a planted directory with all it holds.
    for relative in sorted(changed, key=lambda p: p.count("/"), reverse=True):
        current, prior = now.get(relative), before.get(relative)
        if current is None or (prior is not None and prior.kind == current.kind):
            continue
        if _behind_link(git_dir, relative):
            blocked.append(relative)
            continue
        path = git_dir / relative
        if current.kind == "dir":
            shutil.rmtree(path, ignore_errors=True)
        else:
            remove(path)
    for relative in sorted(changed, key=lambda p: p.count("/")):  # parents before their files
        prior = before.get(relative)
        if prior is None:
            continue
        if _behind_link(git_dir, relative):
            blocked.append(relative)
            continue
        path = git_dir / relative
        if prior.kind == "dir":
            path.mkdir(exist_ok=True)
            os.chmod(path, prior.mode)
        elif prior.kind == "file":
            atomic_write(path, base64.b64decode(prior.data or ""), mode=prior.mode)
        elif prior.kind == "link":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.symlink(prior.link or "", path)
        # "other" (a FIFO of the user's): left as it is; beflow never makes one
    for directory in {(git_dir / relative).parent for relative in changed} if changed else ():
        with contextlib.suppress(OSError):
            fsync_dir(directory)
    if blocked:
        where = ", ".join(str(git_dir / relative) for relative in sorted(set(blocked)))
        raise GitDirError(
            f"a symlink now stands in the way of {where}, which beflow does not follow",
            fix="Remove the symlink, then run `beflow restore`.",
        )
    return changed, saved


# --- the journal ----------------------------------------------------------------------------------------------


def journal_dir() -> Path:
    return beflow_home() / "git-journal"


def _key(git_dir: Path) -> str:
    return path_key(git_dir)


def _journal_path(git_dir: Path, pid: int) -> Path:
    return journal_dir() / f"{_key(git_dir)}-{pid}.json"


def _told_path(journal: Path) -> Path:
    """Where other beflows note what they found changed (and put back) while this journal's runs were active."""
    return journal.with_suffix(".changed")


def _read(path: Path) -> Entry | None:
    return read_note(path, Entry, limit=64 << 20)


def _alive(entry: Entry) -> bool:
    return liveness.is_running(entry.pid, entry.pid_start)


@contextlib.contextmanager
def _locked(git_dir: Path) -> Iterator[None]:
    from filelock import FileLock

    path = beflow_home() / "locks" / f"gitdir-{_key(git_dir)}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path, thread_local=False):
        yield


def _entries_of(git_dir: Path) -> list[tuple[Path, Entry | None]]:
    directory = journal_dir()
    if not directory.is_dir():
        return []
    return [(path, _read(path)) for path in sorted(directory.glob(f"{_key(git_dir)}-*.json"))]


def recover() -> list[str]:
    """Put back every repository a dead beflow left guarded; what was done, one line each."""
    directory = journal_dir()
    done: list[str] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        entry = _read(path)
        if entry is None:
            remove(path)  # cut short before it was complete: nothing ran on its strength
            continue
        if _alive(entry):
            continue
        with _locked(entry.git_dir):
            others = [e for p, e in _entries_of(entry.git_dir) if p != path and e is not None and _alive(e)]
            if not others and entry.git_dir.is_dir():  # a live one puts back the same snapshot itself
                try:
                    now = _take(entry.git_dir, _compare_places(entry.git_dir, entry.looked_at()))
                    changed, saved = _put_back(entry.git_dir, entry.items, now)
                except (GitDirError, OSError) as exc:
                    done.append(f"could not put back {_where(entry.git_dir)} as it was before a run: {exc}")
                    continue
                if changed:
                    found = f" (the versions found are saved as {saved})" if saved is not None else ""
                    done.append(
                        f"put back {_listed(entry.git_dir, changed)} as before the run of beflow pid "
                        f"{entry.pid}, which was killed{found}"
                    )
            remove(path)
            remove(_told_path(path))
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
    return any(entry is not None and _alive(entry) for root in (git_dir, GLOBAL) for _, entry in _entries_of(root))


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
                    if entry is not None and _alive(entry):
                        # Another beflow's agent may be at work: its snapshot is the user's.
                        items, places = entry.items, entry.looked_at()
                    elif entry is not None and items is None:
                        try:  # a killed beflow's
                            _put_back(git_dir, entry.items, _take(git_dir, _compare_places(git_dir, entry.looked_at())))
                        except OSError as exc:
                            raise GitDirError(
                                f"{git_dir}: a killed run's changes could not be put back ({exc.strerror})",
                                fix="Fix the cause, then run `beflow restore`.",
                            ) from None
                        remove(path)
                        remove(_told_path(path))
                    else:
                        remove(path)
                        remove(_told_path(path))
                if items is None:
                    places = _snapshot_places(git_dir)
                    items = _take(git_dir, places)
                journal = _journal_path(git_dir, os.getpid())
                pid = os.getpid()
                entry = Entry(git_dir=git_dir, pid=pid, pid_start=liveness.start_time(pid), items=items, places=places)
                atomic_write(journal, entry.model_dump_json(), mode=0o600)
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
                now = _take(guard.git_dir, _compare_places(guard.git_dir, shared.places))
                changed, saved = _put_back(guard.git_dir, shared.items, now)
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
                    if path != shared.journal and entry is not None and _alive(entry):
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
                    remove(shared.journal)
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
