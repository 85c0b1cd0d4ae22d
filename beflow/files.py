"""The one place that writes files beflow manages: atomically, durably, with an explicit mode.

A reader never sees a half-written file: data goes to a temporary file in the same directory, is fsynced, then
renamed over the target, and the directory entry is fsynced too.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

    M = TypeVar("M", bound=BaseModel)


class NotRegularError(OSError):
    """The path is a FIFO, a socket, a device or a directory: beflow never opens one for its content."""

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(f"{path} is {describe_kind(mode)}, not a regular file")
        self.path = path
        self.kind = describe_kind(mode)


class FileTooLarge(OSError):
    """The file is larger than the caller is willing to read."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(f"{path} is larger than {limit} bytes")
        self.path = path
        self.limit = limit


def describe_kind(mode: int) -> str:
    """``a FIFO``, ``a directory``, ... for the file type bits of ``mode``."""
    kinds = {
        stat.S_IFIFO: "a FIFO",
        stat.S_IFSOCK: "a socket",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
        stat.S_IFDIR: "a directory",
        stat.S_IFLNK: "a symlink",
        stat.S_IFREG: "a regular file",
    }
    return kinds.get(stat.S_IFMT(mode), "not a regular file")


def read_regular(path: Path, *, limit: int | None = None, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file at ``path``, never blocking on what is not one.

    The file is opened without blocking (a FIFO would wait for a writer forever) and checked on the open
    descriptor, so a swap between a check and the open cannot fool it. Raises :class:`NotRegularError` for
    anything else (through a symlink too), :class:`FileTooLarge` beyond ``limit`` bytes, ``FileNotFoundError``.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and exc.errno == 40:  # ELOOP: the path is a symlink
            raise NotRegularError(path, stat.S_IFLNK) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularError(path, info.st_mode)
        if limit is not None and info.st_size > limit:
            raise FileTooLarge(path, limit)
        chunks = []
        total = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if limit is not None and total > limit:  # it grew while being read
                raise FileTooLarge(path, limit)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_note(path: Path, model: type[M], *, limit: int) -> M | None:
    """The small JSON note at ``path`` (a marker, a journal of beflow's own) as ``model``; ``None`` when there is
    none or it cannot be used (not a regular file, over ``limit`` bytes, unreadable, not valid): whoever reads a
    note treats a damaged one as absent."""
    try:
        return model.model_validate_json(read_regular(path, limit=limit))
    # NotRegularError and FileTooLarge are OSErrors; pydantic's ValidationError is a ValueError.
    except (OSError, ValueError):
        return None


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) so that readers see the old or the new bytes.

    ``durable=False`` skips the fsyncs, for caches and progress notes that nothing recovers from: after a crash
    such a file holds the old bytes, the new ones, or (rarely) nothing, never a mix."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def remove(path: Path, *, durable: bool = True) -> None:
    """Remove ``path`` durably (``durable=False``: without the fsync); a missing file is fine."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        if durable:
            fsync_dir(path.parent)
