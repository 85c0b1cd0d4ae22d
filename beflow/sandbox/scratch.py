"""A sandboxed run's scratch directory: the proxy's socket, acpx's private state, the presets' per-run places.

It is made in the system's temporary directory (``beflow-sandbox-XXXX``) with a note of its owner in it
(:data:`NOTE`: the process that made it and when that process started, which :mod:`beflow.system.liveness` tells from a
later process that got the same pid), and removed when the run's sandbox closes. A beflow killed outright (SIGKILL)
cannot remove it: the next beflow command does (:func:`sweep`, beside the recovery of what a killed beflow left
managed), for directories of the same user whose owner is gone, never a live run's. A directory without a note is
never swept: one being made (it gets its name only once its note is written), another program's, or the same
directory seen from inside a sandbox, where the socket and markers bound into it are the live run's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

PREFIX = "beflow-sandbox-"
#: The name of one being made, until its note is written.
MAKING = ".beflow-sandbox-making-"
#: The owner's note in a scratch directory: ``{"pid": ..., "started": ...}``.
NOTE = "owner.json"


def make() -> Path:
    """A new scratch directory (mode 0700) owned by this process, its note in it."""
    from beflow.system import files, liveness

    making = Path(tempfile.mkdtemp(prefix=MAKING))
    note = {"pid": os.getpid(), "started": liveness.start_time(os.getpid())}
    files.atomic_write(making / NOTE, json.dumps(note), mode=0o600, durable=False)
    path = making.with_name(PREFIX + making.name.removeprefix(MAKING))
    os.rename(making, path)
    return path


def owner(directory: Path) -> tuple[int, float | None] | None:
    """The pid and start time the note in ``directory`` holds; None when it has no note that can be read."""
    from beflow.system import files

    try:
        note = json.loads(files.read_regular(directory / NOTE, limit=4096, follow_symlinks=False))
        pid, started = note["pid"], note["started"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(started, (int, float, type(None))):
        return None
    return pid, started


def remove(path: Path) -> None:
    """Remove ``path`` and everything in it, whatever modes the agent left inside (a directory of mode 000 in its
    ``~/.acpx``, overlayfs's own work directory): those are opened up for removal. Nothing of the sandbox runs any
    more when this is called, so nothing swaps what is being removed."""

    def unlock(function: Callable[..., Any], name: str, _error: object) -> None:
        with contextlib.suppress(OSError):
            if function in (os.open, os.scandir, os.listdir):  # a directory that cannot be read: open it up
                os.chmod(name, 0o700)
                _rmtree(name, unlock)
            else:  # an entry its directory does not let go: open the directory up, try again
                os.chmod(os.path.dirname(name), 0o700)
                (os.rmdir if function is os.rmdir else os.unlink)(name)

    _rmtree(path, unlock)


def _rmtree(path: str | Path, handler: Callable[[Callable[..., Any], str, object], None]) -> None:
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=handler)
    else:
        shutil.rmtree(path, onerror=handler)


def sweep() -> list[Path]:
    """Remove the scratch directories of this user's sandboxed runs whose beflow is gone; which were removed."""
    base = Path(tempfile.gettempdir())
    try:
        names = [name for name in os.listdir(base) if name.startswith((PREFIX, MAKING))]
    except OSError:
        return []
    if not names:
        return []
    from beflow.system import liveness  # (psutil: only when there is something to look at)

    removed = []
    for name in names:
        path = base / name
        try:
            info = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue  # another user's, or not one of beflow's
        found = owner(path)
        if found is None or liveness.is_running(*found):
            continue
        remove(path)
        if not path.exists():
            removed.append(path)
    return removed
