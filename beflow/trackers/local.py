"""The local tracker: one Markdown file per issue in ``tracker.dir`` (default ``.beflow/issues``).

A file is YAML front matter, the body, then the comments after a marker line: its format (rendering, parsing,
the careful YAML loader, the problems a file can have) is :mod:`beflow.trackers.local_format`, and the SQLite
index that spares re-reading unchanged files is :mod:`beflow.trackers.local_index`.

Keys are sequential numbers, allocated under a lock so that two concurrent ``new`` never collide. Every write is
atomic and happens under a per-issue lock after re-reading the file, so concurrent writers (and hand edits made
before them) are never lost. Claims are OS file locks under ``.beflow/claims/``: the OS drops them when the holder
dies. docs/trackers.md describes all of it for users.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import json
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pydantic

from beflow import lazy
from beflow.errors import NotFoundError, UsageError, excerpt
from beflow.files import atomic_write
from beflow.paths import STATE_DIR, state_dir
from beflow.trackers.base import (
    DEFAULT_PRIORITY,
    Claim,
    ClaimInfo,
    Comment,
    FileProblem,
    Issue,
    IssueRow,
    Listing,
    ListingStream,
    Status,
    check_transition,
    draft_issue,
    normalize_key,
    utc_now,
)
from beflow.trackers.claims import ClaimStore, FileClaims, orphans_of, ready_of
from beflow.trackers.local_format import IssueFileError, file_name, parse, read_text, render
from beflow.trackers.local_index import STREAM_BATCH, IssueIndex, Row, stamp_of

if TYPE_CHECKING:
    import filelock
else:
    filelock = lazy.module("filelock")  # reading needs no lock

_T = TypeVar("_T")

#: How long a write waits for another write to the same issue (they take milliseconds).
WRITE_WAIT = 30.0
#: Seconds to wait for another process's write to the index before reading the files instead: it is a cache, and
#: beflow's own writes to it take milliseconds.
INDEX_WAIT = 2.0

_LEADING_NUMBER = re.compile(r"^(\d+)")


# --- the tracker ---------------------------------------------------------------------------------------------------


class _Reading(threading.local):
    holding = 0
    synced = False


class LocalTracker:
    """Issues as Markdown files in ``directory``; locks and claims in the project's ``.beflow/``."""

    def __init__(self, directory: Path, project_dir: Path, claims: ClaimStore | None = None) -> None:
        self.directory = directory
        self.project_dir = project_dir
        self.description = f"local issues in {directory}"
        self._index = IssueIndex(directory, project_dir / STATE_DIR, wait=INDEX_WAIT)
        #: Per thread (a watch's tick and its runs' steps call from worker threads at once): whether the index was
        #: brought up to date within the :meth:`reading_once` that holds, if one does.
        self._reading = _Reading()
        #: How many times this tracker looked at every file (the cost that grows with the tracker).
        self.scans = 0
        #: Who runs which issue: file locks in ``.beflow/claims`` (made, and git-ignored, on the first claim), unless
        #: another store is given (one that holds across machines, say).
        self.claims: ClaimStore = claims or FileClaims(
            project_dir / STATE_DIR / "claims", create=lambda: self._state() / "claims"
        )

    # paths -------------------------------------------------------------------------------------------------------

    def _state(self) -> Path:
        """``.beflow/`` (created, and git-ignored, on first use)."""
        return state_dir(self.project_dir)

    def _lock(self, name: str) -> filelock.FileLock:
        path = self._state() / "tracker" / "locks" / f"{name}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        return filelock.FileLock(path, timeout=WRITE_WAIT, thread_local=False)

    # reading -----------------------------------------------------------------------------------------------------

    def _names(self, *, sort: bool = True) -> list[str]:
        """The names of the issue files (no stat: a scan stats each file once)."""
        try:
            names = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = [n for n in names if _is_issue_name(n)]
        return sorted(found) if sort else found

    def _files_named(self, key: str) -> list[str]:
        """The issue files whose name starts with the number ``key`` (``0007-x.md`` for 7)."""
        return [n for n in self._names() if _number_of_name(n) == key]

    def _read(self, path: Path) -> Issue:
        text, mtime = read_text(path)
        return parse(path, text, mtime=mtime)

    def _cached(self, name: str, *, from_file: bool = False) -> Issue | list[FileProblem] | None:
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
            row = self._index.row(name)
            if row is not None and stamp and row[0] == stamp and not from_file:
                return row[1]
        except (sqlite3.Error, ValueError) as error:  # the file is parsed instead (and a damaged index rebuilt)
            self._index.set_back(error)
        result = self._parse_file(path)
        if row is not None and stamp and row == (stamp, result):
            return result  # (the row says what the file says: nothing to write)
        try:
            self._index.put([(name, stamp, result)])
        except sqlite3.Error as error:
            self._index.set_back(error)
        return result

    @staticmethod
    def _trusted(info: os.stat_result) -> str:
        """The stamp of a file, or "" for a file changed within the last moment: it may change again with the same
        stamp (the clock's granularity), so it is parsed again next time rather than trusted."""
        return stamp_of(info) if time.time_ns() - info.st_ctime_ns > RACY_NS else ""

    def _parse_file(self, path: Path) -> Issue | list[FileProblem]:
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

    def watched_directories(self) -> list[Path]:
        """Where a change may make an issue startable: the issue files, and the claim notes (a claim released)."""
        claims = self.claims.directory if isinstance(self.claims, FileClaims) else None
        return [self.directory] + ([claims] if claims is not None else [])

    def _sync(self) -> None:
        """Bring the index up to date with the directory: one ``stat`` per file, and a parse of each file that
        changed since any beflow last parsed it (another beflow may have done it already: the index is shared)."""
        reading = self._reading
        if reading.holding and reading.synced:
            return
        try:
            self._sync_now()
        except (sqlite3.DatabaseError, ValueError) as error:  # damaged, busy or read-only: from the files
            self._index.set_back(error)
            self._sync_now()
        reading.synced = True
        self.scans += 1

    def _sync_now(self) -> None:
        with self._index.lock:  # (threads of one process sync one at a time: they share the known stamps)
            self._sync_locked()

    def _sync_locked(self) -> None:
        known = self._index.known()
        present: set[str] = set()
        changed: list[tuple[str, str]] = []
        prefix = os.path.join(self.directory, "")
        for name in self._names(sort=False):
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
        self._index.drop([name for name in known if name not in present])
        if not changed:
            return
        self._index.forget_repeated()  # (rows another beflow wrote count too)
        current = self._index.stamps_of([name for name, stamp in changed if stamp])
        rows: list[Row] = []
        for name, stamp in changed:
            if stamp and current.get(name) == stamp:
                known[name] = stamp  # parsed by another beflow meanwhile
                continue
            rows.append((name, stamp, self._parse_file(self.directory / name)))
            if len(rows) >= STREAM_BATCH:  # (memory stays bounded while 100k new files are read)
                self._index.put(rows)
                rows = []
        self._index.put(rows)

    def _answer(self, question: Callable[[], _T]) -> _T:
        """``question`` answered from the index after a sync; an index found damaged meanwhile (written over, a
        disk error) is rebuilt from the files and asked again."""
        try:
            self._sync()
            return question()
        except sqlite3.DatabaseError as error:
            self._index.set_back(error)
            self._reading.synced = False
            self._sync()
            return question()

    def _issues(self, status: Status | None = None, label: str | None = None) -> list[Issue]:
        """The issues (with ``status`` and ``label``), by key, built from the index after a sync."""
        return self._answer(lambda: self._selected(status, label))

    def _selected(self, status: Status | None = None, label: str | None = None) -> list[Issue]:
        return [Issue.model_validate_json(text) for (text,) in self._index.select("issue", status, label)]

    def _scan(self) -> tuple[list[Issue], list[FileProblem]]:
        """Every issue that parses (by key) and a problem per file that does not; a repeated key is a problem."""
        return self._answer(lambda: (self._selected(), self._index.problems()))

    def listing(self, status: Status | None = None, label: str | None = None) -> Listing:
        issues, problems = self._answer(lambda: (self._selected(status, label), self._index.problems()))
        return Listing(issues=issues, problems=problems)

    def stream(self, status: Status | None = None, label: str | None = None) -> ListingStream:
        """The listing row by row, straight from the index: no issue is built, none is held (100k issues list in
        constant memory). ``issues list`` renders this."""
        problems = self._answer(self._index.problems)

        def rows() -> Iterator[IssueRow]:
            for key, state, priority, title, labels, updated in self._index.select(
                "key, status, priority, title, labels, updated", status, label
            ):
                yield IssueRow(
                    str(key), Status(state), priority, title, json.loads(labels), dt.datetime.fromisoformat(updated)
                )

        def documents() -> Iterator[str]:
            for (text,) in self._index.select("issue", status, label):
                yield text

        return ListingStream(problems, rows, documents)

    def ready(self) -> list[Issue]:
        return ready_of(self._issues(Status.READY), self.claims)

    def get(self, key: str) -> Issue:
        """The issue read from its file, never from its row in the index: the index only says which file to read.
        The index is a cache any process of the user can write (an agent's too); what a run reads, and what
        ``issues show`` shows, is what the file says."""
        wanted = normalize_key(key)
        # The file of the key, by the index or by its name (``0007-...``), when its front matter agrees: no scan.
        if wanted.isdigit():
            found = self._by_name(wanted, self._index_names(wanted))
            # Not in the index (a file added since, or renamed): the names in the directory, still without a parse.
            found = found or self._by_name(wanted, self._files_named(wanted))
            if found is not None:
                return found
        issues, problems = self._scan()
        for issue in issues:
            if issue.key == wanted and issue.path is not None:
                found = self._by_name(wanted, [issue.path.name])
                if found is not None:
                    return found
        # The file of that key may be the broken one: say what is wrong with it rather than "not found".
        broken = [p for p in problems if _number_of(p.path) == wanted]
        if broken:
            raise IssueFileError(broken)
        raise NotFoundError(self._not_found(key, issues), fix="`beflow issues list` shows every issue.")

    def _by_name(self, key: str, names: list[str]) -> Issue | None:
        for name in names:
            found = self._cached(name, from_file=True)
            if isinstance(found, Issue) and found.key == key:
                return found
        return None

    def _index_names(self, key: str) -> list[str]:
        try:
            return self._index.names_of(key)
        except sqlite3.Error as error:
            self._index.set_back(error)
            return []

    def _not_found(self, key: str, issues: list[Issue]) -> str:
        message = f"no issue {excerpt(key, quote=False)} in {self.directory}"
        if not issues:
            return f"{message} (there are no issues yet)"
        wanted = normalize_key(key)
        close = difflib.get_close_matches(wanted, [i.key for i in issues], n=3, cutoff=0.5)
        if not wanted.isdigit():  # perhaps a word from the title
            close += [i.key for i in issues if wanted.lower() in i.title.lower() and i.key not in close][:3]
        if not close:
            return f"{message}; keys run from {issues[0].key} to {issues[-1].key}"
        titles = {i.key: i.title for i in issues}
        return f"{message}; did you mean: " + ", ".join(f"{k} ({titles[k]})" for k in close)

    # writing -----------------------------------------------------------------------------------------------------

    def _write(self, issue: Issue) -> None:
        assert issue.path is not None
        self._reading.synced = False
        atomic_write(issue.path, render(issue))

    def _update(self, key: str, change: Callable[[Issue], Issue]) -> Issue:
        """Read the issue afresh under its lock, change it, write it: concurrent writers never lose each other."""
        wanted = normalize_key(key)
        self.get(wanted)  # a clear error before taking any lock
        with self._lock(f"issue-{wanted}"):
            current = self.get(wanted)
            changed = change(current)
            if changed is not current:
                self._write(changed)
            return changed

    def create(
        self,
        title: str,
        body: str = "",
        labels: list[str] | None = None,
        priority: int = DEFAULT_PRIORITY,
        status: Status = Status.READY,
    ) -> Issue:
        draft = draft_issue(title, body, labels, priority, status)
        with self._lock("new"):
            key = str(self._last_key() + 1)
            path = self.directory / file_name(key, draft.title)
            issue = draft.model_copy(update={"key": key, "path": path, "url": path.absolute().as_uri()})
            self._write(issue)
            atomic_write(self._state() / "tracker" / "last-key", f"{key}\n")
        return issue

    def _last_key(self) -> int:
        """The highest key ever given here: in a file name, in a file, or (if its file was deleted) remembered."""
        # Keys are given in file names: the names suffice, without parsing, but for files named otherwise (by hand),
        # which are read (from the index when unchanged). A key typed by hand into a file named after another
        # counts once any beflow has read that file (the index's highest key).
        numbers = [0]
        for name in self._names(sort=False):
            number = _number_of_name(name)
            if number is None:
                found = self._cached(name)
                number = found.key if isinstance(found, Issue) and found.key.isdigit() else None
            if number is not None:
                numbers.append(int(number))
        with contextlib.suppress(sqlite3.Error):
            numbers.append(self._index.max_key())
        with contextlib.suppress(OSError, ValueError):
            numbers.append(int((self._state() / "tracker" / "last-key").read_text().strip()))
        return max(numbers)

    def comment(self, key: str, text: str, author: str) -> Comment:
        try:
            new = Comment(author=author, created=utc_now(), text=text)
        except pydantic.ValidationError as exc:
            raise UsageError(f"comment: {str(exc.errors()[0]['msg']).removeprefix('Value error, ')}") from None

        def add(issue: Issue) -> Issue:
            return issue.model_copy(update={"comments": [*issue.comments, new], "updated": new.created})

        self._update(key, add)
        return new

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        status = Status(status)

        def move(issue: Issue) -> Issue:
            check_transition(issue.key, issue.status, status)
            if issue.status == status and not note:
                return issue  # nothing changes, nothing is written
            now = utc_now()
            comments = list(issue.comments)
            if note and note.strip():
                comments.append(Comment(author=author, created=now, text=note))
            return issue.model_copy(update={"status": status, "comments": comments, "updated": now})

        return self._update(key, move)

    # claims (file locks: beflow.trackers.claims) -----------------------------------------------------------------

    def claim(self, key: str, owner: str) -> Claim:
        return self.claims.claim(self.get(key).key, owner)

    def holder(self, key: str) -> ClaimInfo | None:
        return self.claims.holder(key)

    def orphaned(self) -> list[Issue]:
        return orphans_of(self._issues(Status.IN_PROGRESS), self.claims)

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.claims.last_holder(key)


def _number_of(path: Path) -> str | None:
    """The key a file name suggests (``0007-x.md`` -> ``7``)."""
    return _number_of_name(path.name)


def _number_of_name(name: str) -> str | None:
    match = _LEADING_NUMBER.match(name)
    return str(int(match.group(1))) if match else None


def _is_issue_name(name: str) -> bool:
    return name.endswith(".md") and not name.startswith(".") and name.lower() != "readme.md"


#: Files changed less than this long ago are parsed again on the next read, not trusted to their stamp: a change
#: within the file system clock's granularity can leave the stamp as it was.
RACY_NS = 1_000_000_000
