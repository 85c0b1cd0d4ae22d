"""The run's own places for what a preset lets its agent write (:class:`beflow.sandbox.policy.PerRun`): made before
the sandbox starts, and after it ends the login files found there written back to the user's home.

Only the login files the preset names come back (a token the agent refreshed as it worked), and only as regular
files read without following a symlink, within :data:`LOGIN_LIMIT`, written atomically; a login file the user
keeps as a symlink, or that is not a regular file, is left as it is. Everything else the agent wrote there
(settings, hooks, plugins, caches) is dropped with the run's scratch directory.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from beflow.sandbox.policy import PerRun
from beflow.system import files

#: The largest login file written back: they are a few kilobytes.
LOGIN_LIMIT = 1 << 20


def kind(path: Path) -> str | None:
    """``"dir"``, ``"file"``, or None (nothing there, or neither): what a preset path is in the user's home."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else None


def prepare(places: Sequence[PerRun]) -> None:
    """Make each place: an overlay's upper and work directories, a file's copy. Raises OSError."""
    for place in places:
        if place.how == "overlay" and place.place is not None:
            place.place.mkdir(mode=0o700, parents=True)
            (place.place.parent / "work").mkdir(mode=0o700)
        elif place.how == "copy" and place.place is not None:
            place.place.parent.mkdir(mode=0o700, parents=True)
            shutil.copy2(place.target, place.place)


@dataclass
class WrittenBack:
    """What became of the login files after a run: written back, or left as they were and why."""

    written: list[Path] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def write_back(places: Sequence[PerRun]) -> WrittenBack:
    """Write back each login file the agent changed in its run (found in its overlay's upper directory)."""
    done = WrittenBack()
    for place in places:
        if place.how != "overlay" or place.place is None:
            continue
        for name in place.logins:
            theirs, mine = place.place / name, place.target / name
            try:
                found = os.lstat(theirs)
                if stat.S_ISCHR(found.st_mode) and found.st_rdev == 0:
                    continue  # removed in the run (overlayfs's whiteout): the user's stays
                data = files.read_regular(theirs, limit=LOGIN_LIMIT, follow_symlinks=False)
            except FileNotFoundError:
                continue  # not touched in the run
            except files.NotRegularError as error:  # a symlink, a FIFO
                done.refused.append(f"{mine} not written back: the run's is {error.kind}")
                continue
            except files.FileTooLarge:
                done.refused.append(f"{mine} not written back: the run's is larger than {LOGIN_LIMIT} bytes")
                continue
            except OSError as error:
                done.refused.append(f"{mine} not written back: {error.strerror or error}")
                continue
            try:
                current = os.lstat(mine)
            except FileNotFoundError:
                current = None
            except OSError as error:
                done.refused.append(f"{mine} not written back: {error}")
                continue
            if current is not None and not stat.S_ISREG(current.st_mode):
                done.refused.append(f"{mine} not written back: yours is {files.describe_kind(current.st_mode)}")
                continue
            if current is not None and _same(mine, data):
                continue
            try:
                files.atomic_write(mine, data, mode=stat.S_IMODE(current.st_mode) if current else 0o600)
            except OSError as error:
                done.refused.append(f"{mine} not written back: {error}")
                continue
            done.written.append(mine)
    return done


def _same(path: Path, data: bytes) -> bool:
    try:
        return files.read_regular(path, limit=LOGIN_LIMIT, follow_symlinks=False) == data
    except OSError:
        return False
