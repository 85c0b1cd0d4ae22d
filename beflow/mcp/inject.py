"""The managed ``.acpxrc.json``: written around an agent session, put back exactly as it was afterwards.

acpx reads ``<cwd>/.acpxrc.json`` (plain JSON) and forwards its ``mcpServers`` to the agent's ``session/new``; it has
no other per-directory way in. :func:`managed_acpxrc` wraps a whole agent session:

1. it takes a lock for the target directory (``$BEFLOW_HOME/locks/``, so nothing extra appears in the user's
   directory); a second manager for the same path waits, then refuses with :class:`~beflow.errors.LockedError`;
2. it journals the prior state (existed or not, exact bytes, mode, or the symlink it was) to
   ``$BEFLOW_HOME/journal/``, fsynced, before touching anything;
3. it writes ``.acpxrc.json`` atomically, mode 0600 (env and headers may hold secrets): ``mcpServers`` is the
   translated list and every other key of a prior file that parsed as a JSON object is kept; a prior that did
   not parse gives a fresh file;
4. in a ``finally`` (success, error, timeout, cancellation, Ctrl-C, SIGTERM) it restores: a file that did not
   exist is removed; one that did gets its exact prior bytes and mode back. If someone changed the file during
   the session, that version is first saved under ``$BEFLOW_HOME/saved/`` (for :data:`SAVED_DAYS` days: it may
   hold the injected secrets). Then the journal entry goes.

The restore is synchronous on purpose: there is no ``await`` in it for a cancellation to interrupt. When beflow
is killed outright (SIGKILL, power loss), the journal survives and :func:`recover_orphans` (``beflow restore``,
and quietly every beflow command at start) puts the file back once its process is gone.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import json
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from beflow import identity
from beflow.errors import BeflowError, LockedError, NotFoundError
from beflow.files import atomic_write, fsync_dir, remove
from beflow.locks import NotedLock
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

    def prior_bytes(self) -> bytes | None:
        return None if self.prior is None else base64.b64decode(self.prior)


class Restored(BaseModel):
    """What restoring one managed file did."""

    target: Path
    #: ``restored``: the prior bytes (or symlink) are back; ``removed``: beflow had created the file;
    #: ``gone``: the directory no longer exists (a removed worktree); ``failed``: see ``detail``.
    action: Literal["restored", "removed", "gone", "failed"]
    pid: int | None = None
    #: Where the version someone else wrote during the run was saved before the prior came back.
    saved: Path | None = None
    detail: str | None = None

    def describe(self) -> str:
        owner = f" (left by beflow pid {self.pid})" if self.pid else ""
        if self.action == "restored":
            text = f"restored {self.target} to its content before the run{owner}"
        elif self.action == "removed":
            text = f"removed {self.target}, which beflow had created for a run{owner}"
        elif self.action == "gone":
            text = f"{self.target}: its directory no longer exists, nothing to restore{owner}"
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
    if stat.S_ISLNK(info.st_mode):
        try:
            content = target.read_bytes()
        except OSError:
            content = None  # a dangling link: acpx sees no file
        return _Prior(existed=True, symlink=os.readlink(target), content=content)
    if not stat.S_ISREG(info.st_mode):
        raise BeflowError(
            f"{target} is not a regular file; beflow will not replace it",
            fix="Move it away (acpx expects a JSON file there), or turn MCP injection off (mcp.enabled).",
        )
    try:
        data = target.read_bytes()
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
    """What is at ``target`` now (read through a symlink), ``None`` when nothing is."""
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(21, "is now a directory", str(target))
    try:
        return target.read_bytes()
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


def _finish(entry: JournalEntry, key: str) -> Restored:
    """Restore, then drop the journal entry; on failure the entry stays for ``beflow restore``."""
    try:
        result = _restore(entry, key)
    except OSError as exc:
        raise BeflowError(
            f"could not restore {entry.target}: {exc.strerror or exc}",
            fix="Fix the cause, then run `beflow restore`: the prior content stays in beflow's journal until then.",
        ) from exc
    remove(_journal_path(key))
    return result


def _read_journal(key: str) -> JournalEntry | None:
    try:
        return JournalEntry.model_validate_json(_journal_path(key).read_bytes())
    except FileNotFoundError:
        return None


def _recover_held(key: str, *, spare_live: bool) -> list[Restored]:
    """Restore the journal entry of ``key`` (its lock is held); ``spare_live`` leaves a live owner's entry alone."""
    try:
        entry = _read_journal(key)
    except (OSError, ValueError, ValidationError) as exc:
        return [Restored(target=_journal_path(key), action="failed", detail=f"unreadable journal entry: {exc}")]
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
            entry = JournalEntry.model_validate_json(path.read_bytes())
        except (OSError, ValueError, ValidationError):
            continue
        if _owner_alive(entry):
            entries.append(entry)
    return entries


def recover_orphans() -> list[Restored]:
    """Restore every file a dead beflow left managed; entries of running processes are left alone.

    Returns what was done (``failed`` rows included), in a stable order.
    """
    prune_saved()
    directory = journal_dir()
    if not directory.is_dir():
        return []
    results: list[Restored] = []
    for path in sorted(directory.glob("*.json")):
        key = path.stem
        lock = _lock(key)
        if not lock.acquire(None):
            continue  # a live manager holds it
        try:
            results.extend(_recover_held(key, spare_live=True))
        finally:
            lock.release()
    return results


# --- the manager ----------------------------------------------------------------------------------------------


async def _acquire(
    target: Path, key: str, on_wait: Callable[[str], None] | None, timeout: float, poll: float
) -> NotedLock[JournalEntry]:
    """The lock for ``target``, waiting (without holding up the event loop) while another run has it."""
    lock = _lock(key)

    def holder() -> str:
        entry = lock.note()
        return f"pid {entry.pid}" if entry is not None else "pid unknown"

    def waiting() -> None:
        if on_wait is not None:
            on_wait(f"waiting up to {timeout:g} s for another beflow run ({holder()}) to finish with {target}")

    if not await lock.acquire_waiting(None, timeout=timeout, poll=poll, on_wait=waiting):
        raise LockedError(
            f"{target} is managed by another beflow run ({holder()}); gave up after {timeout:g} s",
            fix="Wait for that run to finish (or stop it), then try again.",
        )
    return lock


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
        recovered = _recover_held(key, spare_live=False)
        failed = [r for r in recovered if r.action == "failed"]
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
