"""A snapshot of what a run must never change in a git directory, taken before an agent and put back after it,
byte for byte (:mod:`beflow.repository.repoguard` journals it and shares it between runs).

The places are :data:`GUARDED` in the repository's common git directory, in each submodule's git directory
(``modules/**``) and each linked worktree's ``config.worktree``; or the user's global git config files
(:data:`GLOBAL`). A snapshot holds each path's kind, mode and bytes (or a symlink's target); nothing is ever read or
written through a symlink, and a FIFO is noted, never opened. What is found changed is saved aside under
``$BEFLOW_HOME/saved/`` (a change may have been the user's own) before the snapshot's version comes back.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from beflow.errors import BeflowError
from beflow.paths import beflow_home, path_key
from beflow.system.files import FileTooLarge, NotRegularError, atomic_write, fsync_dir, read_regular, remove
from beflow.system.journal import SavedAside, stamp

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


def snapshot_places(root: Path) -> list[str]:
    """What a snapshot of ``root`` looks at, absent paths too: the user's global config files (:data:`GLOBAL`), or a
    git directory's :data:`GUARDED` paths, those of its submodules' git directories and its linked worktrees'
    ``config.worktree``."""
    if root == GLOBAL:
        return [str(path.relative_to(GLOBAL)) for path in global_config_files()]
    return _places(root)


def compare_places(root: Path, places: list[str]) -> list[str]:
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


def take(git_dir: Path, places: Iterable[str]) -> dict[str, Item]:
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
    found = [(relative, now[relative]) for relative in changed if relative in now and now[relative].kind == "file"]
    if not found:
        return None
    place = "gitconfig" if git_dir == GLOBAL else path_key(git_dir.parent)
    prefix = f"git-{place}-{stamp()}-{os.getpid()}"
    saved = SavedAside(beflow_home())
    for relative, item in found:
        saved.save(f"{prefix}-{relative.replace('/', '%')}", base64.b64decode(item.data or ""))
    saved.prune()
    return saved.directory / f"{prefix}-*"


def put_back(git_dir: Path, before: dict[str, Item], now: dict[str, Item]) -> tuple[list[str], Path | None]:
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
