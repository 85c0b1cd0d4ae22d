"""The one place that opens files beflow reads or writes: atomically, durably, with an explicit mode, and never
through what an agent could have put in the way.

A reader never sees a half-written file: data goes to a temporary file in the same directory, is fsynced, then
renamed over the target, and the directory entry is fsynced too.

A file an agent could have created or replaced (a run's record, a worktree's files, the managed ``.acpxrc.json``)
is opened ``below`` a trusted directory: one beflow resolved before any agent ran (the project directory, a
worktree it made, ``$BEFLOW_HOME``). Every directory under it is opened with ``O_NOFOLLOW`` from the one before
(``openat``), the file itself with ``O_NOFOLLOW | O_NONBLOCK``, and the open descriptor must be a regular file:
a symlink anywhere below the trusted directory, a FIFO or a device is refused (:class:`NotRegularError`), never
followed or waited on, and what is read is capped (:class:`FileTooLarge`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

    M = TypeVar("M", bound=BaseModel)

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: A directory on the way below a trusted one: never a symlink.
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
#: The file itself: never a symlink, never waited on (a FIFO), never a controlling terminal.
_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC


class NotRegularError(OSError):
    """The path is a FIFO, a socket, a device, a directory or a symlink beflow will not follow: it never opens one
    for its content. ``expected`` is what beflow needed there (a directory on the way to a file, or the file);
    ``kind`` says what was found, when its mode does not (a hard link)."""

    def __init__(self, path: Path, mode: int, *, expected: str = "a regular file", kind: str | None = None) -> None:
        self.kind = kind or describe_kind(mode)
        super().__init__(f"{path} is {self.kind}, not {expected}")
        self.path = path


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


# --- below a trusted directory --------------------------------------------------------------------------------


class Opened(NamedTuple):
    """A directory open at ``fd``, reached safely at ``path`` (:func:`open_directory`): what is below it can be
    opened from it as from a trusted directory, without walking to it again (``below=`` everywhere here)."""

    path: Path
    fd: int


def _parts(path: Path, below: Path) -> list[str]:
    """The names from ``below`` down to ``path``; a path outside ``below`` (or through ``..``) is a bug. (On
    strings: a listing of thousands of records opens each one this way.)"""
    inside, top = str(path), str(below).rstrip(os.sep) + os.sep
    parts = inside[len(top) :].split(os.sep) if inside.startswith(top) else []
    if not parts or "" in parts or ".." in parts or "." in parts:
        raise ValueError(f"{path} is not a path below {below}")
    return parts


def _kind_at(directory: int, name: str) -> int:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
    except OSError:
        return 0


@contextlib.contextmanager
def _directory(path: Path, below: Path | Opened | None, *, make: bool) -> Iterator[int]:
    """An open descriptor of the directory ``path``: with ``below``, reached from it one name at a time, none of
    them a symlink (``make``: missing ones are made); without, ``path`` itself (``make``: with its parents)."""
    if below is None:
        if make:
            path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    else:
        if isinstance(below, Opened):
            fd = os.dup(below.fd)
            below = below.path
        else:
            if make:
                below.mkdir(parents=True, exist_ok=True)
            fd = os.open(below, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)  # trusted: reached as it was resolved
        try:
            names = [] if str(path) == str(below) else _parts(path, below)
            for depth, name in enumerate(names):
                try:
                    inner = os.open(name, _DIRECTORY, dir_fd=fd)
                except FileNotFoundError:
                    if not make:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                    inner = _open_directory_at(fd, name, below.joinpath(*names[: depth + 1]))
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    walked = below.joinpath(*names[: depth + 1])
                    raise NotRegularError(walked, _kind_at(fd, name), expected="a directory") from None
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
    try:
        yield fd
    finally:
        os.close(fd)


def _open_directory_at(fd: int, name: str, walked: Path) -> int:
    try:
        return os.open(name, _DIRECTORY, dir_fd=fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise NotRegularError(walked, _kind_at(fd, name), expected="a directory") from None


def _open_in(directory: int, name: str, path: Path, flags: int, mode: int) -> int:
    """``name`` in ``directory``, opened with ``flags``: a regular file or :class:`NotRegularError`. What is there
    and is not a regular file is refused without being opened (opening a device can do something)."""
    found = _kind_at(directory, name)
    if found and not stat.S_ISREG(found):
        raise NotRegularError(path, found)
    try:
        fd = os.open(name, flags | _FILE, mode, dir_fd=directory)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink put there since
            raise NotRegularError(path, stat.S_IFLNK) from None
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads, opened for writing
            raise NotRegularError(path, stat.S_IFIFO) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularError(path, info.st_mode)
        if info.st_nlink != 1:  # a hard link to a file of the user's (~/.bashrc) is that file under another name
            kind = f"a file with {info.st_nlink} names (a hard link)"
            raise NotRegularError(path, info.st_mode, expected="a file of its own", kind=kind)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(
    path: Path, *, below: Path | Opened | None, write: bool = False, mode: int = 0o644, follow_symlinks: bool = True
) -> int:
    """A descriptor of the regular file at ``path``, never blocking, for reading, or (``write``) for appending,
    created with ``mode`` (and its missing directories) when it is not there. With ``below``, it is opened from that
    trusted directory without following any symlink on the way or at the end; without, ``path`` is opened as it
    is (``follow_symlinks=False``: but for a symlink at ``path`` itself). Raises :class:`NotRegularError` for a
    symlink not followed, a FIFO, a device or a directory, ``FileNotFoundError`` when a reader finds nothing."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT if write else os.O_RDONLY
    if below is not None:
        with _directory(path.parent, below, make=write) as directory:
            return _open_in(directory, path.name, path, flags, mode)
    flags |= os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if not follow_symlinks and exc.errno == errno.ELOOP:  # the path is a symlink
            raise NotRegularError(path, stat.S_IFLNK) from None
        if exc.errno == errno.ENXIO:
            raise NotRegularError(path, stat.S_IFIFO) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularError(path, info.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_append(path: Path, *, below: Path | Opened, mode: int = 0o644) -> BinaryIO:
    """``path`` opened for appending as :func:`open_regular` opens it (a log beflow writes as it goes)."""
    return os.fdopen(open_regular(path, below=below, write=True, mode=mode), "ab")


def append(path: Path, data: bytes, *, below: Path | Opened, mode: int = 0o644) -> None:
    """Append ``data`` to ``path`` in one ``O_APPEND`` write (concurrent writers never tear a line), opened as
    :func:`open_regular` opens it."""
    fd = open_regular(path, below=below, write=True, mode=mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def make_directory(path: Path, *, below: Path | Opened, exist_ok: bool = True) -> None:
    """Make the directory ``path`` (and the missing ones above it) below ``below``, through no symlink."""
    with _directory(path.parent, below, make=True) as directory:
        try:
            os.mkdir(path.name, dir_fd=directory)
        except FileExistsError:
            if not exist_ok:
                raise
            os.close(_open_directory_at(directory, path.name, path))


@contextlib.contextmanager
def open_directory(path: Path, *, below: Path | Opened) -> Iterator[Opened]:
    """The directory ``path``, reached from ``below`` through no symlink and kept open (for ``os.scandir``, calls
    with ``dir_fd``, and as ``below`` of many files under it); ``FileNotFoundError`` when it is not there."""
    with _directory(path, below, make=False) as directory:
        yield Opened(path, directory)


def list_directory(path: Path, *, below: Path | Opened) -> list[str]:
    """The names in the directory ``path`` below ``below``, reached through no symlink; [] when it is not there."""
    try:
        with _directory(path, below, make=False) as directory:
            return os.listdir(directory)
    except FileNotFoundError:
        return []


def read_capped(fd: int, path: Path, limit: int | None) -> bytes:
    """What is left to read of ``fd`` (a regular file), at most ``limit`` bytes: :class:`FileTooLarge` beyond, a
    file that grows while it is read included."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, 1 << 20 if limit is None else min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if limit is not None and total > limit:
            raise FileTooLarge(path, limit)
        chunks.append(chunk)


def read_tail(path: Path, *, below: Path | Opened, limit: int) -> tuple[bytes, bool]:
    """The last ``limit`` bytes of the regular file at ``path`` (opened as :func:`open_regular` opens it), and
    whether there was more before them. A file that grows meanwhile is read up to the size it had."""
    fd = open_regular(path, below=below)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        chunks: list[bytes] = []
        left = size - start
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), start > 0
    finally:
        os.close(fd)


def read_regular(
    path: Path, *, limit: int | None = None, follow_symlinks: bool = True, below: Path | Opened | None = None
) -> bytes:
    """The bytes of the regular file at ``path``, never blocking on what is not one.

    The file is opened without blocking (a FIFO would wait for a writer forever) and checked on the open
    descriptor, so a swap between a check and the open cannot fool it. With ``below``, nothing below that trusted
    directory is followed (:func:`open_regular`); otherwise ``follow_symlinks=False`` refuses a symlink at the path
    itself. Raises :class:`NotRegularError` for anything else (through a symlink too), :class:`FileTooLarge`
    beyond ``limit`` bytes, ``FileNotFoundError``.
    """
    fd = open_regular(path, below=below, follow_symlinks=follow_symlinks)
    try:
        info = os.fstat(fd)
        if limit is not None and info.st_size > limit:
            raise FileTooLarge(path, limit)
        return read_capped(fd, path, limit)
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


def atomic_write(
    path: Path, data: bytes | str, *, mode: int = 0o644, durable: bool = True, below: Path | Opened | None = None
) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) so that readers see the old or the new bytes.

    ``durable=False`` skips the fsyncs, for caches and progress notes that nothing recovers from: after a crash
    such a file holds the old bytes, the new ones, or (rarely) nothing, never a mix. With ``below``, the directory
    is reached from that trusted one through no symlink (:func:`open_regular`); the rename replaces whatever is at
    ``path`` (a symlink too), never writing through it."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with _directory(path.parent, below, make=True) as directory:
        temporary, fd = _temporary(directory, path.name)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fchmod(handle.fileno(), mode)
                if durable:
                    os.fsync(handle.fileno())
            os.replace(temporary, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=directory)
            raise
        if durable:
            os.fsync(directory)


def _temporary(directory: int, name: str) -> tuple[str, int]:
    """A new file of beflow's own beside ``name`` in ``directory`` (``O_EXCL``: never one already there)."""
    while True:
        temporary = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(
                temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600, dir_fd=directory
            )
        except FileExistsError:
            continue
        return temporary, fd


def create_new(path: Path, source: int, *, below: Path | Opened, mode: int) -> bool:
    """Create ``path`` below ``below`` (and its missing directories), through no symlink, with the bytes of the
    regular file open at ``source`` (as many as it had when this began): only when nothing is at ``path``, not
    even a dangling symlink (``O_EXCL``). Whether it was created."""
    with _directory(path.parent, below, make=True) as directory:
        try:
            fd = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE, mode, dir_fd=directory)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as handle:
            info = os.fstat(source)
            left = info.st_size
            while left > 0 and (chunk := os.read(source, min(left, 1 << 20))):
                handle.write(chunk)
                left -= len(chunk)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.utime(handle.fileno(), ns=(info.st_atime_ns, info.st_mtime_ns))  # as a copy keeps them
        return True


def remove(path: Path, *, durable: bool = True) -> None:
    """Remove ``path`` durably (``durable=False``: without the fsync); a missing file is fine."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        if durable:
            fsync_dir(path.parent)
