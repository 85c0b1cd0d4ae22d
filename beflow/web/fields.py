"""A run record as a person reads it on the run's page: each field under a name in words, times as times,
durations as durations, paths relative to the repository, long values elided (the whole value on demand).

The API keeps the record as it is (``/api/v1/runs/{id}``: the field names of ``run.json``); this is the page's
wording only."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from beflow.records.record import RunRecord

Kind = Literal["text", "moment", "duration", "path", "link", "list"]


@dataclass(frozen=True)
class Field:
    """One row of the record's table: its name in words, what kind of value it is, and the value."""

    name: str
    label: str
    kind: Kind
    value: object


#: The record's fields, in the order the page shows them, each with its words and its kind. A field the page does
#: not name here is shown under its own name (a field added to the record shows before anyone words it).
_WORDS: dict[str, tuple[str, Kind]] = {
    "id": ("run", "text"),
    "mode": ("mode", "text"),
    "agent": ("agent", "text"),
    "model": ("model", "text"),
    "chosen_by": ("agent chosen by", "list"),
    "attempt": ("attempt", "text"),
    "round": ("review round", "text"),
    "started_at": ("started", "moment"),
    "finished_at": ("finished", "moment"),
    "duration": ("took", "duration"),
    "stop_reason": ("why it stopped", "text"),
    "permanent": ("will not be retried", "text"),
    "exit_code": ("agent's exit code", "text"),
    "branch": ("branch", "text"),
    "base_commit": ("based on commit", "text"),
    "commit": ("commit", "text"),
    "pull_request": ("pull request", "link"),
    "changed_files": ("files changed", "list"),
    "worktree": ("worktree", "path"),
    "worktree_kept": ("worktree kept", "text"),
    "checkout": ("checkout", "path"),
    "session": ("agent session", "text"),
    "resumed_session": ("resumed session", "text"),
    "resume_note": ("why not resumed", "text"),
    "mcp_servers": ("MCP servers", "list"),
    "mcp_shadowed": ("MCP servers overridden", "list"),
    "sandboxed": ("sandboxed", "text"),
    "blocked": ("blocked by the sandbox", "text"),
    "silent_for": ("silent for", "duration"),
    "last_activity": ("last activity", "text"),
    "restored": ("files put back", "list"),
    "git_restored": ("git files put back", "list"),
    "refs_moved": ("refs moved meanwhile", "list"),
    "dirty_before": ("uncommitted before the run", "list"),
    "unreported": ("not told to the tracker", "text"),
    "unheld": ("claim let go", "text"),
    "client": ("started by", "text"),
    "pid": ("process", "text"),
    "pid_start": ("process started", "moment"),
}
#: Shown elsewhere on the page (the header, the outcome line, their own sections), or not a person's concern.
_ELSEWHERE = {"issue", "title", "outcome", "progress", "final_message", "usage", "feedback", "feedback_ignored"}


def record_fields(record: RunRecord, repository: Path) -> list[Field]:
    """The fields of ``record`` that say something (not unset, not empty, not false), in words, paths below
    ``repository`` relative to it."""
    values = record.model_dump(exclude=_ELSEWHERE)
    order = [name for name in _WORDS if name in values] + sorted(name for name in values if name not in _WORDS)
    shown = []
    for name in order:
        value = values[name]
        if value in (None, "", [], {}, False):
            continue
        label, kind = _WORDS.get(name, (name.replace("_", " "), "text"))
        if kind == "path":
            value = relative(str(value), repository)
        elif kind == "list":
            value = [relative(v, repository) if isinstance(v, str) else v for v in value]
        elif kind == "moment" and isinstance(value, dt.datetime):
            value = value.timestamp()
        elif name == "blocked" and isinstance(value, dict):
            value = ", ".join(f"{what}: {count}" for what, count in sorted(value.items()))
        elif isinstance(value, bool):
            value = "yes"
        shown.append(Field(name=name, label=label, kind=kind, value=value))
    return shown


def relative(path: str, repository: Path) -> str:
    """``path`` relative to the repository when it lies below it (``.beflow/worktrees/7``), else as it is."""
    try:
        inside = Path(path).relative_to(repository)
    except ValueError:
        return path
    return str(inside) if str(inside) != "." else "."
