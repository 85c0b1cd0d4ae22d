"""The run operations: ``beflow runs ...`` and the MCP tools read run records through these
(docs/architecture.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from beflow import acpx
from beflow.config import Project
from beflow.errors import NotFoundError
from beflow.operations import Context, Input, operation
from beflow.records import RunRecord, RunStore
from beflow.trackers.base import normalize_key


def store(context: Context) -> RunStore:
    """The project's run records, with those of killed beflows closed first."""

    def open_store(project: Project) -> RunStore:
        runs = RunStore(project.directory)
        runs.close_orphans()
        return runs

    result: RunStore = context.service("runs", open_store)
    return result


class ListRuns(Input):
    issue: str | None = Field(default=None, max_length=100, description="Only runs of this issue.")
    limit: int = Field(default=50, ge=1, le=1000, description="At most this many, newest first.")


class RunId(Input):
    id: str = Field(min_length=1, max_length=200, description="A run id (or a unique prefix, or 'latest').")


class RunLogs(BaseModel):
    record: RunRecord
    lines: list[acpx.LogLine]
    stderr: str


@operation(
    "run.list",
    title="List runs",
    description="The runs beflow recorded in this project, newest first, with issue, outcome and branch. Cheap.",
    safety="read",
    issue_field="issue",
)
def list_runs(context: Context, payload: ListRuns) -> list[RunRecord]:
    records = store(context).records()
    if payload.issue is not None:
        records = [r for r in records if r.issue == normalize_key(payload.issue)]
    return records[: payload.limit]


@operation(
    "run.show",
    title="Show a run",
    description="One run's record: issue, outcome and why, branch, commit, changed files, the agent's final "
    "message. Cheap.",
    safety="read",
    agent=True,
)
def show_run(context: Context, payload: RunId) -> RunRecord:
    return _readable(context, store(context).get(payload.id), payload.id)


def _readable(context: Context, record: RunRecord, asked: str) -> RunRecord:
    """``record``, unless the caller is bound to another issue (then it does not exist for them)."""
    if context.bound_issue is not None and record.issue != normalize_key(context.bound_issue):
        raise NotFoundError(f"no run {asked!r} for issue {context.bound_issue}")
    return record


@operation(
    "run.logs",
    title="Read a run's transcript",
    description="The acpx transcript of one run as readable lines (messages, tool calls, permission requests).",
    safety="read",
)
def run_logs(context: Context, payload: RunId) -> RunLogs:
    runs = store(context)
    record = _readable(context, runs.get(payload.id), payload.id)
    directory = runs.directory(record.id)
    transcript = directory / "transcript.jsonl"
    lines = transcript.read_text(encoding="utf-8", errors="replace").splitlines() if transcript.exists() else []
    stderr_path = directory / "stderr.log"
    stderr = stderr_path.read_text(encoding="utf-8", errors="replace") if stderr_path.exists() else ""
    return RunLogs(record=record, lines=acpx.readable(lines), stderr=stderr)
