"""The journal of the managed ``.acpxrc.json``: what was there before a session, and how it is put back
(docs/architecture.md, docs/safety.md).

Before :func:`beflow.mcp.inject.managed_acpxrc` touches a file, :func:`record` writes a :class:`JournalEntry`
(existed or not, exact bytes, mode, or the symlink it was) to ``$BEFLOW_HOME/journal/`` (:mod:`beflow.system.journal`:
fsynced, mode 0600), and a per-user marker (``$XDG_STATE_HOME/beflow/managed/``) naming that journal, so a beflow of
another ``BEFLOW_HOME`` restores a crashed run's file from it instead of taking the injected file for the user's
own. :func:`finish` puts the file back and drops both; a version someone else wrote meanwhile is first saved under
``$BEFLOW_HOME/saved/`` (for :data:`SAVED_DAYS` days). :mod:`beflow.mcp.orphans` does the same for every entry whose
process is gone. A damaged entry is moved to ``journal/damaged/`` (:func:`quarantine`) and reported by what it was
for, never by its content.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from beflow.errors import BeflowError
from beflow.paths import ACPXRC, beflow_home
from beflow.system.files import (
    FileTooLarge,
    NotRegularError,
    atomic_write,
    describe_kind,
    fsync_dir,
    read_note,
    read_regular,
    remove,
)
from beflow.system.journal import SAVED_DAYS, Damaged, Journal, Owned, SavedAside, stamp


class JournalEntry(Owned):
    """What beflow needs to put ``target`` back, written (fsynced) before the target is touched; ``pid`` and
    ``pid_start`` (:class:`~beflow.system.journal.Owned`) name the process that touched it."""

    version: Literal[1] = 1
    target: Path
    existed: bool
    #: Permission bits of a prior regular file.
    mode: int | None
    #: A prior symlink's target (``prior`` is then ``None``): the link is put back, never written through.
    symlink: str | None = None
    #: The prior bytes, base64.
    prior: str | None
    #: sha256 of the bytes beflow wrote, to notice when someone else changed the file meanwhile.
    written_sha256: str
    created: dt.datetime

    @field_validator("prior")
    @classmethod
    def _base64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("not valid base64") from None
        return value

    def prior_bytes(self) -> bytes | None:
        return None if self.prior is None else base64.b64decode(self.prior)


class Restored(BaseModel):
    """What restoring one managed file did."""

    target: Path
    #: ``restored``: the prior bytes (or symlink) are back; ``removed``: beflow had created the file;
    #: ``gone``: the directory no longer exists (a removed worktree); ``failed``: see ``detail``;
    #: ``quarantined``: the journal entry was damaged and moved aside; ``detail`` says what could be recovered.
    action: Literal["restored", "removed", "gone", "failed", "quarantined"]
    pid: int | None = None
    #: Where the version someone else wrote during the run was saved before the prior came back.
    saved: Path | None = None
    #: What was found in the file's place instead of a version that could be saved (a symlink, never followed; a
    #: file too large to keep), in words.
    replaced: str | None = None
    detail: str | None = None
    #: ``quarantined``: the file is still exactly what beflow wrote and its prior is lost with the entry; a new
    #: session must not take it for the prior.
    unresolved: bool = Field(default=False, exclude=True)

    def describe(self) -> str:
        owner = f" (left by beflow pid {self.pid})" if self.pid else ""
        if self.action == "restored":
            text = f"restored {self.target} to its content before the run{owner}"
        elif self.action == "removed":
            text = f"removed {self.target}, which beflow had created for a run{owner}"
        elif self.action == "gone":
            text = f"{self.target}: its directory no longer exists, nothing to restore{owner}"
        elif self.action == "quarantined":
            text = str(self.detail)
        else:
            text = f"could not restore {self.target}: {self.detail}"
        if self.saved is not None:
            text += f"; the version changed during the run is saved at {self.saved} (for {SAVED_DAYS} days)"
        if self.replaced is not None:
            text += f"; during the run it had been replaced by {self.replaced}"
        return text


# --- where the state lives ------------------------------------------------------------------------------------


def home_journal() -> Journal[JournalEntry]:
    """The journal of this ``BEFLOW_HOME``."""
    return Journal(journal_dir(), JournalEntry, limit=MAX_JOURNAL_ENTRY)


def journal_dir() -> Path:
    return beflow_home() / "journal"


def journal_path(key: str) -> Path:
    return home_journal().path(key)


def damaged_dir() -> Path:
    """Where damaged journal entries are moved, never read again by beflow (they may hold a prior's secrets)."""
    return home_journal().damaged


def registry_dir() -> Path:
    """A per-user place outside any ``BEFLOW_HOME``: which journal holds the prior of a directory right now, so
    that a beflow with another ``BEFLOW_HOME`` finds it instead of taking the injected file for the user's own."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "beflow" / "managed"


def marker_path(key: str) -> Path:
    return registry_dir() / f"{key}.json"


class Marker(BaseModel):
    journal: Path
    pid: int


#: A marker is a path and a pid; anything bigger is damage.
MAX_MARKER = 1 << 16


def read_marker(path: Path) -> Marker | None:
    """The marker at ``path``; ``None`` when there is none or it cannot be used (every reader takes a damaged
    marker for none)."""
    return read_note(path, Marker, limit=MAX_MARKER)


#: A journal entry is a small JSON file (the prior .acpxrc.json, base64); anything bigger is damage.
MAX_JOURNAL_ENTRY = 16 << 20

#: The largest managed file read (a prior, or a version found at the end): an ``.acpxrc.json`` is a few KiB.
MAX_MANAGED = 8 << 20


# --- restore --------------------------------------------------------------------------------------------------


class _Current(BaseModel):
    """What is at a managed path now: nothing, a regular file's bytes, a symlink (never followed: the agent may
    have made it, to a file of the user's it could not read), or a file too large to keep."""

    data: bytes | None = None
    link: str | None = None
    too_large: bool = False


def _current(target: Path) -> _Current:
    """What is at ``target`` now. Whatever is not a regular file or a symlink (a FIFO, a socket, a device, a
    directory) raises :class:`NotRegularError` without being opened: a FIFO would block beflow for ever."""
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return _Current()
    if stat.S_ISLNK(info.st_mode):
        return _Current(link=os.readlink(target))
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularError(target, info.st_mode)
    try:
        return _Current(data=read_regular(target, limit=MAX_MANAGED, follow_symlinks=False))
    except FileNotFoundError:
        return _Current()
    except NotRegularError as exc:
        if exc.kind == describe_kind(stat.S_IFLNK):  # made a symlink since
            return _Current(link=os.readlink(target))
        raise
    except FileTooLarge:
        return _Current(too_large=True)


def _save_aside(data: bytes, key: str) -> Path:
    """Keep a version someone else wrote (for :data:`SAVED_DAYS` days: it was written while the injected secrets
    were in place)."""
    saved = SavedAside(beflow_home())
    path = saved.save(f"{key}-{stamp()}-{os.getpid()}{ACPXRC}", data)
    saved.prune()
    return path


def _put_symlink(target: Path, link: str) -> None:
    """Put a symlink back atomically (a temporary link renamed over the target)."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.link.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    os.symlink(link, temporary)
    os.replace(temporary, target)
    fsync_dir(target.parent)


def _restore(entry: JournalEntry, key: str) -> Restored:
    """Put ``entry.target`` back as the journal says; a version someone else wrote meanwhile is saved first."""
    target = entry.target
    if not target.parent.is_dir():
        return Restored(target=target, action="gone", pid=entry.pid)
    prior = entry.prior_bytes()
    current = _current(target)
    saved = replaced = None
    data = current.data
    if data is not None and hashlib.sha256(data).hexdigest() != entry.written_sha256 and data != prior:
        saved = _save_aside(data, key)
    elif current.link is not None and current.link != entry.symlink:
        # What a link points to is never read, nor saved: it is a file of the user's the agent may not read.
        replaced = f"a symlink to {current.link}, which beflow did not follow"
    elif current.too_large:
        replaced = f"a file larger than {MAX_MANAGED} bytes, which beflow did not keep"
    if not entry.existed:
        remove(target)
        return Restored(target=target, action="removed", pid=entry.pid, saved=saved, replaced=replaced)
    if entry.symlink is not None:
        _put_symlink(target, entry.symlink)
    else:
        assert prior is not None and entry.mode is not None
        atomic_write(target, prior, mode=entry.mode)
    return Restored(target=target, action="restored", pid=entry.pid, saved=saved, replaced=replaced)


def record(key: str, entry: JournalEntry) -> None:
    """Journal ``entry`` before its target is touched, and mark which journal holds it."""
    # Journal first (it may hold secrets of the prior file: 0600), so a crash from here on can be undone.
    home_journal().write(key, entry)
    # Then the per-user marker, for a beflow of another BEFLOW_HOME: without it, after a crash of this one, it would
    # take the injected file for the user's own. Best effort: the journal alone still serves this BEFLOW_HOME.
    with contextlib.suppress(OSError):
        marker = Marker(journal=journal_path(key), pid=entry.pid)
        atomic_write(marker_path(key), marker.model_dump_json(), mode=0o600)


def finish(entry: JournalEntry, key: str, journal: Path | None = None) -> Restored:
    """Restore, then drop the journal entry; on failure the entry stays for ``beflow restore``."""
    journal = journal or journal_path(key)
    try:
        result = _restore(entry, key)
    except NotRegularError as exc:
        what = f"it is now {exc.kind}" if exc.path == entry.target else str(exc)
        raise BeflowError(
            f"could not restore {entry.target}: {what}, which beflow leaves as it is",
            fix="Move it away, then run `beflow restore`: the prior content stays in beflow's journal until then.",
        ) from exc
    except OSError as exc:
        raise BeflowError(
            f"could not restore {entry.target}: {exc.strerror or exc}",
            fix="Fix the cause, then run `beflow restore`: the prior content stays in beflow's journal until then.",
        ) from exc
    home_journal().drop(journal)
    _drop_marker(key, journal)
    return result


def _drop_marker(key: str, journal: Path) -> None:
    """Forget the per-user marker of ``key`` when it names ``journal`` (never another run's)."""
    marker = read_marker(marker_path(key))
    if marker is not None and marker.journal == journal:
        with contextlib.suppress(OSError):  # best effort, as its writing was: the journal is what counts
            remove(marker_path(key))


def read_entry(path: Path) -> JournalEntry | None:
    """The journal entry at ``path``; None when there is none; :class:`Damaged` when it is unusable."""
    return home_journal().read(path)


def read_journal(key: str) -> JournalEntry | None:
    return read_entry(journal_path(key))


def quarantine(key: str, damage: Damaged, journal: Path | None = None) -> Restored:
    """Move a damaged entry aside (mode kept, 0600) and recover what its readable parts allow; say which."""
    journal = journal or journal_path(key)
    destination = home_journal().quarantine(journal)
    _drop_marker(key, journal)
    target, outcome, unresolved = _salvage(damage.raw)
    where = str(target) if target is not None else "the file it was for (unknown: the entry does not say)"
    return Restored(
        target=target or journal,
        action="quarantined",
        detail=f"journal entry {journal.name} is damaged ({damage.why}); moved to {destination}. {where}: {outcome}",
        unresolved=unresolved,
    )


def _salvage(raw: bytes | None) -> tuple[Path | None, str, bool]:
    """From a damaged entry, the target, what could be done for it (only what its intact fields prove), and
    whether the target is still beflow's injected file with its prior lost."""
    try:
        data = json.loads(raw or b"")
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("target"), str):
        lost = "not recovered; if an .acpxrc.json still holds beflow's MCP servers, put your own back by hand"
        return None, lost, False
    target = Path(data["target"])
    unknown = "not recovered (the entry lost its earlier content); if it still holds beflow's MCP servers, "
    unknown += "put your own version back by hand"
    try:
        current = _current(target).data
    except OSError:
        return target, unknown, False
    written = data.get("written_sha256")
    ours = current is not None and isinstance(written, str) and hashlib.sha256(current).hexdigest() == written
    if not ours:
        return target, "left as it is (it is no longer the file beflow wrote)", False
    if data.get("existed") is False:
        remove(target)
        return target, "removed (beflow had created it for the run)", False
    prior, mode = data.get("prior"), data.get("mode")
    if isinstance(prior, str) and isinstance(mode, int) and data.get("symlink") is None:
        try:
            atomic_write(target, base64.b64decode(prior, validate=True), mode=mode)
        except (binascii.Error, ValueError, OSError):
            return target, unknown, True
        return target, "restored to its content before the run", False
    return target, "not recovered: it still holds beflow's MCP servers; put your own version back by hand", True
