"""The managed ``.acpxrc.json``: written around an agent session, put back exactly as it was afterwards.

acpx reads ``<cwd>/.acpxrc.json`` (plain JSON) and forwards its ``mcpServers`` to the agent's ``session/new``; it has
no other per-directory way in. :func:`managed_acpxrc` wraps a whole agent session:

1. it takes a lock for the target directory (``$BEFLOW_HOME/locks/``, so nothing extra appears in the user's
   directory) and an ``flock`` on the directory itself, which holds across ``BEFLOW_HOME`` s; a second manager
   for the same path waits, then refuses with :class:`~beflow.errors.LockedError`;
2. it journals the prior state (existed or not, exact bytes, mode, or the symlink it was) to
   ``$BEFLOW_HOME/journal/``, fsynced, before touching anything, and notes in a per-user marker
   (``$XDG_STATE_HOME/beflow/managed/``) which journal that is, so a beflow of another ``BEFLOW_HOME`` restores
   a crashed run's file from it instead of taking the injected file for the user's own;
3. it writes ``.acpxrc.json`` atomically, mode 0600 (env and headers may hold secrets): ``mcpServers`` is the
   translated list and every other key of a prior file that parsed as a JSON object is kept; a prior that did
   not parse gives a fresh file;
4. in a ``finally`` (success, error, timeout, cancellation, Ctrl-C, SIGTERM) it restores: a file that did not
   exist is removed; one that did gets its exact prior bytes and mode back. If someone changed the file during
   the session, that version is first saved under ``$BEFLOW_HOME/saved/`` (for :data:`SAVED_DAYS` days: it may
   hold the injected secrets). Then the journal entry goes.

The restore is synchronous on purpose: there is no ``await`` in it for a cancellation to interrupt. When beflow
is killed outright (SIGKILL, power loss), the journal survives and :func:`recover_orphans` (``beflow restore``,
and quietly every beflow command at start) puts the file back once its process is gone. Nothing at the target
is ever opened without knowing it is a regular file (a FIFO would block for ever); a damaged journal entry is
moved to ``journal/damaged/`` and reported by what it was for, never by its content.
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
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from beflow import identity
from beflow.errors import BeflowError, LockedError, NotFoundError
from beflow.files import FileTooLarge, NotRegularError, atomic_write, fsync_dir, read_regular, remove
from beflow.locks import NotedLock, waiting_for
from beflow.mcp.acp import AcpServer, server_names, wire
from beflow.paths import ACPXRC, beflow_home, path_key

#: Seconds a second run waits for the first to finish with the same ``.acpxrc.json`` before refusing.
DEFAULT_LOCK_TIMEOUT = 30.0


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
        return text


class Injection(BaseModel):
    """The handle of one managed session; ``restored`` is filled in when the session ends."""

    target: Path
    #: Names of the injected servers (for run records: never values).
    names: list[str]
    existed: bool
    #: False when a prior file existed but was not a JSON object: the session got a fresh file.
    prior_parsed: bool
    #: Keys of the prior file kept beside ``mcpServers``.
    kept_keys: list[str]
    #: Names in the prior file's own ``mcpServers``, which the injected list replaces during the session.
    replaced: list[str]
    #: Orphans of a killed beflow for the same path, restored before this session started.
    recovered: list[Restored]
    restored: Restored | None = None
    #: The bytes beflow wrote (they hold secret values): what must never reach a commit. Never serialized.
    written: bytes = Field(default=b"", exclude=True, repr=False)

    @property
    def saved(self) -> Path | None:
        """Where a version changed by someone else during the session was saved, once it has ended."""
        return self.restored.saved if self.restored else None


# --- where the state lives ------------------------------------------------------------------------------------


def _key(directory: Path) -> str:
    # Keyed by the directory, not the file: the file may be a symlink, and resolving it would give a different
    # key while beflow's regular file stands in for it. The prefix keeps these apart from other per-path locks.
    return f"acpxrc-{path_key(directory)}"


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


#: A journal entry is a small JSON file (the prior .acpxrc.json, base64); anything bigger is damage.
MAX_JOURNAL_ENTRY = 16 << 20

#: Days a version saved aside is kept: it may hold the injected secrets (it was written while they were in place).
SAVED_DAYS = 7


def prune_saved(now: float | None = None) -> list[Path]:
    """Delete what :func:`_save_aside` saved more than :data:`SAVED_DAYS` days ago; the paths deleted."""
    cutoff = (time.time() if now is None else now) - SAVED_DAYS * 86400
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(saved_dir()):
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and info.st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


# --- process identity -----------------------------------------------------------------------------------------


def _owner_alive(entry: JournalEntry) -> bool:
    """Is the process that wrote ``entry`` still running (the same process, not a reuse of its pid)?"""
    return identity.is_running(entry.pid, entry.pid_start)


# --- reading the prior and composing the managed file --------------------------------------------------------


class _Prior(BaseModel):
    existed: bool
    mode: int | None = None
    symlink: str | None = None
    data: bytes | None = None  # the exact bytes of a regular file
    content: bytes | None = None  # what acpx would read (through a symlink too)


def _read_prior(target: Path) -> _Prior:
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return _Prior(existed=False)
    refusal = "Move it away (acpx expects a JSON file there), or turn MCP injection off (mcp.enabled)."
    if stat.S_ISLNK(info.st_mode):
        try:
            content = read_regular(target)
        except NotRegularError as exc:
            raise BeflowError(f"{target} is a symlink to {exc.kind}; beflow will not replace it", fix=refusal) from None
        except OSError:
            content = None  # a dangling link: acpx sees no file
        return _Prior(existed=True, symlink=os.readlink(target), content=content)
    if not stat.S_ISREG(info.st_mode):
        raise BeflowError(f"{target} is not a regular file; beflow will not replace it", fix=refusal)
    try:
        data = read_regular(target, follow_symlinks=False)
    except NotRegularError:
        raise BeflowError(f"{target} is not a regular file; beflow will not replace it", fix=refusal) from None
    except OSError as exc:
        raise BeflowError(
            f"{target}: cannot read it ({exc.strerror}), so it could not be put back; nothing was changed",
            fix="Make it readable, or move it away, or turn MCP injection off (mcp.enabled).",
        ) from None
    return _Prior(existed=True, mode=stat.S_IMODE(info.st_mode), data=data, content=data)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # JavaScript's JSON.parse (acpx) rejects NaN and Infinity


def parse_prior(content: bytes | None) -> dict[str, Any] | None:
    """The prior file as acpx's ``JSON.parse`` would take it, when it is a JSON object; otherwise ``None``."""
    if content is None:
        return None
    try:
        value = json.loads(content.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def compose(content: bytes | None, servers: Sequence[AcpServer]) -> tuple[bytes, dict[str, Any] | None]:
    """The managed file's bytes: the prior object (when it parsed) with ``mcpServers`` set, and that prior."""
    prior = parse_prior(content)
    document = dict(prior) if prior is not None else {}
    document["mcpServers"] = wire(servers)  # replaced in place when present: other keys keep their order
    try:
        return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), prior
    except UnicodeEncodeError:  # a lone surrogate escaped in the prior: keep it escaped
        return (json.dumps(document, indent=2) + "\n").encode("utf-8"), prior


# --- restore --------------------------------------------------------------------------------------------------


def _current(target: Path) -> bytes | None:
    """What is at ``target`` now (read through a symlink), ``None`` when nothing is.

    Whatever is not a regular file (a FIFO, a socket, a device, a directory, a link to one) raises
    :class:`NotRegularError` without being opened for reading: a FIFO would block beflow for ever.
    """
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return None
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        raise NotRegularError(target, info.st_mode)
    try:
        return read_regular(target, follow_symlinks=stat.S_ISLNK(info.st_mode))
    except FileNotFoundError:  # a dangling symlink
        return None


def _save_aside(data: bytes, key: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = saved_dir() / f"{key}-{stamp}-{os.getpid()}{ACPXRC}"
    atomic_write(path, data, mode=0o600)
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
    saved = None
    if current is not None and hashlib.sha256(current).hexdigest() != entry.written_sha256 and current != prior:
        saved = _save_aside(current, key)
    if not entry.existed:
        remove(target)
        return Restored(target=target, action="removed", pid=entry.pid, saved=saved)
    if entry.symlink is not None:
        _put_symlink(target, entry.symlink)
    else:
        assert prior is not None and entry.mode is not None
        atomic_write(target, prior, mode=entry.mode)
    return Restored(target=target, action="restored", pid=entry.pid, saved=saved)


def _finish(entry: JournalEntry, key: str, journal: Path | None = None) -> Restored:
    """Restore, then drop the journal entry; on failure the entry stays for ``beflow restore``."""
    journal = journal or _journal_path(key)
    try:
        result = _restore(entry, key)
    except NotRegularError as exc:
        raise BeflowError(
            f"could not restore {entry.target}: it is now {exc.kind}, which beflow leaves as it is",
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
    with contextlib.suppress(OSError, ValueError, ValidationError, NotRegularError, FileTooLarge):
        marker = _Marker.model_validate_json(read_regular(_marker_path(key), limit=1 << 16))
        if marker.journal == journal:
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
        current = _current(target)
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


def _recover_foreign(key: str) -> list[Restored]:
    """The orphan of a beflow with another ``BEFLOW_HOME`` on the same directory, found through the per-user
    marker, is restored from that beflow's journal before a new session starts (the directory lock is held)."""
    try:
        marker = _Marker.model_validate_json(read_regular(_marker_path(key), limit=1 << 16))
    except FileNotFoundError:
        return []
    except (OSError, ValueError, ValidationError, NotRegularError, FileTooLarge):
        remove(_marker_path(key))
        return []
    if marker.journal == _journal_path(key):
        return []  # ours: _recover_held has seen to it
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
        return [_finish(entry, key, marker.journal)]
    except BeflowError as error:
        return [Restored(target=entry.target, action="failed", pid=entry.pid, detail=error.message)]


def _recover_held(key: str, *, spare_live: bool) -> list[Restored]:
    """Restore the journal entry of ``key`` (its lock is held); ``spare_live`` leaves a live owner's entry alone."""
    try:
        entry = _read_journal(key)
    except _Damaged as damage:
        return [_quarantine(key, damage)]
    if entry is None or (spare_live and _owner_alive(entry)):
        return []
    try:
        result = _finish(entry, key)
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
        held = _try_lock(key, entry.target.parent if entry is not None else path.parent)
        if held is None:
            continue  # a live manager holds it
        try:
            results.extend(_recover_held(key, spare_live=True))
        finally:
            held.release()
    results.extend(_recover_other_homes())
    return results


def _recover_other_homes() -> list[Restored]:
    results: list[Restored] = []
    registry = _registry_dir()
    for path in sorted(registry.glob("*.json")) if registry.is_dir() else []:
        key = path.stem
        try:
            marker = _Marker.model_validate_json(read_regular(path, limit=1 << 16))
            entry = _read_entry(marker.journal)
        except (OSError, ValueError, ValidationError, NotRegularError, FileTooLarge, _Damaged):
            continue  # a session start in that directory deals with it
        if marker.journal == _journal_path(key) or entry is None or _owner_alive(entry):
            continue
        held = _try_lock(key, entry.target.parent)
        if held is None:
            continue
        try:
            results.extend(_recover_foreign(key))
        except LockedError:
            pass
        finally:
            held.release()
    return results


# --- the manager ----------------------------------------------------------------------------------------------


def _holder(key: str) -> str:
    try:
        entry = _read_journal(key)
    except _Damaged:
        entry = None
    if entry is None:
        with contextlib.suppress(OSError, ValueError, ValidationError, NotRegularError, FileTooLarge):
            marker = _Marker.model_validate_json(read_regular(_marker_path(key), limit=1 << 16))
            return f"pid {marker.pid}, of another BEFLOW_HOME"
    return f"pid {entry.pid}" if entry is not None else "pid unknown"


class _DirectoryLocks:
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


def _try_lock(key: str, directory: Path) -> _DirectoryLocks | None:
    """Both locks at once, or neither (None when another beflow holds one)."""
    lock = _lock(key)
    if not lock.acquire(None):
        return None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        # Gone (nothing there to manage), or not readable by us: beflow's own lock is all there is.
        return _DirectoryLocks(lock, None)
    except BaseException:
        lock.release()
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        lock.release()
        return None
    return _DirectoryLocks(lock, fd)


async def _acquire(
    target: Path, key: str, on_wait: Callable[[str], None] | None, timeout: float, poll: float
) -> _DirectoryLocks:
    """The locks for ``target``, waiting for another beflow run to finish with it."""

    def waiting() -> None:
        if on_wait is not None:
            on_wait(f"waiting up to {timeout:g} s for another beflow run ({_holder(key)}) to finish with {target}")

    held = await waiting_for(lambda: _try_lock(key, target.parent), timeout=timeout, poll=poll, on_wait=waiting)
    if held is None:
        raise LockedError(
            f"{target} is managed by another beflow run ({_holder(key)}); gave up after {timeout:g} s",
            fix="Wait for that run to finish (or stop it), then try again.",
        )
    return held


def _begin(target: Path, key: str, servers: Sequence[AcpServer]) -> tuple[JournalEntry, Injection]:
    """Journal the prior state, then write the managed file."""
    prior = _read_prior(target)
    data, parsed = compose(prior.content, servers)
    entry = JournalEntry(
        target=target,
        pid=os.getpid(),
        pid_start=identity.start_time(os.getpid()),
        existed=prior.existed,
        mode=prior.mode,
        symlink=prior.symlink,
        prior=None if prior.data is None else base64.b64encode(prior.data).decode("ascii"),
        written_sha256=hashlib.sha256(data).hexdigest(),
        created=dt.datetime.now(dt.UTC),
    )
    # Journal first (it may hold secrets of the prior file: 0600), so a crash from here on can be undone.
    atomic_write(_journal_path(key), entry.model_dump_json(indent=2), mode=0o600)
    # Then the per-user marker, for a beflow of another BEFLOW_HOME: without it, after a crash of this one, it would
    # take the injected file for the user's own. Best effort: the journal alone still serves this BEFLOW_HOME.
    with contextlib.suppress(OSError):
        marker = _Marker(journal=_journal_path(key), pid=entry.pid)
        atomic_write(_marker_path(key), marker.model_dump_json(), mode=0o600)
    try:
        atomic_write(target, data, mode=0o600)
    except BaseException:
        _finish(entry, key)
        raise
    previous = parsed.get("mcpServers") if parsed is not None else None
    handle = Injection(
        target=target,
        names=server_names(servers),
        existed=prior.existed,
        prior_parsed=prior.content is None or parsed is not None,
        kept_keys=[k for k in (parsed or {}) if k != "mcpServers"],
        replaced=[str(s["name"]) for s in previous if isinstance(s, dict) and "name" in s]
        if isinstance(previous, list)
        else [],
        recovered=[],
        written=data,
    )
    return entry, handle


@asynccontextmanager
async def managed_acpxrc(
    cwd: Path,
    servers: Sequence[AcpServer] | None,
    *,
    on_wait: Callable[[str], None] | None = None,
    on_saved: Callable[[Path], None] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    poll_interval: float = 0.1,
) -> AsyncIterator[Injection | None]:
    """Inject ``servers`` (the translated list) into ``<cwd>/.acpxrc.json`` for the body; restore it after.

    Yields ``None`` and touches nothing (no lock, no journal) when ``servers`` is empty or ``None``. ``on_wait``
    is called once with a message when another run holds the path; after ``lock_timeout`` seconds
    :class:`LockedError` names the path and the holder's pid. ``on_saved`` gets the path of a version someone
    else wrote during the session, saved aside before the prior came back (also on ``handle.saved``).
    """
    if not servers:
        yield None
        return
    directory = Path(cwd).resolve()
    if not directory.is_dir():
        raise NotFoundError(f"{directory}: no such directory to inject MCP servers into")
    target = directory / ACPXRC
    key = _key(directory)
    lock = await _acquire(target, key, on_wait, lock_timeout, poll_interval)
    try:
        # Holding the lock proves no other manager is active here: a journal entry left for this path is an
        # orphan (even of a still-running process whose restore failed) and must be undone before a new one.
        recovered = _recover_held(key, spare_live=False) + _recover_foreign(key)
        # A file that is still an earlier run's injection, its prior lost, must not be taken for the prior.
        failed = [r for r in recovered if r.action == "failed" or r.unresolved]
        if failed:
            raise BeflowError(
                f"{target}: an earlier run's state could not be restored: {failed[0].detail}",
                fix="Fix the cause and run `beflow restore`, then try again.",
            )
        entry, handle = _begin(target, key, servers)
        handle.recovered = recovered
        try:
            yield handle
        finally:
            # The session's own restore: there is no "left by" owner to name, as there is for an orphan.
            handle.restored = _finish(entry, key).model_copy(update={"pid": None})
            if handle.restored.saved is not None and on_saved is not None:
                on_saved(handle.restored.saved)
    finally:
        lock.release()
