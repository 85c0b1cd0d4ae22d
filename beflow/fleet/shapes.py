"""What crosses Temporal, and the names both sides agree on.

Everything here is stored in the Temporal service's database (workflow inputs, activity inputs and results,
heartbeats, queries): it carries keys, ids, outcomes and counts, never a token, an injected server value, a
prompt or a transcript. Records stay on the worker that ran the run, as under ``beflow watch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from beflow.config import Project, TemporalEngineSettings
from beflow.errors import ConfigError

#: The workflow type and the activity names (stable: a running workflow's history names them).
WORKFLOW = "beflow.issue"
CLAIM_LANE = "beflow.claim_lane"
RUN_ISSUE = "beflow.run_issue"
#: The signal that tells an issue's workflow of feedback on its work, and the query of its state.
FEEDBACK = "feedback"
STATE = "state"

#: The failure type of a run whose worker was stopped (SIGTERM, Ctrl-C): the workflow takes it up elsewhere.
WORKER_STOPPED = "WorkerStopped"

#: How many times a run is resumed on another worker after its worker went silent, before the workflow fails.
MAX_RESUMES = 5


@dataclass
class IssueStart:
    """A workflow's input: the issue, and the timeouts it runs with (fixed when it starts)."""

    key: str
    #: Seconds a run's worker may go unheard before the run is resumed elsewhere (``engine.heartbeat``).
    heartbeat: float
    #: Seconds one run may take at most (the config's ``timeout`` and a margin for delivery).
    run_timeout: float
    attempt: int = 1
    #: The review rounds run so far (a workflow continued as new after each round carries them on).
    round: int = 0
    #: Start by waiting for feedback: the issue's work is in review (a continued workflow).
    review: bool = False
    #: Ids of the feedback pieces a round was already started for (the rest of a signal is new).
    handled: list[str] = field(default_factory=list)
    #: Feedback heard but not yet answered when the workflow continued as new: carried over, with when it is due.
    pending: list[str] = field(default_factory=list)
    due: float = 0.0
    #: The latest run's id, outcome and worker, for the ``state`` query of a continued workflow.
    run_id: str | None = None
    outcome: str | None = None
    worker: str = ""
    #: The tracker's stable id of the issue (its runs under an earlier key are found by it: a moved issue).
    issue_id: str | None = None
    #: The issue is blocked on its agent's question and a person answered: its first run resumes that session
    #: (the worker reads the answer itself; it never crosses Temporal).
    answered: bool = False
    #: The review rounds that answered a failed check since the issue was last flagged (feedback.max_fix_rounds).
    fix_rounds: int = 0


@dataclass
class FeedbackSeen:
    """The ``feedback`` signal: ids of the unanswered feedback on the issue's work a dispatcher saw, and when a
    round for it may start (seconds since the epoch: ``feedback.settle`` after the latest piece, or now for an
    issue put back with rework). Only ids: what a piece says never enters Temporal; the worker reads it itself."""

    ids: list[str]
    due: float


@dataclass
class LaneRequest:
    key: str
    workflow_id: str


@dataclass
class Lane:
    """A lane held on one worker: the run goes to that worker's own task queue."""

    worker: str
    queue: str


@dataclass
class RunInput:
    key: str
    workflow_id: str
    attempt: int
    #: The run is taken up after its worker went silent: the issue is ``in_progress`` already.
    resumed: bool = False
    #: The review round this run is (0: the issue's first run).
    round: int = 0
    issue_id: str | None = None
    #: The run resumes the session of the agent's answered question (IssueStart.answered).
    answered: bool = False
    #: The fix rounds the workflow counted (IssueStart.fix_rounds).
    fix_rounds: int = 0


@dataclass
class RunEnd:
    """How a run ended, and what the workflow does next (:func:`beflow.run.policy.after_run`'s decision)."""

    #: ``done``, ``retry``, ``give_up``, ``nothing`` (cancelled), or ``skipped`` (no longer ready: not ours).
    action: str
    run_id: str | None = None
    outcome: str | None = None
    delay: float = 0.0
    worker: str = ""
    #: The issue's work is in review, with a source of feedback: the workflow waits for feedback (review rounds).
    awaits_feedback: bool = False
    #: The round answered a failed check (a fix round: counted against feedback.max_fix_rounds).
    fix_round: bool = False
    #: The round's plan flagged the issue needs-human (its fix rounds spent): the count starts again from here.
    flagged: bool = False


@dataclass
class IssueState:
    """What the workflow's ``state`` query answers."""

    key: str
    phase: str = "starting"
    attempt: int = 1
    worker: str = ""
    run_id: str | None = None
    resumes: int = 0
    outcome: str | None = None
    round: int = 0
    #: The feedback ids the workflow heard of (answered or not): a dispatcher signals only what is new.
    seen: list[str] = field(default_factory=list)


@dataclass
class IssueEnd:
    key: str
    action: str
    outcome: str | None
    run_id: str | None
    attempts: int
    #: The worker that ran the last attempt.
    worker: str = ""
    round: int = 0


def engine_of(project: Project) -> TemporalEngineSettings:
    engine = project.config.engine
    if not isinstance(engine, TemporalEngineSettings):
        raise ConfigError(
            f"{project.config_name}: engine: this needs the Temporal engine",
            fix='Set "engine": {"kind": "temporal", ...} (`beflow docs fleet`).',
        )
    return engine


def workflow_id(tracker: str, key: str) -> str:
    """The issue's workflow id: its tracker and its key. Temporal keeps one running workflow per id, so a second
    start from any dispatcher joins the first: exactly-once without leases."""
    return f"beflow/{tracker}/{key}"


def worker_queue(task_queue: str, worker: str) -> str:
    """The task queue of one worker: every step of a run after its lane is claimed goes there, to the worker that
    holds the run's worktree."""
    return f"{task_queue}/worker/{worker}"


def run_timeout(project: Project) -> float:
    """The longest one run activity may take: the agent's timeout, and time for the steps around it. A best of N is
    one activity whose candidates (as many as ``attempts.max``) and reviewer may run in turn, on a worker with one
    lane: each may take the agent's timeout (a ceiling only: a silent worker is found by its heartbeats)."""
    attempts = project.config.attempts
    runs = max(attempts.max, attempts.configured()) + (attempts.judge.reviewer is not None)
    return (project.config.timeout or 24 * 3600.0) * runs + 600.0 * runs
