"""The one place that writes files beflow manages: atomically, durably, with an explicit mode.

A reader never sees a half-written file: data goes to a temporary file in the same directory, is fsynced, then
renamed over the target, and the directory entry is fsynced too.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


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
