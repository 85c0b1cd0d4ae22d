"""What every mode shares — ``--auto``, ``watch``, ``--attend``, ``--open``: the request, the events, the prompt,
the run record and how the tracker is told.

:mod:`beflow.runner` (the unattended run in a worktree) and :mod:`beflow.modes` (the supervised ones in the
checkout) build on these, so that a run reads, records and reports the same way in every mode.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from beflow import interrupts, prompt
from beflow.config import Project
from beflow.errors import BeflowError
from beflow.records import DONE_OUTCOMES, Mode, Outcome, RunRecord, RunStore, now
from beflow.trackers import Issue, Status, Tracker


@dataclass(frozen=True)
class RunEvent:
    """Progress of a run, for the terminal view and for ``--json`` event streams."""

    type: str  # started, activity, notice, finished
    run_id: str
    issue: str
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.type, "run": self.run_id, "issue": self.issue, "time": self.time, **self.data}


EventSink = Callable[[RunEvent], None]


def safe_sink(sink: EventSink | None) -> EventSink:
    """``sink``, made harmless: a display that fails (``beflow --auto --json | head``) is dropped, and the run goes
    on; nothing a display does may break a run."""
    state = {"sink": sink}

    def emit(event: RunEvent) -> None:
        target = state["sink"]
        if target is None:
            return
        try:
            target(event)
        except Exception:
            state["sink"] = None

    return emit


@dataclass
class RunRequest:
    """What to run and how the tracker is left afterwards."""

    key: str
    mode: Mode = "auto"
    attempt: int = 1
    #: Whether a failure is the last word (``failed`` on the tracker) or the dispatcher will retry (``ready``).
    final: bool = True
    #: The issue was picked because it was ready (watch, ``--auto`` without keys): once claimed, it must still be,
    #: or another beflow ran it meanwhile and this run is skipped.
    only_if_ready: bool = False
    owner: str = field(default_factory=lambda: f"beflow {socket.gethostname()}:{os.getpid()}")


def _prompt_variables(issue: Issue, request: RunRequest, branch: str, run_id: str) -> dict[str, Any]:
    comments = [{"author": c.author, "created": c.created.isoformat(), "body": c.text} for c in issue.comments]
    return {
        "issue": {
            "key": issue.key,
            "title": issue.title,
            "body": issue.body,
            "labels": list(issue.labels),
            "url": issue.url,
            "comments": comments,
        },
        "attempt": request.attempt,
        "branch": branch,
        "run_id": run_id,
        "mode": request.mode,
    }


# -- what every mode shares (``--auto``, ``watch``, ``--attend``, ``--open``): the prompt, the record, the tracker --


def render_prompt(project: Project, issue: Issue, request: RunRequest, *, branch: str, run_id: str) -> str:
    """The prompt of one run, from the configured template and the same variables in every mode."""
    return prompt.render(project.config.prompt, project.directory, _prompt_variables(issue, request, branch, run_id))


def new_record(project: Project, issue: Issue, request: RunRequest, *, run_id: str, branch: str | None) -> RunRecord:
    """A run record in the state ``running``; ``branch`` is where the run commits (None: it does not)."""
    return RunRecord(
        id=run_id,
        issue=issue.key,
        title=issue.title,
        mode=request.mode,
        agent=project.config.agent_label(),
        attempt=request.attempt,
        branch=branch,
        started_at=now(),
    )


def move_to_in_progress(tracker: Tracker, issue: Issue, note: str | None = None) -> None:
    """The tracker says a run works on the issue (through ``ready`` when it cannot go there directly)."""
    if issue.status in (Status.OPEN, Status.FAILED, Status.DONE):
        tracker.set_status(issue.key, Status.READY, author="beflow")
    tracker.set_status(issue.key, Status.IN_PROGRESS, note=note, author="beflow")


def close_record(store: RunStore, record: RunRecord, outcome: Outcome, reason: str) -> None:
    """Give the record its outcome, end time and duration, and save it."""
    record.close(outcome, reason)
    store.save(record)


def status_after(outcome: Outcome, *, retry: bool = False) -> Status:
    """Where a run leaves its issue: ``review`` when it finished, ``ready`` when cancelled or to be retried,
    else ``failed``."""
    if outcome in DONE_OUTCOMES:
        return Status.REVIEW
    if outcome == "cancelled" or retry:
        return Status.READY
    return Status.FAILED


def leave_issue(tracker: Tracker, key: str, status: Status, note: str | None) -> bool:
    """Move the issue on from ``in_progress`` with ``note`` as a comment; False (nothing done) when someone moved it
    by hand during the run (closed it, say) — theirs is the last word — or it cannot be read any more (deleted,
    broken by a hand edit): the run record still says how the run ended."""
    try:
        if tracker.get(key).status != Status.IN_PROGRESS:
            return False
        tracker.set_status(key, status, note=note, author="beflow")
    except BeflowError:  # moved between the look and the write, or unreadable
        return False
    return True


def summary(record: RunRecord) -> str:
    """The comment a finished run leaves on its issue."""
    lines = [f"beflow run `{record.id}`: **{record.outcome}** — {record.stop_reason}"]
    lines.append(f"- agent: {record.agent}, attempt {record.attempt}, {record.duration or 0:.1f} s")
    if record.branch:
        lines.append(f"- branch: `{record.branch}`" + (f", commit `{record.commit[:12]}`" if record.commit else ""))
    if record.checkout:
        lines.append(f"- {record.mode} session in the checkout `{record.checkout}`; nothing was committed")
    if record.changed_files:
        lines.append(f"- files changed ({len(record.changed_files)}): {_file_list(record.changed_files)}")
    if record.dirty_before:
        lines.append(
            f"- uncommitted before the run and left as they were ({len(record.dirty_before)}): "
            + _file_list(record.dirty_before)
        )
    if record.mcp_servers:
        lines.append(f"- MCP servers: {', '.join(record.mcp_servers)}")
    if record.worktree_kept:
        lines.append(f"- worktree kept at `{record.worktree}`")
    if record.final_message:
        lines.append("")
        lines.append("> " + "\n> ".join(record.final_message.strip().splitlines()[:20]))
    return "\n".join(lines)


def _file_list(lines: list[str], limit: int = 10) -> str:
    shown = ", ".join(f"`{line.split(chr(9))[-1]}`" for line in lines[:limit])
    return shown + (f" and {len(lines) - limit} more" if len(lines) > limit else "")


def cancel_reason(known: str | None = None) -> str:
    """Why a run is being cancelled: what the canceller said, else the signal, else beflow itself."""
    return known or f"cancelled by {interrupts.state.signal_name or 'beflow'}"


def refuse_closed(issue: Issue) -> None:
    """A closed issue is not run in any mode: reopen it first."""
    if issue.status == Status.CLOSED:
        raise BeflowError(f"issue {issue.key} is closed", fix=f"beflow issues reopen {issue.key}")


def settle_orphans(tracker: Tracker, store: RunStore) -> list[str]:
    """Issues left ``in_progress`` by a run that finished its work but could not tell the tracker (the issue file
    was unreadable at that moment): they get the status and comment the run would have given them, instead of
    being run again. Runs that did not finish are left to the tracker's requeue."""
    settled: list[str] = []
    orphaned = tracker.orphaned()
    if not orphaned:
        return settled
    records = store.list()
    for issue in orphaned:
        latest = next((r for r in records if r.issue == issue.key), None)
        if latest is None or latest.outcome not in DONE_OUTCOMES:
            continue
        try:
            claim = tracker.claim(issue.key, owner="beflow (settling a finished run)")
        except BeflowError:
            continue  # a run has it now
        with claim:
            if leave_issue(tracker, issue.key, status_after(latest.outcome), summary(latest)):
                settled.append(issue.key)
    return settled
