"""The local tracker's issue files as it reads them: the names in its directory, and each file parsed once per
change. The SQLite index (:mod:`beflow.trackers.local_index`) keeps what was parsed, by each file's stamp; a sync
brings it up to date with the directory (one ``stat`` per file), at most once per :meth:`IssueFiles.reading_once`
and thread. The tracker (:mod:`beflow.trackers.local`) asks its questions of the index through :meth:`answer`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from beflow.trackers.issue import FileProblem, Issue
from beflow.trackers.local_format import IssueFileError, parse, read_text
from beflow.trackers.local_index import STREAM_BATCH, IssueIndex, Row, stamp_of

_T = TypeVar("_T")

_LEADING_NUMBER = re.compile(r"^(\d+)")


class _Reading(threading.local):
    holding = 0
    synced = False


class IssueFiles:
    """The issue files in ``directory``, read through ``index``."""

    def __init__(self, directory: Path, index: IssueIndex) -> None:
        self.directory = directory
        self.index = index
        #: Per thread (a watch's tick and its runs' steps call from worker threads at once): whether the index was
        #: brought up to date within the :meth:`reading_once` that holds, if one does.
        self._reading = _Reading()
        #: How many times this tracker looked at every file (the cost that grows with the tracker).
        self.scans = 0

    def changed(self) -> None:
        """This thread wrote an issue file: its next question looks at the directory again."""
        self._reading.synced = False

    def names(self, *, sort: bool = True) -> list[str]:
        """The names of the issue files (no stat: a scan stats each file once)."""
        try:
            names = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = [n for n in names if is_issue_name(n)]
        return sorted(found) if sort else found

    def files_named(self, key: str) -> list[str]:
        """The issue files whose name starts with the number ``key`` (``0007-x.md`` for 7)."""
        return [n for n in self.names() if number_of_name(n) == key]

    def _read(self, path: Path) -> Issue:
        text, mtime = read_text(path)
        return parse(path, text, mtime=mtime)

    def cached(self, name: str, *, from_file: bool = False) -> Issue | list[FileProblem] | None:
        """The issue in file ``name`` (or its problems), from the index when the file is as it was when last
        parsed (unless ``from_file``), else parsed (and the index updated); None when it is not a regular file
        (any more)."""
        path = self.directory / name
        try:
            info = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        stamp = self._trusted(info)
        row = None
        try:
            row = self.index.row(name)
            if row is not None and stamp and row[0] == stamp and not from_file:
                return row[1]
        except (sqlite3.Error, ValueError) as error:  # the file is parsed instead (and a damaged index rebuilt)
            self.index.set_back(error)
        result = self.parse_file(path)
        if row is not None and stamp and row == (stamp, result):
            return result  # (the row says what the file says: nothing to write)
        try:
            self.index.put([(name, stamp, result)])
        except sqlite3.Error as error:
            self.index.set_back(error)
        return result

    @staticmethod
    def _trusted(info: os.stat_result) -> str:
        """The stamp of a file, or "" for a file changed within the last moment: it may change again with the same
        stamp (the clock's granularity), so it is parsed again next time rather than trusted."""
        return stamp_of(info) if time.time_ns() - info.st_ctime_ns > RACY_NS else ""

    def parse_file(self, path: Path) -> Issue | list[FileProblem]:
        try:
            return self._read(path)
        except IssueFileError as error:
            return error.problems

    @contextlib.contextmanager
    def reading_once(self) -> Iterator[None]:
        """Questions within the block are answered from one look at the directory (see ``trackers.reading_once``);
        this thread's own writes make its next question look again."""
        reading = self._reading
        reading.holding += 1
        try:
            yield
        finally:
            reading.holding -= 1
            if not reading.holding:
                reading.synced = False

    def sync(self) -> None:
        """Bring the index up to date with the directory: one ``stat`` per file, and a parse of each file that
        changed since any beflow last parsed it (another beflow may have done it already: the index is shared)."""
        reading = self._reading
        if reading.holding and reading.synced:
            return
        try:
            self._sync_now()
        except (sqlite3.DatabaseError, ValueError) as error:  # damaged, busy or read-only: from the files
            self.index.set_back(error)
            self._sync_now()
        reading.synced = True
        self.scans += 1

    def _sync_now(self) -> None:
        with self.index.lock:  # (threads of one process sync one at a time: they share the known stamps)
            self._sync_locked()

    def _sync_locked(self) -> None:
        known = self.index.known()
        present: set[str] = set()
        changed: list[tuple[str, str]] = []
        prefix = os.path.join(self.directory, "")
        for name in self.names(sort=False):
            try:
                info = os.stat(prefix + name)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            present.add(name)
            stamp = self._trusted(info)
            if not stamp or known.get(name) != stamp:
                changed.append((name, stamp))
        self.index.drop([name for name in known if name not in present])
        if not changed:
            return
        self.index.forget_repeated()  # (rows another beflow wrote count too)
        current = self.index.stamps_of([name for name, stamp in changed if stamp])
        rows: list[Row] = []
        for name, stamp in changed:
            if stamp and current.get(name) == stamp:
                known[name] = stamp  # parsed by another beflow meanwhile
                continue
            rows.append((name, stamp, self.parse_file(self.directory / name)))
            if len(rows) >= STREAM_BATCH:  # (memory stays bounded while 100k new files are read)
                self.index.put(rows)
                rows = []
        self.index.put(rows)

    def answer(self, question: Callable[[], _T]) -> _T:
        """``question`` answered from the index after a sync; an index found damaged meanwhile (written over, a
        disk error) is rebuilt from the files and asked again."""
        try:
            self.sync()
            return question()
        except sqlite3.DatabaseError as error:
            self.index.set_back(error)
            self._reading.synced = False
            self.sync()
            return question()


def number_of(path: Path) -> str | None:
    """The key a file name suggests (``0007-x.md`` -> ``7``)."""
    return number_of_name(path.name)


def number_of_name(name: str) -> str | None:
    match = _LEADING_NUMBER.match(name)
    return str(int(match.group(1))) if match else None


def is_issue_name(name: str) -> bool:
    return name.endswith(".md") and not name.startswith(".") and name.lower() != "readme.md"


#: Files changed less than this long ago are parsed again on the next read, not trusted to their stamp: a change
#: within the file system clock's granularity can leave the stamp as it was.
RACY_NS = 1_000_000_000
