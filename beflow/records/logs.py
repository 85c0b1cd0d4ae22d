"""The files of a run's record besides ``run.json``: ``prompt.md``, the acpx transcript (``transcript.jsonl``, one
acpx JSON event a line), ``stderr.log``, ``hooks/<name>.log`` and ``progress.jsonl`` (the progress lines the agent
reported through beflow's MCP server, one JSON object a line).

An agent that runs without the sandbox can write the project's ``.beflow/runs/`` too: every file of a record is
opened below the project directory through no symlink, regular files only, never waited on, and read within a cap
(:mod:`beflow.system.files`), so what it puts there is refused rather than followed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from pathlib import Path

from pydantic import ValidationError

from beflow.paths import STATE_DIR
from beflow.records.record import SHOWN_PROGRESS, ProgressNote, ReviewerChoice
from beflow.system import files
from beflow.system.files import atomic_write

#: The file of a run's progress lines: appended to by ``run.progress`` (in the run's process, for beflow's own
#: server in it, through the run's channel), apart from ``run.json`` so that a line never races the run's writes.
PROGRESS_FILE = "progress.jsonl"
#: Best of N's reviewer's answer (``candidate.choose``), in its run's record.
CHOICE_FILE = "choice.json"
#: The largest answer read back (the reason is at most 2000 characters).
MAX_CHOICE = 64 << 10
#: Bytes of the end of the progress file read for them: 50 lines of 300 characters, JSON-escaped, fit in it.
PROGRESS_TAIL = 1 << 20
#: The most of a file of the record rewritten masked (``prompt.md``, ``progress.jsonl``): its end, beyond.
MAX_MASKED = 64 << 20
#: Bytes kept of acpx's transcript and of its stderr; beyond, a note says what was left out.
TRANSCRIPT_LIMIT = 64 << 20
STDERR_LIMIT = 4 << 20
#: Room for the lines a capped log ends with (the note of what was left out, a hook's ending): a log read back is
#: at most its limit and this.
LOG_NOTE = 4096


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


def runs_root(project_dir: Path) -> Path:
    """Where the run records of the project in ``project_dir`` are (a sandbox hides it from its agent)."""
    return project_dir / STATE_DIR / "runs"


class RunFiles:
    """The files of the run records of one project, each opened below the project directory
    (:mod:`beflow.system.files`); :class:`~beflow.records.store.RunStore` adds the records themselves."""

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

    def add_progress(self, run_id: str, note: ProgressNote) -> None:
        """Append one progress line: a single ``O_APPEND`` write, so that concurrent writers never tear a line."""
        line = (self.mask(note.model_dump_json()) + "\n").encode("utf-8")
        files.append(self.file(run_id, PROGRESS_FILE), line, below=self.project_dir)

    def write_choice(self, run_id: str, choice: ReviewerChoice) -> None:
        """The reviewer's answer, masked; a later answer replaces it."""
        text = self.mask(choice.model_dump_json()) + "\n"
        atomic_write(self.file(run_id, CHOICE_FILE), text, durable=False, below=self.project_dir)

    def read_choice(self, run_id: str) -> ReviewerChoice | None:
        """The reviewer's answer, if it gave one; a file that is not the regular one beflow wrote, or that does not
        parse (without the sandbox the agent can write the record), is none."""
        try:
            data = self.read(run_id, CHOICE_FILE, limit=MAX_CHOICE)
            return ReviewerChoice.model_validate_json(data)
        except (OSError, ValidationError):
            return None

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
