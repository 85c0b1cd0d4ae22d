"""The run records of one project (``.beflow/runs/``): created, saved, listed newest first, found by id, and the
records of killed runs closed; a cache of the finished runs spares reading them again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import os
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from pydantic import ValidationError

from beflow.errors import NotFoundError, excerpt
from beflow.guardrails import Usage
from beflow.paths import STATE_DIR, slug, state_dir
from beflow.records.logs import RunFiles
from beflow.records.record import RUN_ID, RunRecord, masked_record
from beflow.system import files, liveness
from beflow.system.files import atomic_write

#: The largest ``run.json`` read: a record beyond it is taken for a damaged one (an agent's, not beflow's).
MAX_RECORD = 64 << 20
#: The largest list of finished runs read (a cache: beyond, every record is read).
MAX_FINISHED_LIST = 16 << 20
#: How far a run's recorded start may lie after the time in its id (it is taken a moment later; a clock may be
#: set back): reading the newest runs goes this much further back than the oldest one it keeps.
ID_CLOCK_SLACK = dt.timedelta(minutes=10)


def _before(start: str, slack: dt.timedelta) -> str:
    """The id time ``slack`` before ``start`` (both ``YYYYmmdd-HHMMSS``)."""
    try:
        return (dt.datetime.strptime(start, "%Y%m%d-%H%M%S") - slack).strftime("%Y%m%d-%H%M%S")
    except ValueError:
        return ""  # (not a time after all: read everything)


#: The runs whose record is final (one name a line, in ``.beflow/``): a finished record never changes again, so
#: looking for runs still going skips them without reading them. Only ever appended to; a cache, never the truth
#: of a run's outcome (a name in it whose record says otherwise cannot happen: it is added after the record).
FINISHED_RUNS = "finished-runs"

#: The stamps (inode, size, mtime) of finished records this process has read, by path: they are not read again
#: while the stamp holds. (Records are written by atomic replace: every save is a new inode.)
_FINISHED: dict[str, tuple[int, int, int]] = {}


class RunStore(RunFiles):
    """The run records of one project."""

    def create(self, record: RunRecord, prompt: str) -> Path:
        state_dir(self.project_dir)
        directory = self.directory(record.id)
        files.make_directory(directory, below=self.project_dir, exist_ok=False)
        atomic_write(directory / "prompt.md", self.mask(prompt), durable=False, below=self.project_dir)
        self.save(record)
        return directory

    def save(self, record: RunRecord) -> None:
        record.progress = self.progress(record.id)  # the agent's lines are the progress file's, not the run's
        # Only the final record is made durable: after a crash, a record still `running` (whichever version of
        # it survives) is closed as cancelled by the next beflow, which is all recovery needs from it.
        path = self.directory(record.id) / "run.json"
        text = masked_record(record, self.mask).to_json() + "\n"
        atomic_write(path, text, durable=record.finished, below=self.project_dir)
        if record.finished:
            self._note_finished([record.id])

    def resumable_session(self, record: RunRecord) -> str | None:
        """The ACP session of ``record``'s issue's latest earlier run with the same agent, if it recorded one (a
        retry and a review round resume it)."""
        for earlier in self.records([record.issue], ids=[record.issue_id] if record.issue_id else ()):
            if earlier.id != record.id and earlier.agent == record.agent:
                return earlier.session
        return None

    def records(
        self, issues: Collection[str] | None = None, limit: int | None = None, *, ids: Collection[str] = ()
    ) -> list[RunRecord]:
        """The readable records (of ``issues`` only, when given, and of the issues whose tracker's stable id is one
        of ``ids``: a moved issue's runs under its former key), newest first; with ``limit``, the newest ``limit``.

        Run ids start with their start time and carry their issue's key (:func:`new_run_id`), so a question about
        a few issues or the latest runs reads those records, not every record of the project: directories are
        read newest first by name, down to :data:`ID_CLOCK_SLACK` before the oldest one kept. Directories not named
        like a run id are always read."""
        with self._opened() as root:
            if root is None:
                return []
            found = self._newest(root, issues, limit, ids)
        if issues is not None:
            found = [record for record in found if _of(record, issues, ids)]
        # By start time, not by id: ids tell seconds only, and two runs can start within the same second.
        found.sort(key=lambda r: (r.started_at, r.id), reverse=True)
        return found if limit is None else found[:limit]

    def _newest(
        self, root: files.Opened, issues: Collection[str] | None, limit: int | None, ids: Collection[str] = ()
    ) -> list[RunRecord]:
        """:meth:`records`' reading, from the runs' directory held open: not in order yet."""
        # A directory's name tells its issue's key then, not its stable id: asked by id, every record is read.
        tags = None if issues is None or ids else {slug(key, max_length=24) for key in issues}
        timed: list[tuple[str, str]] = []  # (start second, name)
        untimed: list[str] = []
        for name in self._names(root):
            match = RUN_ID.match(name)
            if match is None:
                untimed.append(name)
            elif tags is None or match.group("key") in tags:
                timed.append((match.group("start"), name))
        timed.sort(reverse=True)
        found = [record for _, record in self._read(lambda path: True, untimed, root)]
        kept = 0
        cutoff: str | None = None
        for start, name in timed:
            if cutoff is not None and start < cutoff:
                break
            for _, record in self._read(lambda path: True, [name], root):
                if issues is None or _of(record, issues, ids):
                    found.append(record)
                    kept += 1
            if limit is not None and kept >= limit and cutoff is None:
                cutoff = _before(start, ID_CLOCK_SLACK)
        return found

    def started_since(self, since: dt.datetime, wanted: Callable[[str], bool] | None = None) -> list[RunRecord]:
        """The readable records of runs started at ``since`` or later (their ids say when, give or take
        :data:`ID_CLOCK_SLACK`: only those directories are read), of those whose ``run.json`` path ``wanted``
        accepts (all, by default)."""
        cutoff = _before(since.astimezone(dt.UTC).strftime("%Y%m%d-%H%M%S"), ID_CLOCK_SLACK)
        with self._opened() as root:
            if root is None:
                return []
            names = [n for n in self._names(root) if (m := RUN_ID.match(n)) is None or m.group("start") >= cutoff]
            read = self._read(wanted or (lambda path: True), names, root)
            return [record for _, record in read if record.started_at >= since]

    def _names(self, root: files.Opened | None = None) -> list[str]:
        try:
            return files.list_directory(self.root, below=root or self.project_dir)
        except OSError:
            return []

    @contextlib.contextmanager
    def _opened(self) -> Iterator[files.Opened | None]:
        """The runs' directory, reached through no symlink and held open while many records are read from it;
        ``None`` when it cannot be (not there, or a link: then no record is read)."""
        try:
            with files.open_directory(self.root, below=self.project_dir) as root:
                yield root
        except OSError:
            yield None

    def _read(
        self, wanted: Callable[[str], bool], names: list[str] | None = None, root: files.Opened | None = None
    ) -> Iterator[tuple[str, RunRecord]]:
        """The readable records whose ``run.json`` path ``wanted`` accepts (of the directories ``names``, else of
        all), read from ``root`` (the runs' directory held open), else from the project directory."""
        prefix = str(self.root) + os.sep
        for name in self._names(root) if names is None else names:
            path = prefix + name + os.sep + "run.json"
            if not wanted(path):
                continue
            try:
                data = files.read_regular(Path(path), limit=MAX_RECORD, below=root or self.project_dir)
                yield path, RunRecord.model_validate_json(data)
            except (OSError, ValidationError, ValueError):
                continue

    def running(self) -> list[RunRecord]:
        """The records still ``running``. A finished record never changes again: the runs noted finished (in
        :data:`FINISHED_RUNS`) are not read at all, and any other finished record is parsed once per process and
        then only its stamp is kept (and it is noted, for the next process): a watch asks this every tick, and
        every ``runs`` command once, over thousands of records."""
        finished = self._finished()

        def maybe_running(path: str) -> bool:
            try:
                info = os.stat(path)
            except OSError:
                return False
            known = _FINISHED.get(path)
            return known is None or known != (info.st_ino, info.st_size, info.st_mtime_ns)

        found = []
        noted: list[str] = []
        with self._opened() as root:
            names = [] if root is None else [n for n in self._names(root) if n not in finished]
            read = [] if root is None else list(self._read(maybe_running, names, root))
        for path, record in read:
            if record.finished:
                noted.append(os.path.basename(os.path.dirname(path)))
                with contextlib.suppress(OSError):
                    info = os.stat(path)
                    _FINISHED[path] = (info.st_ino, info.st_size, info.st_mtime_ns)
            else:
                found.append(record)
        self._note_finished(noted)
        return found

    def _finished(self) -> set[str]:
        path = self.project_dir / STATE_DIR / FINISHED_RUNS
        try:
            data = files.read_regular(path, limit=MAX_FINISHED_LIST, below=self.project_dir)
        except OSError:
            return set()
        return set(data.decode("utf-8", errors="replace").split())

    def _note_finished(self, names: list[str]) -> None:
        """Add runs to :data:`FINISHED_RUNS`: one ``O_APPEND`` write, so that concurrent writers never tear a
        line. A run missing from it (a beflow killed between the two writes) is only read again, and noted then."""
        if not names or not self.root.is_dir():
            return
        with contextlib.suppress(OSError):
            data = "".join(f"{name}\n" for name in names).encode("utf-8")
            files.append(self.project_dir / STATE_DIR / FINISHED_RUNS, data, below=self.project_dir)

    def close_orphans(self, usage_of: Callable[[RunRecord], Usage | None] | None = None) -> list[RunRecord]:
        """Close the records of runs whose beflow was killed (still ``running``, their process gone): they end
        ``cancelled``, saying so, instead of looking alive for ever; with what their agent reported it used, as
        ``usage_of`` reads it back (from the transcript: :func:`beflow.agent.session.close_killed_runs`)."""
        closed = []
        for record in self.running():
            if not liveness.is_running(record.pid, record.pid_start):
                if usage_of is not None and record.usage is None:
                    record.usage = usage_of(record)
                record.close("cancelled", f"beflow (pid {record.pid}) was killed before the run finished")
                self.save(record)
                closed.append(record)
        return closed

    def get(self, run_id: str) -> RunRecord:
        """A record by id or unique id prefix; ``latest`` is the newest run."""
        ids = sorted(self._names())
        if not ids:
            raise NotFoundError(
                f"no runs yet in {self.project_dir}, so no run {excerpt(run_id)}",
                fix='`beflow --auto` runs every ready issue (`beflow issues new "TITLE"` files one); '
                "`beflow watch` keeps running them.",
            )
        if run_id == "latest":
            newest = self.records(limit=1)
            run_id = newest[0].id if newest else ids[-1]
        matches = [i for i in ids if i == run_id] or [i for i in ids if i.startswith(run_id)]
        if len(matches) != 1:
            if matches:
                more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
                raise NotFoundError(
                    f"run {excerpt(run_id)} is ambiguous: {', '.join(matches[:5])}{more}",
                    fix="Give more of the run's id (`beflow runs list` shows them).",
                )
            close = difflib.get_close_matches(run_id, ids, n=3, cutoff=0.4)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise NotFoundError(f"no run {excerpt(run_id)}{hint}", fix="`beflow runs list` shows the runs.")
        record = self.load(matches[0])
        record.progress = self.progress(record.id)  # fresher than run.json while the run is going
        return record

    def load(self, run_id: str) -> RunRecord:
        """The record of the run ``run_id`` exactly (no prefix, no ``latest``), as ``run.json`` holds it: read as
        :meth:`read` reads (``OSError``), parsed (``ValidationError``)."""
        return RunRecord.model_validate_json(self.read(run_id, "run.json", limit=MAX_RECORD))


def _of(record: RunRecord, issues: Collection[str], ids: Collection[str]) -> bool:
    """Whether ``record`` is a run of one of ``issues`` (by key) or of ``ids`` (by the tracker's stable id)."""
    return record.issue in issues or (record.issue_id is not None and record.issue_id in ids)
