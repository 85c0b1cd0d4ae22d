"""Locks across processes, with a note beside each naming who holds it.

The OS file lock is the truth: the OS drops it when its process dies, so a killed beflow never leaves a stale
lock. The note (JSON, a pydantic model) is what a second comer is told: which run, which process, since when. It is
written once the lock is ours and removed while it still is, so it never names the next holder wrongly. The checkout
lock of ``--attend``, the local tracker's claims and the managed ``.acpxrc.json`` all hold their locks this way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio
from pydantic import BaseModel, ValidationError

from beflow.system import startup
from beflow.system.files import atomic_write, read_regular, remove

if TYPE_CHECKING:
    import filelock
else:
    filelock = startup.module("filelock")  # (it imports asyncio): a probe of a lock that was never taken needs none

M = TypeVar("M", bound=BaseModel)

#: The largest note read: a holder's pid and a few words.
MAX_NOTE = 1 << 20


class NotedLock(Generic[M]):
    """The lock at ``lock_path`` and the holder's note at ``note_path``."""

    def __init__(self, lock_path: Path, note_path: Path, model: type[M]) -> None:
        self.lock_path = lock_path
        self.note_path = note_path
        self.model = model
        self._lock: filelock.BaseFileLock | None = None
        self._wrote_note = False

    def _file_lock(self) -> filelock.BaseFileLock:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        return filelock.FileLock(str(self.lock_path), thread_local=False)

    def _held(self, lock: filelock.BaseFileLock, note: M | None) -> None:
        """The lock is ours: leave the note (``None``: the caller keeps its own record there)."""
        if note is not None:
            try:
                atomic_write(self.note_path, note.model_dump_json(indent=2) + "\n")
            except BaseException:
                lock.release()
                raise
        self._lock, self._wrote_note = lock, note is not None

    def acquire(self, note: M | None, *, timeout: float = 0) -> bool:
        """Take the lock within ``timeout`` seconds (blocking) and leave ``note``; False when another holds it."""
        lock = self._file_lock()
        try:
            lock.acquire(timeout=timeout)
        except filelock.Timeout:
            return False
        self._held(lock, note)
        return True

    def release(self) -> None:
        """Give the lock up: the note goes first, while the lock is still ours. Releasing twice is harmless."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        if self._wrote_note:
            remove(self.note_path)
        lock.release()

    def note(self) -> M | None:
        """The holder's note; ``None`` when there is none or it does not read (being written, or damaged)."""
        try:
            return self.model.model_validate_json(read_regular(self.note_path, limit=MAX_NOTE))
        except (OSError, ValueError, ValidationError):
            return None

    def held_elsewhere(self) -> bool:
        """Whether another process (or another lock in this one) holds it now, probed by taking it for an instant."""
        if not self.lock_path.exists():
            return False
        probe = filelock.FileLock(str(self.lock_path), thread_local=False)
        try:
            probe.acquire(timeout=0)
        except filelock.Timeout:
            return True
        probe.release()
        return False


T = TypeVar("T")


async def waiting_for(
    attempt: Callable[[], T | None], *, timeout: float, poll: float = 0.1, on_wait: Callable[[], None] | None = None
) -> T | None:
    """What ``attempt`` returns once it returns something (a lock taken), trying every ``poll`` seconds for up to
    ``timeout`` seconds; None when it never did. It sleeps between tries, so other runs and signal handling go on
    while it waits, and a cancellation ends the wait at once; ``on_wait`` is called once, when the first try fails.

    (filelock's own async lock polls the same way, but it takes one lock, where a managed directory needs two
    taken together, and its release is a coroutine, where restores release in synchronous cleanups.)"""
    deadline = anyio.current_time() + timeout
    while (taken := attempt()) is None:
        if anyio.current_time() >= deadline:
            return None
        if on_wait is not None:
            on_wait()
            on_wait = None
        await anyio.sleep(poll)
    return taken
