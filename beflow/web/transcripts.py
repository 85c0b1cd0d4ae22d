"""A run's transcript as the server shows it: a lane's last lines (the live page) and a page of the readable
transcript (a run's page and ``/api/v1/runs/{id}/transcript``), file edits as unified diffs."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from beflow.agent import acpx
from beflow.errors import BeflowError
from beflow.system import files
from beflow.web import api
from beflow.web.lists import Call

if TYPE_CHECKING:
    from beflow.records.store import RunStore

#: Bytes of the end of a transcript a lane's tail is read from: these first, then at most TAIL_BYTES.
TAIL_FIRST = 8 * 1024
TAIL_BYTES = 64 * 1024
#: Lanes' tails kept between reads (one a lane; a few more while lanes change).
TAILS_KEPT = 64
TAIL_LINES = 8


class Transcripts:
    """The transcripts of the project's runs, read through its run store (``store``) and the registry
    (``call``, which finds a run by its id, ``latest`` or a prefix)."""

    def __init__(self, store: Callable[[], RunStore], call: Call) -> None:
        self.store = store
        self.call = call
        self._tails: dict[str, tuple[tuple[int, int], list[api.TranscriptLine]]] = {}

    def tail(self, run_id: str, worktree: str | None = None) -> list[api.TranscriptLine]:
        """The last readable lines of a run's transcript, read from its end only: its last few KiB first (its
        last lines are short messages and tool calls, most of the time), more only when they do not hold enough
        lines. A transcript that did not change since the last read is not read again (the live page reads the
        state after every event, each lane's tail with it). Paths in the run's ``worktree`` (read from its record
        when not given) and in the repository read as the repository's, as on the run's page."""
        runs = self.store()
        path = runs.file(run_id, "transcript.jsonl")
        try:  # (through no symlink, never a FIFO: an agent without the sandbox can write the record)
            with os.fdopen(files.open_regular(path, below=runs.project_dir), "rb") as file:
                stat = os.fstat(file.fileno())
                stamp = (stat.st_size, stat.st_mtime_ns)
                kept = self._tails.get(run_id)
                if kept is not None and kept[0] == stamp:
                    return kept[1]
                for size in (TAIL_FIRST, TAIL_BYTES):
                    file.seek(max(0, stat.st_size - size))
                    lines = file.read(size).decode("utf-8", errors="replace").splitlines()
                    if stat.st_size > size:
                        lines = lines[1:]  # the first is cut
                    shown = acpx.readable(lines)[-TAIL_LINES:]
                    if len(shown) >= TAIL_LINES or stat.st_size <= size:
                        break
        except OSError:
            return []
        if worktree is None:
            try:
                worktree = runs.get(run_id).worktree
            except (BeflowError, OSError, ValueError):
                worktree = None
        prefixes = _prefixes(worktree, runs.project_dir)
        tail = [api.TranscriptLine(kind=line.kind, text=_relative(line.text, prefixes)) for line in shown]
        if len(self._tails) >= TAILS_KEPT:
            self._tails.pop(next(iter(self._tails)))
        self._tails[run_id] = (stamp, tail)
        return tail

    def page(self, run_id: str, offset: int, limit: int) -> api.TranscriptPage:
        """A page of the readable transcript, file edits included as unified diffs (``diff`` lines)."""
        from beflow.records.logs import TRANSCRIPT_LIMIT
        from beflow.web import diffs

        record = self.call("run.show", {"id": run_id})
        raw = self.store().log_text(record.id, "transcript.jsonl", TRANSCRIPT_LIMIT).splitlines()
        prefixes = _prefixes(record.worktree, self.store().project_dir)
        lines = [
            api.TranscriptLine(kind=line.kind, text=_relative(line.text, prefixes))
            for line in acpx.readable(raw, diffs.reader())
        ]
        page = lines[offset : offset + limit]
        end = offset + len(page)
        return api.TranscriptPage(
            run=record.id, offset=offset, total=len(lines), lines=page, next=end if end < len(lines) else None
        )


def _prefixes(worktree: str | None, project: Path) -> list[str]:
    """What is cut from a path for it to read as the repository's: the run's worktree (its copy of the repository)
    and the repository itself — `src/app.py`, not the machine's whole path."""
    return [str(p).rstrip("/") + "/" for p in (worktree, project) if p]


def _relative(text: str, prefixes: list[str]) -> str:
    for prefix in prefixes:
        if prefix in text:  # (a path standing alone, not one inside a URL such as file:///…)
            text = re.sub(r"(?<![\w/:.~-])" + re.escape(prefix), "", text)
    return text
