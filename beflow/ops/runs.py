"""The run operations: ``beflow runs ...`` and the MCP tools read run records through these
(docs/architecture.md)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field

from beflow.agent import acpx
from beflow.agent.session import close_killed_runs, reported_usage
from beflow.config import Project
from beflow.errors import NotBoundError, NotFoundError, OutOfScopeError, excerpt
from beflow.guardrails import Usage
from beflow.ops.agent_words import agent_words
from beflow.ops.operations import Context, Input, Key, operation
from beflow.records.logs import STDERR_LIMIT, TRANSCRIPT_LIMIT
from beflow.records.record import MAX_PROGRESS, ProgressNote, ReviewerChoice, RunRecord
from beflow.records.store import RunStore
from beflow.trackers.issue import normalize_key


def store(context: Context) -> RunStore:
    """The project's run records, with those of killed beflows closed first."""

    def open_store(project: Project) -> RunStore:
        runs = RunStore(project.directory)
        close_killed_runs(runs)
        return runs

    found = context.cache.get("runs")
    if not isinstance(found, RunStore):
        found = context.cache["runs"] = open_store(context.project)
    return found


class ListRuns(Input):
    issue: Key | None = Field(default=None, max_length=100, description="Only runs of this issue.")
    limit: int = Field(default=50, ge=1, le=1000, description="At most this many, newest first.")
    offset: int = Field(default=0, ge=0, description="Skip this many of the newest first (a later page).")


class RunId(Input):
    id: str = Field(min_length=1, max_length=200, description="A run id (or a unique prefix, or 'latest').")


class RunLogs(BaseModel):
    record: RunRecord
    lines: list[acpx.LogLine]
    stderr: str


class RunList(BaseModel):
    runs: list[RunRecord]


class RunStatusQuery(Input):
    issue: Key | None = Field(
        default=None, max_length=100, description="Whose runs (default: the issue you work on, if any)."
    )
    limit: int = Field(default=10, ge=1, le=100, description="At most this many earlier runs, newest first.")


class RunSummary(BaseModel):
    id: str
    issue: str
    mode: str
    attempt: int
    outcome: str
    stop_reason: str | None
    started_at: dt.datetime
    duration: float | None
    branch: str | None
    commit: str | None
    changed_files: int
    progress: str | None = Field(description="The latest progress line the agent reported, if any.")
    usage: Usage | None = Field(
        default=None,
        description="What the agent reported the run used (tokens, cost and its currency), if it reported anything; "
        "for the run going on, the figures so far.",
    )

    @classmethod
    def of(cls, record: RunRecord, live: Usage | None = None) -> RunSummary:
        """``record``'s summary; ``live``: what a run still going reported so far (its record has it at the end)."""
        usage = record.usage if record.usage is not None else live
        return cls(
            id=record.id,
            issue=record.issue,
            mode=record.mode,
            attempt=record.attempt,
            outcome=record.outcome,
            stop_reason=record.stop_reason,
            started_at=record.started_at,
            duration=record.duration,
            branch=record.branch,
            commit=record.commit,
            changed_files=len(record.changed_files),
            progress=record.progress[-1].text if record.progress else None,
            usage=None if usage is None or usage.empty else usage,
        )


class RunStatus(BaseModel):
    current: RunSummary | None = Field(description="The run you are part of (None outside a run).")
    earlier: list[RunSummary] = Field(description="The issue's other runs, newest first.")


class ProgressReport(Input):
    text: str = Field(
        min_length=1, max_length=MAX_PROGRESS, description="One short line: what you are doing now, or what is done."
    )


class ProgressRecorded(BaseModel):
    run: str
    note: ProgressNote


@operation(
    "run.list",
    title="List runs",
    description="The runs beflow recorded in this project, newest first, with issue, outcome and branch. Cheap.",
    safety="read",
    issue_field="issue",
    category="runs",
    tags=("runs", "list"),
    whole="`beflow runs list --json`",
)
def list_runs(context: Context, payload: ListRuns) -> RunList:
    issues = None if payload.issue is None else [normalize_key(payload.issue)]
    found = store(context).records(issues, limit=payload.offset + payload.limit)
    return RunList(runs=found[payload.offset : payload.offset + payload.limit])


@operation(
    "run.show",
    title="Show a run",
    description="One run's record: issue, outcome and why, branch, commit, changed files, the agent's final "
    "message, progress lines. Call it for the details of one run that `run.status` listed. Cheap.",
    safety="read",
    agent=True,
    category="runs",
    tags=("runs", "read"),
    whole="`beflow runs show ID --json`",
)
def show_run(context: Context, payload: RunId) -> RunRecord:
    return _lookup(context, payload.id)


def _lookup(context: Context, asked: str) -> RunRecord:
    """The run ``asked`` names (an id, a unique prefix, ``latest``). A caller bound to an issue looks among that
    issue's runs only: another issue's runs do not exist for it, not even in what an error says."""
    runs = store(context)
    if context.bound_issue is None:
        return runs.get(asked)
    issue = normalize_key(context.bound_issue)
    mine = [record.id for record in runs.records([issue])]  # newest first
    if asked == "latest" and mine:
        return runs.get(mine[0])
    matches = [i for i in mine if i == asked] or [i for i in mine if i.startswith(asked)]
    if len(matches) == 1:
        return runs.get(matches[0])
    if matches:
        more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
        raise NotFoundError(
            f"run {excerpt(asked)} is ambiguous among issue {issue}'s runs: {', '.join(matches[:5])}{more}",
            fix="Give more of the run's id (`run_status` lists this issue's runs).",
        )
    raise NotFoundError(f"no run {excerpt(asked)} of issue {issue}", fix="`run_status` lists this issue's runs.")


@operation(
    "run.logs",
    title="Read a run's transcript",
    description="The acpx transcript of one run as readable lines (messages, tool calls, permission requests).",
    safety="read",
    category="runs",
    tags=("runs", "read", "logs"),
    whole="`beflow runs logs ID`",
)
def run_logs(context: Context, payload: RunId) -> RunLogs:
    runs = store(context)
    record = _lookup(context, payload.id)
    transcript = runs.log_text(record.id, "transcript.jsonl", TRANSCRIPT_LIMIT)
    stderr = runs.log_text(record.id, "stderr.log", STDERR_LIMIT)
    return RunLogs(record=record, lines=acpx.readable(transcript.splitlines()), stderr=stderr)


@operation(
    "run.status",
    title="Status of this run and earlier ones",
    description="Where your run stands and how the issue's earlier runs ended (outcome, why, branch, commit, latest "
    "progress, what each used). Call it at the start to learn from earlier attempts. Reads run records; cheap, "
    "always current.",
    safety="read",
    agent=True,
    issue_field="issue",
    category="runs",
    tags=("runs", "read", "status"),
)
def run_status(context: Context, payload: RunStatusQuery) -> RunStatus:
    runs = store(context)
    current = None
    if context.bound_run is not None:
        # The run's own channel hands over what its agent reported so far (beflow.mcpserver.channel).
        current = RunSummary.of(_lookup(context, context.bound_run), context.live_usage or _so_far(runs, context))
    issues = None if payload.issue is None else [normalize_key(payload.issue)]
    records = runs.records(issues, limit=payload.limit + 1)  # (one more: the current run is not an earlier one)
    if issues is not None and not records and context.bound_issue is None:
        context.open_tracker().get(issues[0])  # no runs of an issue that does not exist: not_found, not "none"
    earlier = [_summary(runs, r) for r in records if current is None or r.id != current.id]
    return RunStatus(current=current, earlier=earlier[: payload.limit])


def _summary(runs: RunStore, record: RunRecord) -> RunSummary:
    """A run's summary; one still going, from another session than its own, with its progress and usage so far
    (its record has them only at the end: they are in its progress file and transcript meanwhile)."""
    if record.finished:
        return RunSummary.of(record)
    record.progress = runs.progress(record.id)
    return RunSummary.of(record, _usage_so_far(runs, record))


def _so_far(runs: RunStore, context: Context) -> Usage | None:
    assert context.bound_run is not None
    return _usage_so_far(runs, _lookup(context, context.bound_run))


def _usage_so_far(runs: RunStore, record: RunRecord) -> Usage | None:
    """What the agent of a run still going reported so far, read from its transcript as the run reads it
    (:func:`beflow.agent.session.reported_usage`)."""
    if record.finished or record.usage is not None:
        return record.usage
    return reported_usage(runs, record)


@operation(
    "run.progress",
    title="Report progress",
    description="Report what you are doing in one short line (e.g. 'tests pass; updating the docs'). It shows at once "
    "in `beflow watch`, in `beflow runs show` and in the run record — not as a comment on the issue, so call it as "
    "often as is useful. Cheap.",
    safety="action",
    agent=True,
    category="runs",
    tags=("runs", "write", "progress"),
)
def report_progress(context: Context, payload: ProgressReport) -> ProgressRecorded:
    if context.bound_run is None:
        raise NotBoundError(
            "run.progress: this session is not part of a run, so there is nothing to report progress on",
            fix="Progress is for agents in a run (beflow starts its server with --run); comment on the issue instead.",
        )
    runs = store(context)
    record = _lookup(context, context.bound_run)
    text = agent_words(context, " ".join(payload.text.split()))  # the run's secrets masked (docs/safety.md)
    note = ProgressNote(time=dt.datetime.now(dt.UTC), text=text, actor=context.actor)
    runs.add_progress(record.id, note)
    return ProgressRecorded(run=record.id, note=note)


class CandidateChoice(Input):
    candidate: int = Field(ge=1, le=100, description="The number of the candidate you prefer (one the prompt lists).")
    reason: str = Field(min_length=1, max_length=2000, description="Why, in a few sentences.")


class CandidateChosen(BaseModel):
    run: str
    candidate: int


@operation(
    "candidate.choose",
    title="Choose the best candidate",
    description="Best of N's reviewer only: say which candidate's work you prefer, and why. Only the candidates your "
    "prompt lists may be chosen; calling it again replaces your answer. Cheap.",
    safety="action",
    agent=True,
    category="runs",
    tags=("runs", "write", "attempts"),
)
def choose_candidate(context: Context, payload: CandidateChoice) -> CandidateChosen:
    if context.bound_run is None:
        raise NotBoundError(
            "candidate.choose: this session is not part of a run, so there is no choice to make",
            fix="Only best of N's reviewer agent chooses (`beflow docs runs`, best of N).",
        )
    record = _lookup(context, context.bound_run)
    if not record.reviewing:
        raise OutOfScopeError(
            "candidate.choose: this run is not best of N's reviewer, so it chooses no candidate",
            fix="Only best of N's reviewer agent chooses (`beflow docs runs`, best of N).",
        )
    if payload.candidate not in record.reviewing:
        listed = ", ".join(map(str, record.reviewing))
        raise OutOfScopeError(
            f"candidate.choose: candidate {payload.candidate} is not one you may choose",
            fix=f"Choose one of {listed}: the candidates that passed the checks.",
        )
    reason = agent_words(context, payload.reason)  # the run's secrets masked (docs/safety.md)
    store(context).write_choice(record.id, ReviewerChoice(candidate=payload.candidate, reason=reason))
    return CandidateChosen(run=record.id, candidate=payload.candidate)
