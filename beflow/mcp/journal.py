"""The journal of the managed ``.acpxrc.json``: what was there before a session, how it is put back, and the
orphans a killed beflow left (docs/architecture.md, docs/safety.md).

Before :func:`beflow.mcp.inject.managed_acpxrc` touches a file, :func:`record` writes a :class:`JournalEntry`
(existed or not, exact bytes, mode, or the symlink it was) to ``$BEFLOW_HOME/journal/``, fsynced, mode 0600, and a
per-user marker (``$XDG_STATE_HOME/beflow/managed/``) naming that journal, so a beflow of another ``BEFLOW_HOME``
restores a crashed run's file from it instead of taking the injected file for the user's own. :func:`finish` puts
the file back and drops both; a version someone else wrote meanwhile is first saved under ``$BEFLOW_HOME/saved/``
(for :data:`SAVED_DAYS` days). :func:`recover_orphans` (``beflow restore``, and quietly every beflow command at
start) does the same for every entry whose process is gone. A damaged entry is moved to ``journal/damaged/`` and
reported by what it was for, never by its content. The locks of a managed directory live here too: the journal
entry is the note naming the lock's holder.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from beflow.errors import BeflowError, LockedError
from beflow.paths import ACPXRC, beflow_home
from beflow.system import liveness
from beflow.system.files import (
    FileTooLarge,
    NotRegularError,
    atomic_write,
    describe_kind,
    fsync_dir,
    open_directory,
    read_note,
    read_regular,
    remove,
)
from beflow.system.locks import NotedLock


class JournalEntry(BaseModel):
    """What beflow needs to put ``target`` back, written (fsynced) before the target is touched."""

    version: Literal[1] = 1
    target: Path
    pid: int
    #: The owner's start time (seconds since the epoch): a reused pid is not mistaken for the owner still running.
    pid_start: float | None
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


def _lock(key: str) -> NotedLock[JournalEntry]:
    """The lock of one managed path; the journal entry (written and removed by the session itself, and left
    behind by a killed one) is the note naming its holder."""
    return NotedLock(beflow_home() / "locks" / f"{key}.lock", _journal_path(key), JournalEntry)


def journal_dir() -> Path:
    return beflow_home() / "journal"


def _journal_path(key: str) -> Path:
    return journal_dir() / f"{key}.json"


def saved_dir() -> Path:
    return beflow_home() / "saved"


def damaged_dir() -> Path:
    """Where damaged journal entries are moved, never read again by beflow (they may hold a prior's secrets)."""
    return journal_dir() / "damaged"


def _registry_dir() -> Path:
    """A per-user place outside any ``BEFLOW_HOME``: which journal holds the prior of a directory right now, so
    that a beflow with another ``BEFLOW_HOME`` finds it instead of taking the injected file for the user's own."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "beflow" / "managed"


def _marker_path(key: str) -> Path:
    return _registry_dir() / f"{key}.json"


class _Marker(BaseModel):
    journal: Path
    pid: int


#: A marker is a path and a pid; anything bigger is damage.
MAX_MARKER = 1 << 16


def _read_marker(path: Path) -> _Marker | None:
    """The marker at ``path``; ``None`` when there is none or it cannot be used (every reader takes a damaged
    marker for none)."""
    return read_note(path, _Marker, limit=MAX_MARKER)


#: A journal entry is a small JSON file (the prior .acpxrc.json, base64); anything bigger is damage.
MAX_JOURNAL_ENTRY = 16 << 20

#: Days a version saved aside is kept: it may hold the injected secrets (it was written while they were in place).
SAVED_DAYS = 7
#: The largest managed file read (a prior, or a version found at the end): an ``.acpxrc.json`` is a few KiB.
MAX_MANAGED = 8 << 20


def prune_saved(now: float | None = None) -> list[Path]:
    """Delete what :func:`_save_aside` saved more than :data:`SAVED_DAYS` days ago; the paths deleted."""
    cutoff = (time.time() if now is None else now) - SAVED_DAYS * 86400
    removed = []
    # Reached through no symlink: a `saved` an agent replaced by a link to a directory of the user's is no
    # directory of beflow's to prune.
    with contextlib.suppress(OSError), open_directory(saved_dir(), below=beflow_home()) as directory:
        for entry in os.scandir(directory.fd):
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                    os.unlink(entry.name, dir_fd=directory.fd)
                    removed.append(saved_dir() / entry.name)
    return removed


# --- process identity -----------------------------------------------------------------------------------------


def _owner_alive(entry: JournalEntry) -> bool:
    """Is the process that wrote ``entry`` still running (the same process, not a reuse of its pid)?"""
    return liveness.is_running(entry.pid, entry.pid_start)


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
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = saved_dir() / f"{key}-{stamp}-{os.getpid()}{ACPXRC}"
    atomic_write(path, data, mode=0o600, below=beflow_home())
    prune_saved()
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
    atomic_write(_journal_path(key), entry.model_dump_json(indent=2), mode=0o600)
    # Then the per-user marker, for a beflow of another BEFLOW_HOME: without it, after a crash of this one, it would
    # take the injected file for the user's own. Best effort: the journal alone still serves this BEFLOW_HOME.
    with contextlib.suppress(OSError):
        marker = _Marker(journal=_journal_path(key), pid=entry.pid)
        atomic_write(_marker_path(key), marker.model_dump_json(), mode=0o600)


def finish(entry: JournalEntry, key: str, journal: Path | None = None) -> Restored:
    """Restore, then drop the journal entry; on failure the entry stays for ``beflow restore``."""
    journal = journal or _journal_path(key)
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
    remove(journal)
    _drop_marker(key, journal)
    return result


def _drop_marker(key: str, journal: Path) -> None:
    """Forget the per-user marker of ``key`` when it names ``journal`` (never another run's)."""
    marker = _read_marker(_marker_path(key))
    if marker is not None and marker.journal == journal:
        with contextlib.suppress(OSError):  # best effort, as its writing was: the journal is what counts
            remove(_marker_path(key))


class _Damaged(Exception):
    """A journal entry that cannot be used: ``why`` says so in words that never quote its content."""

    def __init__(self, why: str, raw: bytes | None) -> None:
        super().__init__(why)
        self.why = why
        self.raw = raw


def _read_entry(path: Path) -> JournalEntry | None:
    """The journal entry at ``path``; None when there is none; :class:`_Damaged` when it is unusable."""
    try:
        raw = read_regular(path, limit=MAX_JOURNAL_ENTRY, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except NotRegularError as exc:
        raise _Damaged(f"it is {exc.kind}", None) from None
    except FileTooLarge:
        raise _Damaged(f"it is larger than {MAX_JOURNAL_ENTRY} bytes", None) from None
    except OSError as exc:
        raise _Damaged(f"it cannot be read ({exc.strerror or type(exc).__name__})", None) from None
    if not raw.strip():
        raise _Damaged("it is empty", raw)
    try:
        return JournalEntry.model_validate_json(raw)
    except ValidationError as exc:
        if any(error["type"] == "json_invalid" for error in exc.errors()):
            raise _Damaged("it is not valid JSON (cut short, or overwritten)", raw) from None
        # Field names only: the input values (a prior's secrets) are never part of a message.
        fields = sorted({".".join(str(part) for part in error["loc"]) or "the entry" for error in exc.errors()})
        raise _Damaged(f"invalid field(s): {', '.join(fields)}", raw) from None


def _read_journal(key: str) -> JournalEntry | None:
    return _read_entry(_journal_path(key))


def _quarantine(key: str, damage: _Damaged, journal: Path | None = None) -> Restored:
    """Move a damaged entry aside (mode kept, 0600) and recover what its readable parts allow; say which."""
    journal = journal or _journal_path(key)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    destination = damaged_dir() / f"{journal.stem}-{stamp}.json"
    destination.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(destination.parent, 0o700)
    os.replace(journal, destination)
    fsync_dir(journal.parent)
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


def recover_foreign(key: str) -> list[Restored]:
    """The orphan of a beflow with another ``BEFLOW_HOME`` on the same directory, found through the per-user
    marker, is restored from that beflow's journal before a new session starts (the directory lock is held)."""
    marker = _read_marker(_marker_path(key))
    if marker is None:
        remove(_marker_path(key))  # a damaged one serves no one (and a missing one leaves nothing to remove)
        return []
    if marker.journal == _journal_path(key):
        return []  # ours: recover_held has seen to it
    try:
        entry = _read_entry(marker.journal)
    except _Damaged as damage:
        return [_quarantine(key, damage, marker.journal)]
    if entry is None:
        remove(_marker_path(key))
        return []
    if _owner_alive(entry):
        raise LockedError(
            f"{entry.target} is managed by a running beflow of another BEFLOW_HOME (pid {entry.pid})",
            fix="Wait for that run to finish (or stop it), then try again.",
        )
    try:
        return [finish(entry, key, marker.journal)]
    except BeflowError as error:
        return [Restored(target=entry.target, action="failed", pid=entry.pid, detail=error.message)]


def recover_held(key: str, *, spare_live: bool) -> list[Restored]:
    """Restore the journal entry of ``key`` (its lock is held); ``spare_live`` leaves a live owner's entry alone."""
    try:
        entry = _read_journal(key)
    except _Damaged as damage:
        return [_quarantine(key, damage)]
    if entry is None or (spare_live and _owner_alive(entry)):
        return []
    try:
        result = finish(entry, key)
    except BeflowError as error:
        return [Restored(target=entry.target, action="failed", pid=entry.pid, detail=error.message)]
    # A temporary file of an interrupted atomic write can only be a dead beflow's: the lock is held.
    if entry.target.parent.is_dir():
        for stray in entry.target.parent.glob(f".{ACPXRC}.*.tmp"):
            remove(stray)
    return [result]


def active_entries() -> list[JournalEntry]:
    """Journal entries whose process is still running (files a live beflow manages right now)."""
    entries = []
    for path in sorted(journal_dir().glob("*.json")):
        try:
            entry = _read_entry(path)
        except _Damaged:
            continue
        if entry is not None and _owner_alive(entry):
            entries.append(entry)
    return entries


def recover_orphans() -> list[Restored]:
    """Restore every file a dead beflow left managed; entries of running processes are left alone.

    This ``BEFLOW_HOME``'s journal first, then the orphans of other ``BEFLOW_HOME`` s that the per-user markers
    name (the same user's files: whichever beflow runs next puts them back). Returns what was done (``failed``
    rows included), in a stable order.
    """
    prune_saved()
    directory = journal_dir()
    results: list[Restored] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        key = path.stem
        try:
            entry = _read_journal(key)
        except _Damaged:
            entry = None
        held = try_lock(key, entry.target.parent if entry is not None else path.parent)
        if held is None:
            continue  # a live manager holds it
        try:
            results.extend(recover_held(key, spare_live=True))
        finally:
            held.release()
    results.extend(_recover_other_homes())
    return results


def _recover_other_homes() -> list[Restored]:
    results: list[Restored] = []
    registry = _registry_dir()
    for path in sorted(registry.glob("*.json")) if registry.is_dir() else []:
        key = path.stem
        marker = _read_marker(path)
        if marker is None:
            continue  # a session start in that directory deals with it
        try:
            entry = _read_entry(marker.journal)
        except (_Damaged, ValueError):  # ValueError: a journal path no file can have (a NUL byte)
            continue  # likewise
        if marker.journal == _journal_path(key) or entry is None or _owner_alive(entry):
            continue
        held = try_lock(key, entry.target.parent)
        if held is None:
            continue
        try:
            results.extend(recover_foreign(key))
        except LockedError:
            pass
        finally:
            held.release()
    return results


# --- the locks of a managed directory---------------------------------------------------------------------------


def holder(key: str) -> str:
    try:
        entry = _read_journal(key)
    except _Damaged:
        entry = None
    if entry is None:
        marker = _read_marker(_marker_path(key))
        if marker is not None:
            return f"pid {marker.pid}, of another BEFLOW_HOME"
    return f"pid {entry.pid}" if entry is not None else "pid unknown"


class DirectoryLocks:
    """Both locks of a managed directory: beflow's own (in ``BEFLOW_HOME``) and an exclusive ``flock`` on the
    directory itself, which every beflow on the machine sees whatever its ``BEFLOW_HOME``. The OS drops both
    when the holder dies."""

    def __init__(self, lock: NotedLock[JournalEntry], directory_fd: int | None) -> None:
        self.lock = lock
        self.directory_fd = directory_fd

    def release(self) -> None:
        if self.directory_fd is not None:
            os.close(self.directory_fd)  # closing the descriptor drops its flock
            self.directory_fd = None
        self.lock.release()


def try_lock(key: str, directory: Path) -> DirectoryLocks | None:
    """Both locks at once, or neither (None when another beflow holds one)."""
    lock = _lock(key)
    if not lock.acquire(None):
        return None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        # Gone (nothing there to manage), or not readable by us: beflow's own lock is all there is.
        return DirectoryLocks(lock, None)
    except BaseException:
        lock.release()
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        lock.release()
        return None
    return DirectoryLocks(lock, fd)
