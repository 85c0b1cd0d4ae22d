"""The orphans a killed beflow left managed, found and put back, and the locks of a managed directory that say
no session is under way there (docs/architecture.md, "The managed file").

:func:`recover_orphans` (``beflow restore``, and quietly every beflow command at start) puts back every file whose
journal entry (:mod:`beflow.mcp.journal`) names a process that is gone: this ``BEFLOW_HOME``'s entries first, then
those of other ``BEFLOW_HOME`` s that a per-user marker names. A new session recovers its own directory's orphan
first, with the locks held (:func:`recover_held`, :func:`recover_foreign`). The journal entry is the note naming a
lock's holder.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from beflow.errors import BeflowError, LockedError
from beflow.mcp import journal
from beflow.paths import ACPXRC, beflow_home
from beflow.system.files import remove
from beflow.system.journal import Damaged, SavedAside
from beflow.system.locks import NotedLock


def _lock(key: str) -> NotedLock[journal.JournalEntry]:
    """The lock of one managed path; the journal entry (written and removed by the session itself, and left
    behind by a killed one) is the note naming its holder."""
    return NotedLock(beflow_home() / "locks" / f"{key}.lock", journal.journal_path(key), journal.JournalEntry)


def recover_foreign(key: str) -> list[journal.Restored]:
    """The orphan of a beflow with another ``BEFLOW_HOME`` on the same directory, found through the per-user
    marker, is restored from that beflow's journal before a new session starts (the directory lock is held)."""
    marker = journal.read_marker(journal.marker_path(key))
    if marker is None:
        remove(journal.marker_path(key))  # a damaged one serves no one (and a missing one leaves nothing to remove)
        return []
    if marker.journal == journal.journal_path(key):
        return []  # ours: recover_held has seen to it
    try:
        entry = journal.read_entry(marker.journal)
    except Damaged as damage:
        return [journal.quarantine(key, damage, marker.journal)]
    if entry is None:
        remove(journal.marker_path(key))
        return []
    if entry.owner_alive():
        raise LockedError(
            f"{entry.target} is managed by a running beflow of another BEFLOW_HOME (pid {entry.pid})",
            fix="Wait for that run to finish (or stop it), then try again.",
        )
    try:
        return [journal.finish(entry, key, marker.journal)]
    except BeflowError as error:
        return [journal.Restored(target=entry.target, action="failed", pid=entry.pid, detail=error.message)]


def recover_held(key: str, *, spare_live: bool) -> list[journal.Restored]:
    """Restore the journal entry of ``key`` (its lock is held); ``spare_live`` leaves a live owner's entry alone."""
    try:
        entry = journal.read_journal(key)
    except Damaged as damage:
        return [journal.quarantine(key, damage)]
    if entry is None or (spare_live and entry.owner_alive()):
        return []
    try:
        result = journal.finish(entry, key)
    except BeflowError as error:
        return [journal.Restored(target=entry.target, action="failed", pid=entry.pid, detail=error.message)]
    # A temporary file of an interrupted atomic write can only be a dead beflow's: the lock is held.
    if entry.target.parent.is_dir():
        for stray in entry.target.parent.glob(f".{ACPXRC}.*.tmp"):
            remove(stray)
    return [result]


def active_entries() -> list[journal.JournalEntry]:
    """Journal entries whose process is still running (files a live beflow manages right now)."""
    return journal.home_journal().live()


def recover_orphans() -> list[journal.Restored]:
    """Restore every file a dead beflow left managed; entries of running processes are left alone.

    This ``BEFLOW_HOME``'s journal first, then the orphans of other ``BEFLOW_HOME`` s that the per-user markers
    name (the same user's files: whichever beflow runs next puts them back). Returns what was done (``failed``
    rows included), in a stable order.
    """
    SavedAside(beflow_home()).prune()
    results: list[journal.Restored] = []
    for path in journal.home_journal().paths():
        key = path.stem
        try:
            entry = journal.read_journal(key)
        except Damaged:
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


def _recover_other_homes() -> list[journal.Restored]:
    results: list[journal.Restored] = []
    registry = journal.registry_dir()
    for path in sorted(registry.glob("*.json")) if registry.is_dir() else []:
        key = path.stem
        marker = journal.read_marker(path)
        if marker is None:
            continue  # a session start in that directory deals with it
        try:
            entry = journal.read_entry(marker.journal)
        except (Damaged, ValueError):  # ValueError: a journal path no file can have (a NUL byte)
            continue  # likewise
        if marker.journal == journal.journal_path(key) or entry is None or entry.owner_alive():
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
        entry = journal.read_journal(key)
    except Damaged:
        entry = None
    if entry is None:
        marker = journal.read_marker(journal.marker_path(key))
        if marker is not None:
            return f"pid {marker.pid}, of another BEFLOW_HOME"
    return f"pid {entry.pid}" if entry is not None else "pid unknown"


class DirectoryLocks:
    """Both locks of a managed directory: beflow's own (in ``BEFLOW_HOME``) and an exclusive ``flock`` on the
    directory itself, which every beflow on the machine sees whatever its ``BEFLOW_HOME``. The OS drops both
    when the holder dies."""

    def __init__(self, lock: NotedLock[journal.JournalEntry], directory_fd: int | None) -> None:
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
