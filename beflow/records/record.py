"""Run records: ``.beflow/runs/<run-id>/`` in the project directory (docs/runs.md).

Each run directory holds ``run.json`` (the :class:`RunRecord`), ``prompt.md``, the acpx transcript
(``transcript.jsonl``, one acpx JSON event a line), ``stderr.log``, ``hooks/<name>.log`` and ``progress.jsonl`` (the
progress lines the agent reported through beflow's MCP server, one JSON object a line). No secret value is ever
written here: MCP servers are recorded by name only.

An agent that runs without the sandbox can write the project's ``.beflow/runs/`` too: every file of a record is
opened below the project directory through no symlink, regular files only, never waited on, and read within a cap
(:mod:`beflow.system.files`), so what it puts there is refused rather than followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import difflib
import json
import os
import re
import secrets
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticSerializationError

from beflow.errors import NotFoundError, excerpt
from beflow.guardrails import Usage
from beflow.paths import STATE_DIR, slug, state_dir
from beflow.system import files, liveness
from beflow.system.files import atomic_write

Outcome = Literal["running", "succeeded", "no_changes", "failed", "timeout", "stalled", "over_budget", "cancelled"]
#: Outcomes of runs that did what they were asked (a finished run that changed nothing included).
DONE_OUTCOMES = frozenset({"succeeded", "no_changes"})
#: Outcomes a command reports with exit code 1.
FAILED_OUTCOMES = frozenset({"failed", "timeout", "stalled", "over_budget", "cancelled"})
Mode = Literal["auto", "watch", "attend", "open"]

#: The file of a run's progress lines: appended to by ``run.progress`` (in the run's process, for beflow's own
#: server in it, through the run's channel), apart from ``run.json`` so that a line never races the run's writes.
PROGRESS_FILE = "progress.jsonl"
#: The longest progress line, in characters: a status line, not a report.
MAX_PROGRESS = 300
#: How many of the latest progress lines a record shows (the file keeps them all).
SHOWN_PROGRESS = 50
#: Bytes of the end of the progress file read for them: 50 lines of 300 characters, JSON-escaped, fit in it.
PROGRESS_TAIL = 1 << 20
#: The largest ``run.json`` read: a record beyond it is taken for a damaged one (an agent's, not beflow's).
MAX_RECORD = 64 << 20
#: The most of a file of the record rewritten masked (``prompt.md``, ``progress.jsonl``): its end, beyond.
MAX_MASKED = 64 << 20
#: The largest list of finished runs read (a cache: beyond, every record is read).
MAX_FINISHED_LIST = 16 << 20
#: Bytes kept of acpx's transcript and of its stderr; beyond, a note says what was left out.
TRANSCRIPT_LIMIT = 64 << 20
STDERR_LIMIT = 4 << 20
#: Room for the lines a capped log ends with (the note of what was left out, a hook's ending): a log read back is
#: at most its limit and this.
LOG_NOTE = 4096


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def clean_text(text: str) -> str:
    """``text`` as every encoder takes it: a lone surrogate (a JSON ``\\ud800`` escape in an agent's message, an
    undecodable byte of a file name) becomes U+FFFD; everything else is kept."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _cleaned(value: object) -> object:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_cleaned(item) for item in value]
    if isinstance(value, dict):
        return {_cleaned(key): _cleaned(item) for key, item in value.items()}
    return value


class ProgressNote(BaseModel):
    """One progress line an agent reported during its run."""

    time: dt.datetime
    text: str
    actor: str = "agent"


class Consumed(BaseModel):
    """A piece of feedback a review round answered: who gave it, where, and the start of what they said."""

    id: str
    kind: str
    author: str
    url: str | None = None
    path: str | None = None
    line: int | None = None
    #: The first :data:`CONSUMED_TEXT` characters of its text.
    excerpt: str = ""


class LeftOut(BaseModel):
    """A piece of feedback a round left out, and why (not someone allowed to give feedback, beflow's own...)."""

    id: str
    author: str
    why: str


#: Characters of a piece of feedback a record keeps (the prompt has it whole).
CONSUMED_TEXT = 300


class RunRecord(BaseModel):
    """``run.json``: what ran, where, and how it ended."""

    # Every value set is cleaned of what no encoder takes: a record must always be writable (a record that cannot
    # be saved stays `running`, and its issue is run again).
    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    id: str
    issue: str
    title: str = ""
    mode: Mode
    agent: str
    attempt: int = 1
    #: 0: the issue's first run (and its retries); 1, 2...: a review round, continuing the branch with feedback.
    round: int = 0
    #: The feedback the round answered (its ids are on the round's commit too, as ``Beflow-Feedback:`` trailers).
    feedback: list[Consumed] = Field(default_factory=list)
    #: Feedback the round left out, and why.
    feedback_ignored: list[LeftOut] = Field(default_factory=list)
    branch: str | None = None
    base_commit: str | None = None
    commit: str | None = None
    worktree: str | None = None
    worktree_kept: bool = False
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    duration: float | None = None
    outcome: Outcome = "running"
    stop_reason: str | None = None
    #: A failure no retry can fix (bad configuration, a prompt that does not render, an agent not installed).
    permanent: bool = False
    exit_code: int | None = None
    pid: int = Field(default_factory=os.getpid)
    #: With ``pid``, which process ran it (a reused pid is not mistaken for it): its start, seconds since the epoch.
    pid_start: float | None = Field(default_factory=lambda: liveness.start_time(os.getpid()))
    mcp_servers: list[str] = Field(default_factory=list)
    mcp_shadowed: list[str] = Field(default_factory=list)
    changed_files: list[str] = Field(default_factory=list)
    final_message: str | None = None
    session: str | None = None  # the agent's ACP session id (a retry resumes it where acpx can)
    resumed_session: str | None = None  # the earlier session this run resumed
    resume_note: str | None = None  # why a retry did not resume, when it did not
    restored: list[str] = Field(default_factory=list)
    #: Files of the repository's git directory the agent changed (``config``, ``hooks/pre-push``...), put back as
    #: they were; a run with any is not published.
    git_restored: list[str] = Field(default_factory=list)
    #: Refs that moved while the agent ran (not by beflow) and that the run does not build on: named, not failed.
    refs_moved: list[str] = Field(default_factory=list)
    #: ``--attend`` and ``--open``: the checkout the session ran in (no worktree, no commit).
    checkout: str | None = None
    #: ``--attend`` and ``--open``: files that were uncommitted before the session and that it left as they were
    #: (``STATUS\tpath``, like ``changed_files``); never attributed to the agent.
    dirty_before: list[str] = Field(default_factory=list)
    #: ``--open``: the native client that was started.
    client: str | None = None
    #: What the agent reported as it went (beflow's MCP server, ``run.progress``), oldest first; the latest
    #: :data:`SHOWN_PROGRESS` lines.
    progress: list[ProgressNote] = Field(default_factory=list)
    #: ``after_run.pull_request``: the pull request the run opened or updated.
    pull_request: str | None = None
    #: Why the tracker was not told how the run ended (GitHub failing past every retry), when it was not: this
    #: record keeps the last word, and the next beflow command or watch tick settles what it can.
    unreported: str | None = None
    #: What the agent reported it used (tokens, context, cost): None when it reported nothing (docs/runs.md).
    usage: Usage | None = None
    #: A stalled run: how long the agent had been silent (seconds) and what it was doing last.
    silent_for: float | None = None
    last_activity: str | None = None
    #: The cost budgets this run's agent did not let beflow hold (it reported no cost), said in a sentence.
    unheld: str | None = None
    #: ``sandbox.enabled``: the agent ran in the sandbox; the connections its proxy refused, by host.
    sandboxed: bool = False
    blocked: dict[str, int] = Field(default_factory=dict)

    @field_validator("*", mode="before")
    @classmethod
    def _clean(cls, value: object) -> object:
        return _cleaned(value)

    def to_json(self) -> str:
        """``run.json``'s text; what was appended in place (a list) is cleaned here too."""
        try:
            return self.model_dump_json(indent=2)
        except PydanticSerializationError:
            return json.dumps(_cleaned(self.model_dump(mode="json")), indent=2, ensure_ascii=False)

    def close(self, outcome: Outcome, reason: str) -> None:
        """The run ended: its outcome, why, the end time and the duration."""
        self.outcome = outcome
        self.stop_reason = reason
        self.finished_at = now()
        self.duration = round((self.finished_at - self.started_at).total_seconds(), 3)

    @property
    def finished(self) -> bool:
        return self.outcome != "running"


class CappedLog:
    """A log of a run (a hook's output, acpx's transcript and stderr) written line by line as it arrives, up to
    ``limit`` bytes; what comes beyond is counted, not kept, and a note at the end says how much was left out.
    Each line goes through ``redact`` first (secret values masked). The file is opened below the trusted directory
    ``below`` (:func:`beflow.system.files.open_append`): a symlink on the way or in its place, or a FIFO, raises
    :class:`~beflow.system.files.NotRegularError` and nothing is written."""

    def __init__(self, path: Path, limit: int, redact: Callable[[bytes], bytes] | None = None, *, below: Path) -> None:
        self.path = path
        self.limit = limit
        self.redact = redact or (lambda data: data)
        self.written = 0
        self.dropped = 0
        self._handle = files.open_append(path, below=below)
        self._flushing = False

    def write(self, data: bytes) -> None:
        """Raw bytes (a header, a footer), unredacted, within the limit."""
        room = self.limit - self.written
        if len(data) > room:
            self.dropped += len(data) - max(room, 0)
            data = data[: max(room, 0)]
        if data:
            self._handle.write(data)
            self.written += len(data)
            self._flush_soon()

    def _flush_soon(self) -> None:
        """On the event loop, once the lines that arrived together are written (the next turn of the loop): one
        flush for the hundreds of lines a read of acpx's output brings, not one each; elsewhere, at once."""
        if self._flushing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._handle.flush()
            return
        self._flushing = True
        loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        if not self._handle.closed:
            self._handle.flush()

    def lines(self, lines: bytes) -> None:
        """Lines of output joined by their newlines, as :data:`beflow.system.proc.LinesHandler` takes them: each kept
        whole,
        or left out with everything after it."""
        if self.dropped:
            self.dropped += len(lines) + 1
            return
        data = self.redact(lines) + b"\n"
        room = self.limit - self.written
        if len(data) > room:  # whole lines up to the limit, then nothing more
            cut = data.rfind(b"\n", 0, room) + 1
            self.dropped += len(data) - cut
            data = data[:cut]
        self.write(data)

    def close(self, footer: bytes = b"") -> None:
        if self.dropped:
            self._handle.write(
                f"[beflow: output beyond {self.limit} bytes was not kept: {self.dropped} more bytes]\n".encode()
            )
        self._handle.write(footer)
        self._handle.close()

    def __enter__(self) -> CappedLog:
        return self

    def __exit__(self, *_exc: object) -> None:
        if not self._handle.closed:
            self.close()


def new_run_id(issue_key: str) -> str:
    """Sortable by start time, readable, unique: ``20261129-221530-<key>-<4 hex>``."""
    return f"{now():%Y%m%d-%H%M%S}-{slug(issue_key, max_length=24)}-{secrets.token_hex(2)}"


#: A run's directory name: ``<start, to the second>-<its issue's key, as a slug>-<4 hex>`` (:func:`new_run_id`).
_RUN_ID = re.compile(r"^(?P<start>\d{8}-\d{6})-(?P<key>.+)-[0-9a-f]{4}$")
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


#: The fields of a record that hold words (the agent's, a tool's, an error's) rather than names beflow chose: the
#: ones secrets are masked in. Paths, ids and commits are left alone: a secret value that happens to be a path
#: (``"DATA_DIR": "/home/me/app"``) must not turn the record's own paths into masks.
WORDS_FIELDS = (
    "title",
    "stop_reason",
    "final_message",
    "resume_note",
    "restored",
    "changed_files",
    "dirty_before",
    "last_activity",
)


def masked_record(record: RunRecord, mask: Callable[[str], str]) -> RunRecord:
    """A copy of ``record`` with :data:`WORDS_FIELDS`, the progress lines and the feedback's words masked."""
    update: dict[str, object] = {}
    for name in WORDS_FIELDS:
        value = getattr(record, name)
        if isinstance(value, str):
            update[name] = mask(value)
        elif isinstance(value, list):
            update[name] = [mask(item) for item in value]
    update["progress"] = [note.model_copy(update={"text": mask(note.text)}) for note in record.progress]
    update["feedback"] = [piece.model_copy(update={"excerpt": mask(piece.excerpt)}) for piece in record.feedback]
    return record.model_copy(update=update)


def runs_root(project_dir: Path) -> Path:
    """Where the run records of the project in ``project_dir`` are (a sandbox hides it from its agent)."""
    return project_dir / STATE_DIR / "runs"


class RunStore:
    """The run records of one project."""

    def __init__(self, project_dir: Path, mask: Callable[[str], str] | None = None) -> None:
        self.project_dir = project_dir
        self.root = runs_root(project_dir)
        #: Masks secret values in what this store writes and reads back (a run's session sets its redactor).
        self.mask: Callable[[str], str] = mask or (lambda text: text)

    def directory(self, run_id: str) -> Path:
        return self.root / run_id

    def file(self, run_id: str, name: str) -> Path:
        """The path of the file ``name`` of a run's record (``hooks/<hook>.log`` too); open it below
        :attr:`project_dir`, as :meth:`read`, :meth:`tail` and :meth:`log` do."""
        return self.directory(run_id) / name

    def read(self, run_id: str, name: str, *, limit: int) -> bytes:
        """A file of the run's record, through no symlink, regular only, at most ``limit`` bytes
        (:class:`~beflow.system.files.NotRegularError`, :class:`~beflow.system.files.FileTooLarge`,
        ``FileNotFoundError``)."""
        return files.read_regular(self.file(run_id, name), limit=limit, below=self.project_dir)

    def tail(self, run_id: str, name: str, *, limit: int) -> bytes:
        """The whole lines among the last ``limit`` bytes of a file of the run's record, opened as :meth:`read`
        opens it."""
        data, cut = files.read_tail(self.file(run_id, name), below=self.project_dir, limit=limit)
        return data[data.find(b"\n") + 1 :] if cut else data

    def log_text(self, run_id: str, name: str, limit: int) -> str:
        """A log of the run's record (written up to ``limit`` bytes and a note) as text: a missing one is empty,
        and one that is not the regular file beflow wrote (an agent without the sandbox can write the record) is
        named, never read."""
        try:
            data = self.read(run_id, name, limit=limit + LOG_NOTE)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            return f"[beflow: {name} was not read: {exc}]\n"
        return data.decode("utf-8", errors="replace")

    def log(self, run_id: str, name: str, limit: int, redact: Callable[[bytes], bytes] | None = None) -> CappedLog:
        """A :class:`CappedLog` of the run's record (``transcript.jsonl``, ``hooks/after_run.log``)."""
        return CappedLog(self.file(run_id, name), limit, redact, below=self.project_dir)

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

    def add_progress(self, run_id: str, note: ProgressNote) -> None:
        """Append one progress line: a single ``O_APPEND`` write, so that concurrent writers never tear a line."""
        line = (self.mask(note.model_dump_json()) + "\n").encode("utf-8")
        files.append(self.file(run_id, PROGRESS_FILE), line, below=self.project_dir)

    def mask_files(self, run_id: str, names: Collection[str] = (PROGRESS_FILE, "prompt.md")) -> None:
        """Rewrite the run's progress file and prompt with secret values masked, once the agent is done with them:
        the progress lines come from another process, which may not know every secret this one holds, and the
        prompt was written before the run's servers were known. Of a file beyond :data:`MAX_MASKED` bytes (an
        agent's doing), the whole lines of its end are kept."""
        for name in names:
            try:
                data, cut = files.read_tail(self.file(run_id, name), below=self.project_dir, limit=MAX_MASKED)
            except OSError:
                continue
            if cut:
                data = data[data.find(b"\n") + 1 :]
            masked = self.mask(data.decode("utf-8", "replace"))
            if cut or masked.encode("utf-8") != data:
                atomic_write(self.file(run_id, name), masked, durable=False, below=self.project_dir)

    def progress(self, run_id: str) -> list[ProgressNote]:
        """The run's latest progress lines, oldest first (lines that do not parse are skipped; a progress file that
        is not a regular file of the record gives none)."""
        try:
            lines = self.tail(run_id, PROGRESS_FILE, limit=PROGRESS_TAIL).splitlines()
        except OSError:
            return []
        notes = []
        for line in lines[-SHOWN_PROGRESS:]:
            try:
                notes.append(ProgressNote.model_validate_json(self.mask(line.decode("utf-8", "replace"))))
            except ValidationError:
                continue
        return notes

    def write(self, run_id: str, name: str, data: str | bytes) -> Path:
        """An artifact of the run (hook output, stderr)."""
        path = self.file(run_id, name)
        atomic_write(path, data, durable=False, below=self.project_dir)
        return path

    def resumable_session(self, record: RunRecord) -> str | None:
        """The ACP session of ``record``'s issue's latest earlier run with the same agent, if it recorded one (a
        retry and a review round resume it)."""
        for earlier in self.records([record.issue]):
            if earlier.issue == record.issue and earlier.id != record.id and earlier.agent == record.agent:
                return earlier.session
        return None

    def records(self, issues: Collection[str] | None = None, limit: int | None = None) -> list[RunRecord]:
        """The readable records (of ``issues`` only, when given), newest first; with ``limit``, the newest ``limit``.

        Run ids start with their start time and carry their issue's key (:func:`new_run_id`), so a question about
        a few issues or the latest runs reads those records, not every record of the project: directories are
        read newest first by name, down to :data:`ID_CLOCK_SLACK` before the oldest one kept. Directories not named
        like a run id are always read."""
        with self._opened() as root:
            if root is None:
                return []
            found = self._newest(root, issues, limit)
        if issues is not None:
            found = [record for record in found if record.issue in issues]
        # By start time, not by id: ids tell seconds only, and two runs can start within the same second.
        found.sort(key=lambda r: (r.started_at, r.id), reverse=True)
        return found if limit is None else found[:limit]

    def _newest(self, root: files.Opened, issues: Collection[str] | None, limit: int | None) -> list[RunRecord]:
        """:meth:`records`' reading, from the runs' directory held open: not in order yet."""
        tags = None if issues is None else {slug(key, max_length=24) for key in issues}
        timed: list[tuple[str, str]] = []  # (start second, name)
        untimed: list[str] = []
        for name in self._names(root):
            match = _RUN_ID.match(name)
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
                if issues is None or record.issue in issues:
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
            names = [n for n in self._names(root) if (m := _RUN_ID.match(n)) is None or m.group("start") >= cutoff]
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

    def close_orphans(self) -> list[RunRecord]:
        """Close the records of runs whose beflow was killed (still ``running``, their process gone): they end
        ``cancelled``, saying so, instead of looking alive for ever."""
        closed = []
        for record in self.running():
            if not liveness.is_running(record.pid, record.pid_start):
                record.close("cancelled", f"beflow (pid {record.pid}) was killed before the run finished")
                self.save(record)
                closed.append(record)
        return closed

    def get(self, run_id: str) -> RunRecord:
        """A record by id or unique id prefix; ``latest`` is the newest run."""
        ids = sorted(self._names())
        if run_id == "latest" and ids:
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
