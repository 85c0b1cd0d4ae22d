"""A journal of what beflow must undo should it be killed: one small JSON entry per thing it is about to change,
written durably before the risky step, dropped once it is undone (docs/architecture.md, "The managed file").

Each entry names the process that wrote it (its pid and start time, :mod:`beflow.system.liveness`), so the next
beflow tells an orphan, whose owner is gone, from the entry of a run still going. An entry may hold secrets (a
prior ``.acpxrc.json``, a git config), so it is written ``0600``; and it is read as untrusted, since an agent
running as the user can write the journal's directory: never through a symlink, never a FIFO, within a cap, and a
damaged one is said to be damaged in words that never quote it (:class:`Damaged`), then moved out of the way.

What someone else wrote meanwhile in a place beflow puts back is saved aside first (:class:`SavedAside`), for
:data:`SAVED_DAYS` days. The managed ``.acpxrc.json`` (:mod:`beflow.mcp.journal`) and the user's git directory
(:mod:`beflow.repository.repoguard`) each keep a journal of their own this way.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import stat
import time
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from beflow.system import liveness
from beflow.system.files import (
    FileTooLarge,
    NotRegularError,
    atomic_write,
    fsync_dir,
    open_directory,
    read_regular,
    remove,
)

#: Days a version saved aside is kept: it may hold secrets (an injected file's, a git config's credentials).
SAVED_DAYS = 7


class Owned(BaseModel):
    """What every journal entry says: the process that wrote it."""

    pid: int
    #: The owner's start time (seconds since the epoch): a reused pid is not mistaken for the owner still running.
    #: (``None``: unknown, the pid alone decides.)
    pid_start: float | None = None

    def owner_alive(self) -> bool:
        """Is the process that wrote the entry still running (the same process, not a reuse of its pid)?"""
        return liveness.is_running(self.pid, self.pid_start)


def this_process() -> Owned:
    """The owner an entry this process writes names."""
    pid = os.getpid()
    return Owned(pid=pid, pid_start=liveness.start_time(pid))


def stamp() -> str:
    """A UTC time stamp for a file name, to the microsecond (``20240101T120000123456Z``)."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")


class Damaged(Exception):
    """A journal entry that cannot be used: ``why`` says so in words that never quote its content; ``raw`` is what
    could be read of it (``None``: nothing), for a caller that salvages what its intact fields prove."""

    def __init__(self, why: str, raw: bytes | None) -> None:
        super().__init__(why)
        self.why = why
        self.raw = raw


E = TypeVar("E", bound=Owned)


class Journal(Generic[E]):
    """The entries in ``directory``, one ``<name>.json`` each, read as ``model`` within ``limit`` bytes."""

    def __init__(self, directory: Path, model: type[E], *, limit: int) -> None:
        self.directory = directory
        self.model = model
        self.limit = limit

    @property
    def damaged(self) -> Path:
        """Where damaged entries are moved, never read again by beflow (they may hold secrets)."""
        return self.directory / "damaged"

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def paths(self, prefix: str = "") -> list[Path]:
        """The entries whose names start with ``prefix``, sorted; none when there is no directory."""
        return sorted(self.directory.glob(f"{prefix}*.json")) if self.directory.is_dir() else []

    def write(self, name: str, entry: E) -> Path:
        """Write ``entry`` durably (fsynced, file and directory) and ``0600``, before the step it lets beflow undo."""
        path = self.path(name)
        atomic_write(path, entry.model_dump_json(indent=2), mode=0o600)
        return path

    def read(self, path: Path) -> E | None:
        """The entry at ``path`` (this journal's, or another's of the same kind); ``None`` when there is none.
        Raises :class:`Damaged` when it cannot be used: not a regular file (a symlink too: never followed), too
        large, unreadable, empty, not JSON, or a field invalid."""
        try:
            raw = read_regular(path, limit=self.limit, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except NotRegularError as exc:
            raise Damaged(f"it is {exc.kind}", None) from None
        except FileTooLarge:
            raise Damaged(f"it is larger than {self.limit} bytes", None) from None
        except OSError as exc:
            raise Damaged(f"it cannot be read ({exc.strerror or type(exc).__name__})", None) from None
        if not raw.strip():
            raise Damaged("it is empty", raw)
        try:
            return self.model.model_validate_json(raw)
        except ValidationError as exc:
            if any(error["type"] == "json_invalid" for error in exc.errors()):
                raise Damaged("it is not valid JSON (cut short, or overwritten)", raw) from None
            # Field names only: the input values (secrets) are never part of a message.
            fields = sorted({".".join(str(part) for part in error["loc"]) or "the entry" for error in exc.errors()})
            raise Damaged(f"invalid field(s): {', '.join(fields)}", raw) from None

    def entries(self, prefix: str = "") -> list[tuple[Path, E | None]]:
        """The entries whose names start with ``prefix``, each with its path; a damaged one as ``None``."""
        found: list[tuple[Path, E | None]] = []
        for path in self.paths(prefix):
            try:
                found.append((path, self.read(path)))
            except Damaged:
                found.append((path, None))
        return found

    def live(self, prefix: str = "") -> list[E]:
        """The entries whose owner still runs (damaged ones left out)."""
        return [entry for _, entry in self.entries(prefix) if entry is not None and entry.owner_alive()]

    def quarantine(self, path: Path) -> Path:
        """Move the damaged entry at ``path`` into :attr:`damaged` (``0700``; the entry keeps its ``0600``), out of
        every later look; where it went."""
        destination = self.damaged / f"{path.stem}-{stamp()}.json"
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(destination.parent, 0o700)
        os.replace(path, destination)
        fsync_dir(path.parent)
        return destination

    def drop(self, path: Path) -> None:
        """Remove the entry at ``path`` durably, once what it journalled is undone (or needs undoing no more)."""
        remove(path)


class SavedAside:
    """``<home>/saved/``: what someone else wrote in a place beflow was about to put back, kept for ``days`` days.
    Written and pruned below ``home`` through no symlink: a ``saved`` an agent replaced by a link to a directory of
    the user's is neither written through nor pruned."""

    def __init__(self, home: Path, *, days: int = SAVED_DAYS) -> None:
        self.home = home
        self.directory = home / "saved"
        self.days = days

    def save(self, name: str, data: bytes) -> Path:
        """Keep ``data`` as ``name`` (``0600``); where it is."""
        path = self.directory / name
        atomic_write(path, data, mode=0o600, below=self.home)
        return path

    def prune(self, now: float | None = None) -> list[Path]:
        """Delete what was saved more than :attr:`days` days ago; the paths deleted."""
        cutoff = (time.time() if now is None else now) - self.days * 86400
        removed = []
        with contextlib.suppress(OSError), open_directory(self.directory, below=self.home) as directory:
            for entry in os.scandir(directory.fd):
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                        os.unlink(entry.name, dir_fd=directory.fd)
                        removed.append(self.directory / entry.name)
        return removed
