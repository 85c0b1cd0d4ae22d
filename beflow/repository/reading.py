"""Objects read out of the repository's store, each re-hashed as it streams: bytes that are not the object their id
names are never taken for it, whatever a store that an agent could write holds."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from beflow.repository.git import GitError, stream
from beflow.system import proc

#: Bytes of an object read at a time while it is searched and hashed.
CHUNK = 1 << 20

if TYPE_CHECKING:
    from beflow.repository.git import At


class CorruptObject(GitError):
    """An object whose bytes do not hash to its id, or that is missing or not of the kind expected."""


class ObjectTooLarge(GitError):
    """An object larger than the reader was allowed to take (it was not read)."""


class ObjectReader:
    """Objects read through one ``git cat-file --batch`` of beflow's own, each re-hashed while it streams
    (``sha1("<type> <size>\\0" + content)``, SHA-256 in a SHA-256 repository). Close it after."""

    def __init__(self, where: At) -> None:
        self._where = where
        self._open: contextlib.ExitStack | None = None
        self._child: proc.Stream | None = None

    def _start(self) -> proc.Stream:
        if self._child is None:
            self._open = contextlib.ExitStack()
            self._child = self._open.enter_context(stream(self._where, "cat-file", "--batch"))
        return self._child

    def read(self, sha: str, kind: str, *, limit: int | None = None) -> bytes:
        """The content of object ``sha``, which must be a ``kind``, verified; at most ``limit`` bytes (a larger
        one raises :class:`ObjectTooLarge` unread)."""
        chunks: list[bytes] = []
        self.stream(sha, kind, chunks.append, limit=limit)
        return b"".join(chunks)

    def stream(self, sha: str, kind: str | None, take: Callable[[bytes], None], *, limit: int | None = None) -> int:
        """Hand the content of object ``sha`` (a ``kind``, unless None) to ``take`` a chunk at a time; raises
        :class:`CorruptObject` once the bytes are read if they do not hash to ``sha``. Its size."""
        child = self._start()
        child.stdin.write(f"{sha}\n".encode())
        child.stdin.flush()
        header = child.stdout.readline().decode("utf-8", "replace").split()
        if len(header) != 3 or header[0] != sha:
            self.close()
            raise CorruptObject(f"object {sha} is missing from the repository")
        found, size = header[1], int(header[2])
        if limit is not None and size > limit:
            self.close()  # what it would still say is never read: a fresh process serves the next object
            raise ObjectTooLarge(f"object {sha} is {size} bytes, more than {limit}")
        digest = hashlib.new("sha256" if len(sha) == 64 else "sha1", f"{found} {size}\0".encode())
        remaining = size
        while remaining > 0:
            chunk = child.stdout.read(min(CHUNK, remaining))
            if not chunk:
                self.close()
                raise GitError(f"git cat-file stopped while reading object {sha}")
            remaining -= len(chunk)
            digest.update(chunk)
            take(chunk)
        child.stdout.read(1)  # the line end after the content
        if digest.hexdigest() != sha:
            raise CorruptObject(f"object {sha} is corrupt: its bytes are not the object its id names")
        if kind is not None and found != kind:
            raise CorruptObject(f"object {sha} is a {found}, not a {kind}")
        return size

    def close(self) -> None:
        opened, self._open, self._child = self._open, None, None
        if opened is not None:
            opened.close()

    def __enter__(self) -> ObjectReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
