"""The run record: ``run.json`` of ``.beflow/runs/<run-id>/`` (docs/runs.md), the model and its parts.

What a run's directory holds besides, and how it is read and written, is :mod:`beflow.records.logs` (the files of a
record) and :mod:`beflow.records.store` (the records of a project). No secret value is ever written in a record:
MCP servers are recorded by name only, and :func:`masked_record` masks secret values in its words.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticSerializationError

from beflow.guardrails import Usage
from beflow.paths import slug
from beflow.system import liveness

Outcome = Literal[
    "running", "succeeded", "no_changes", "asked", "failed", "timeout", "stalled", "over_budget", "cancelled"
]
#: Outcomes of runs that did what they were asked (a finished run that changed nothing included).
DONE_OUTCOMES = frozenset({"succeeded", "no_changes"})
#: Outcomes a command reports with exit code 1.
FAILED_OUTCOMES = frozenset({"failed", "timeout", "stalled", "over_budget", "cancelled"})
Mode = Literal["auto", "watch", "attend", "open"]
#: The longest progress line, in characters: a status line, not a report.
MAX_PROGRESS = 300
#: How many of the latest progress lines a record shows (the progress file keeps them all).
SHOWN_PROGRESS = 50


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


class PermissionAsk(BaseModel):
    """A permission request the run's policy left to a person (docs/questions.md#permissions): the tool call, as the
    agent described it (its words, masked), and what an ``allow once`` answer grants in the resumed turn."""

    tool_call: str | None = None
    title: str | None = None
    kind: str | None = None
    #: What the agent said the tool is given, as JSON, cut short.
    input: str | None = None
    #: The matcher an ``allow once`` answer gives acpx for the resumed turn (the request's title, whole); None when
    #: no matcher would name that request alone (no title, a bare word, a kind's name): it cannot be allowed once.
    grant: str | None = None


class Question(BaseModel):
    """What a run's agent asked a person (``issue.ask``): its turn ended there, the run ``asked`` and its issue
    ``blocked`` until a trusted person answers (docs/questions.md). The words are the agent's, masked."""

    text: str
    choices: list[str] = Field(default_factory=list)
    #: When it was put to people on the tracker: the answer is the first trusted comment from then on.
    asked: dt.datetime | None = None
    #: The permission request it is, when the run's policy left one to a person (not the agent's own question).
    permission: PermissionAsk | None = None


class Answer(BaseModel):
    """A person's answer to a run's question, that the next run of the issue resumes the agent's session with."""

    text: str
    author: str
    given: dt.datetime
    #: The run whose agent asked.
    run: str


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


class CheckResult(BaseModel):
    """One of ``attempts.judge.checks`` run on a candidate's branch (docs/runs.md#best-of-n)."""

    command: str
    passed: bool


class ReviewerChoice(BaseModel):
    """What best of N's reviewer agent answered (``candidate.choose``): the candidate it prefers, and why."""

    candidate: int = Field(ge=1)
    reason: str = Field(max_length=2000)


class CandidateRow(BaseModel):
    """One candidate of a best-of-N run, as the judge saw it: a line of the comparison table."""

    candidate: int
    run_id: str
    agent: str
    branch: str | None = None
    outcome: Outcome
    base_commit: str | None = None
    commit: str | None = None
    checks_passed: int = 0
    checks_total: int = 0
    #: Lines added plus removed on its branch (``git diff --numstat``); None: it committed nothing.
    lines_changed: int | None = None
    cost: float | None = None
    currency: str | None = None
    duration: float | None = None
    chosen: bool = False
    #: Where people see its branch on the code host, once pushed beside the chosen one's pull request.
    url: str | None = None
    #: Its branch was deleted once another was chosen (``attempts.keep`` off): nothing links to it.
    removed: bool = False

    @property
    def passes(self) -> bool:
        """Whether the judge may choose it: it succeeded, committed its work and passed a check (if there are any)."""
        committed = self.outcome == "succeeded" and self.commit is not None and self.lines_changed is not None
        return committed and (self.checks_total == 0 or self.checks_passed > 0)


class RunRecord(BaseModel):
    """``run.json``: what ran, where, and how it ended."""

    # Every value set is cleaned of what no encoder takes: a record must always be writable (a record that cannot
    # be saved stays `running`, and its issue is run again).
    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    id: str
    issue: str
    #: The tracker's stable id of the issue (:attr:`~beflow.trackers.issue.Issue.id`), when its key can change.
    issue_id: str | None = None
    title: str = ""
    mode: Mode
    agent: str
    #: The agent's model, when one was configured or chosen by the issue's label (acpx ``--model``).
    model: str | None = None
    #: The issue's labels that chose the agent or the model (``agent:claude``): none, the config's.
    chosen_by: list[str] = Field(default_factory=list)
    attempt: int = 1
    #: Best of N: which candidate this run is (1, 2...; 0: not a candidate), on ``beflow-attempts/<key>/c<N>``.
    candidate: int = 0
    #: A candidate's judge checks, in order, and the lines its branch changes (added plus removed).
    checks: list[CheckResult] = Field(default_factory=list)
    lines_changed: int | None = None
    #: The judged run of a best-of-N issue: its candidates side by side (the chosen one's work is its branch).
    candidates: list[CandidateRow] = Field(default_factory=list)
    #: Best of N's reviewer run: the candidates it may choose among (its answer is ``choice.json`` of its record).
    reviewing: list[int] = Field(default_factory=list)
    #: The judged run: what its reviewer chose and why, when it answered (the agent's words, masked).
    review: ReviewerChoice | None = None
    #: The judged run of a best-of-N issue: how many candidates it has (0: not a judged run).
    best_of: int = 0
    #: A candidate's or a reviewer's run: the judged run it belongs to.
    set_of: str | None = None
    #: The judged run that promoted a candidate a person chose (``attempts.confirm``): who chose it.
    decided_by: str | None = None
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
    #: The question the agent asked, ending its turn (the run ended ``asked``).
    question: Question | None = None
    #: The person's answer this run resumed the agent's session with (to the question of the run it names).
    answer: Answer | None = None

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


def new_run_id(issue_key: str) -> str:
    """Sortable by start time, readable, unique: ``20261129-221530-<key>-<4 hex>``."""
    return f"{now():%Y%m%d-%H%M%S}-{slug(issue_key, max_length=24)}-{secrets.token_hex(2)}"


#: A run's directory name: ``<start, to the second>-<its issue's key, as a slug>-<4 hex>`` (:func:`new_run_id`).
RUN_ID = re.compile(r"^(?P<start>\d{8}-\d{6})-(?P<key>.+)-[0-9a-f]{4}$")


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


def last_on_session(records: Iterable[RunRecord], session: str) -> Usage | None:
    """What the latest of ``records`` (newest first) on the ACP session ``session`` reported of the session's
    cost; None when none did. A run that resumes the session counts its cost from there."""
    for record in records:
        on_it = session in (record.session, record.resumed_session)
        if on_it and record.usage is not None and record.usage.cost is not None:
            return record.usage
    return None


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
