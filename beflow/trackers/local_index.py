"""The local tracker's index: ``.beflow/tracker/index.sqlite``, every issue file's parsed content under the stamp
of the file it came from (see :class:`IssueIndex`). The tracker (``local.py``) decides what to parse; this module
only keeps and answers from what was parsed.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from beflow.trackers.issue import FileProblem, Issue, Status, format_time

#: "3": labels are bounded (one line of at most 50 characters, no control characters), so the rows of an older
#: index may hold issues the model refuses now: it is rebuilt from the files, which report each such issue.
#: "4": issues may name their blockers (``blocked_by``), which older rows neither kept nor allowed.
INDEX_VERSION = "4"
INDEX_NAME = "index.sqlite"
#: Rows fetched from the index at a time while a listing streams (memory stays flat however many issues there are).
STREAM_BATCH = 512

#: A row of the index: the file's name, its stamp ("" for a file too new to trust it), and what it held.
Row = tuple[str, str, "Issue | list[FileProblem]"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS issues (
    name TEXT PRIMARY KEY,
    stamp TEXT NOT NULL,
    key INTEGER,
    status TEXT,
    priority INTEGER,
    title TEXT,
    labels TEXT,
    updated TEXT,
    issue TEXT,
    problems TEXT
);
CREATE INDEX IF NOT EXISTS issues_key ON issues (key);
CREATE INDEX IF NOT EXISTS issues_status ON issues (status);
"""


def damaged(error: sqlite3.Error) -> bool:
    """Whether the index is damaged, rather than busy or read-only: another process holding it longer than the
    wait, or a file this user may not write, is no reason to throw it away (:meth:`IssueIndex.set_back`)."""
    message = str(error).lower()
    return not (
        isinstance(error, sqlite3.OperationalError)
        and ("locked" in message or "busy" in message or "readonly" in message or "read-only" in message)
    )


def stamp_of(info: os.stat_result) -> str:
    return f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"


class IssueIndex:
    """``.beflow/tracker/index.sqlite``: every issue file's parsed content under the stamp (inode, size, mtime,
    ctime) of the file it came from, so that a beflow process parses only the files that changed since any beflow
    last read them, and lists 100k issues row by row without holding them.

    A cache, never the truth: a row whose file's stamp differs is parsed again, a missing, damaged or foreign index
    (another version, another tracker directory) is rebuilt, and where the project keeps no state yet (no
    ``.beflow/``) the index lives in memory: reading never creates state. SQLite's write-ahead log lets several
    beflows read and write it at once; losing it (it is not synced) costs a re-parse.
    """

    def __init__(self, directory: Path, state: Path, *, wait: float) -> None:
        self.directory = directory
        self.state = state
        #: Seconds to wait for another beflow's write.
        self.wait = wait
        self.path = state / "tracker" / INDEX_NAME
        self._db: sqlite3.Connection | None = None
        #: The stamp of every row this connection knows to be current (name -> stamp), read once per connection.
        self._known: dict[str, str] | None = None
        #: The repeated keys, while the index is as this connection last wrote it.
        self._repeated: dict[str, tuple[int, str]] | None = None
        # One connection serves every thread of the process (the dispatcher's work runs in worker threads).
        self.lock = threading.RLock()
        #: Whether this process keeps the index in memory: the file was busy or read-only when it was needed.
        self.in_memory = False

    # the connection ---------------------------------------------------------------------------------------------

    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        if self.in_memory or not self.state.is_dir():
            return self._prepare(sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None))
        for attempt in range(2):
            try:
                self.path.parent.mkdir(exist_ok=True)
                db = sqlite3.connect(self.path, timeout=self.wait, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                return self._prepare(db)
            except (OSError, sqlite3.Error) as error:
                if attempt or (isinstance(error, sqlite3.Error) and not damaged(error)):
                    break
                self._remove()  # damaged (not a database, a directory in its place): start again
        # Unwritable (a read-only checkout): this process keeps it in memory.
        return self._prepare(sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None))

    def _prepare(self, db: sqlite3.Connection) -> sqlite3.Connection:
        """The tables, emptied when they were written by another version or for another directory."""
        expected = {"version": INDEX_VERSION, "directory": str(self.directory)}
        if self._meta(db) != expected:
            db.execute("BEGIN IMMEDIATE")
            try:
                if self._meta(db) != expected:  # (another beflow may have prepared it meanwhile)
                    db.execute("DROP TABLE IF EXISTS issues")
                    db.execute("DROP TABLE IF EXISTS meta")
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.executemany("INSERT INTO meta VALUES (?, ?)", expected.items())
                    with contextlib.suppress(OSError):  # the index of earlier versions, replaced by this one
                        os.unlink(self.state / "tracker" / "index.json")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return db

    @staticmethod
    def _meta(db: sqlite3.Connection) -> dict[str, str]:
        try:
            return dict(db.execute("SELECT name, value FROM meta").fetchall())
        except sqlite3.OperationalError:  # no such table: a new index
            return {}

    def _remove(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.unlink(f"{self.path}{suffix}")

    def reset(self) -> None:
        """Forget the connection and the index file (found damaged while in use): the next use rebuilds it."""
        with self.lock:
            self._forget()
            if self.state.is_dir() and not self.in_memory:
                self._remove()

    def _forget(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self._db, self._known, self._repeated = None, None, None

    def set_back(self, error: sqlite3.Error | ValueError) -> None:
        """After ``error`` from the index: a damaged index is rebuilt from the files; one that is busy (another
        process holds it longer than the wait) or read-only is left as it is, and this process keeps its own in
        memory from then on, filled from the files as when there is none. A cache never stops a listing or a
        watch."""
        with self.lock:
            if isinstance(error, sqlite3.Error) and not damaged(error):
                self.in_memory = True
                self._forget()
            else:
                self.reset()

    # reading and writing rows ----------------------------------------------------------------------------------

    def known(self) -> dict[str, str]:
        """name -> stamp of every row."""
        with self.lock:
            if self._known is None:
                self._known = dict(self.db().execute("SELECT name, stamp FROM issues").fetchall())
            return self._known

    def stamps_of(self, names: list[str]) -> dict[str, str]:
        """The stamps the index holds now for ``names`` (another beflow may have parsed them already)."""
        found: dict[str, str] = {}
        with self.lock:
            for start in range(0, len(names), 500):
                chunk = names[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found.update(self.db().execute(f"SELECT name, stamp FROM issues WHERE name IN ({marks})", chunk))
        return found

    def row(self, name: str) -> tuple[str, Issue | list[FileProblem]] | None:
        with self.lock:
            found = self.db().execute("SELECT stamp, issue, problems FROM issues WHERE name = ?", (name,)).fetchone()
        if found is None:
            return None
        stamp, issue, problems = found
        return stamp, _decode(issue, problems)

    def put(self, rows: list[Row]) -> None:
        """Store freshly parsed files (one transaction: a concurrent reader sees all of them or none)."""
        if not rows:
            return
        values = [_encode(name, stamp, result) for name, stamp, result in rows]
        with self.lock:
            db = self.db()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO issues VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            known = self.known()
            for name, stamp, _ in rows:
                known[name] = stamp
            self._repeated = None

    def drop(self, names: list[str]) -> None:
        """Forget the rows of files that are gone."""
        if not names:
            return
        with self.lock:
            self.db().executemany("DELETE FROM issues WHERE name = ?", [(n,) for n in names])
            self._repeated = None
            known = self.known()
            for name in names:
                known.pop(name, None)

    def names_of(self, key: str) -> list[str]:
        """The files whose issue has the number ``key``, as last parsed."""
        if not (key.isascii() and key.isdigit()) or len(key) > 18:  # not a number SQLite holds: no issue has it
            return []
        with self.lock:
            return [n for (n,) in self.db().execute("SELECT name FROM issues WHERE key = ? ORDER BY name", (int(key),))]

    def blockers(self, keys: list[str], of: str) -> dict[str, tuple[Status, bool]]:
        """The status of each of ``keys`` that an issue has, and whether it waits for issue ``of`` in turn (a
        cycle); a key two files give is the first file's."""
        numbers = [int(k) for k in keys if k.isascii() and k.isdigit() and len(k) <= 18]
        if not numbers:
            return {}
        repeated = self.repeated()
        marks = ",".join("?" * len(numbers))
        query = f"""
            SELECT name, key, status,
                EXISTS (SELECT 1 FROM json_each(issue, '$.blocked_by') WHERE json_each.value = ?)
            FROM issues WHERE problems IS NULL AND key IN ({marks}) ORDER BY name DESC
        """
        with self.lock:
            rows = self.db().execute(query, [of, *numbers]).fetchall()
        return {str(key): (Status(status), bool(back)) for name, key, status, back in rows if name not in repeated}

    def max_key(self) -> int:
        with self.lock:
            (found,) = self.db().execute("SELECT MAX(key) FROM issues").fetchone()
        return int(found or 0)

    # the answers of a scan --------------------------------------------------------------------------------------

    def repeated(self) -> dict[str, tuple[int, str]]:
        """Files whose key another file (first by name) already has: name -> (key, the first file's name). Asked
        again only after this index changed (it costs a pass over every key)."""
        with self.lock:
            if self._repeated is None:
                self._repeated = self._repeated_now()
            return self._repeated

    def forget_repeated(self) -> None:
        with self.lock:
            self._repeated = None

    def _repeated_now(self) -> dict[str, tuple[int, str]]:
        query = """
            SELECT i.name, i.key, f.first FROM issues AS i
            JOIN (SELECT key, MIN(name) AS first FROM issues WHERE problems IS NULL GROUP BY key HAVING COUNT(*) > 1)
                AS f ON i.key = f.key
            WHERE i.problems IS NULL AND i.name != f.first
        """
        with self.lock:
            return {name: (key, first) for name, key, first in self.db().execute(query)}

    def problems(self) -> list[FileProblem]:
        """Every file that did not parse, and every repeated key, by file name."""
        with self.lock:
            rows = self.db().execute("SELECT name, problems FROM issues WHERE problems IS NOT NULL").fetchall()
        found = [(name, FileProblem.model_validate(p)) for name, text in rows for p in json.loads(text)]
        for name, (key, first) in self.repeated().items():
            message = f"key: {key} is also the key of {first}; give this issue a new key"
            found.append((name, FileProblem(path=self.directory / name, line=2, message=message)))
        return [problem for _, problem in sorted(found, key=lambda pair: pair[0])]

    def select(self, columns: str, status: Status | None = None, label: str | None = None) -> Iterator[tuple[Any, ...]]:
        """``columns`` of every issue (not the repeated keys), by key, ``STREAM_BATCH`` rows at a time."""
        repeated = self.repeated()
        query = f"SELECT name, {columns} FROM issues WHERE problems IS NULL"
        arguments: list[Any] = []
        if status is not None:
            query += " AND status = ?"
            arguments.append(Status(status).value)
        if label is not None:
            query += " AND EXISTS (SELECT 1 FROM json_each(issues.labels) WHERE json_each.value = ?)"
            arguments.append(label)
        query += " ORDER BY key"
        with self.lock:
            cursor = self.db().execute(query, arguments)
        while True:
            with self.lock:
                batch = cursor.fetchmany(STREAM_BATCH)
            if not batch:
                return
            for row in batch:
                if row[0] not in repeated:
                    yield row[1:]


def _encode(name: str, stamp: str, result: Issue | list[FileProblem]) -> tuple[Any, ...]:
    if isinstance(result, Issue):
        labels = json.dumps(result.labels, ensure_ascii=False)
        updated = format_time(result.updated)
        issue = result.model_dump_json()
        return (
            name,
            stamp,
            int(result.key),
            result.status.value,
            result.priority,
            result.title,
            labels,
            updated,
            issue,
            None,
        )
    problems = json.dumps([p.model_dump(mode="json") for p in result], ensure_ascii=False)
    return (name, stamp, None, None, None, None, None, None, None, problems)


def _decode(issue: str | None, problems: str | None) -> Issue | list[FileProblem]:
    if issue is not None:
        return Issue.model_validate_json(issue)
    return [FileProblem.model_validate(p) for p in json.loads(problems or "[]")]
