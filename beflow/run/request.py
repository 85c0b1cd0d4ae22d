"""What to run and how (:class:`RunRequest`), and what a run starts from in every mode — ``--auto``, ``watch``,
``--attend``, ``--open``: its prompt, rendered from the configured template with the same variables, and its
record in the state ``running``."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beflow.config import Project
from beflow.feedback import Feedback, Ignored, strip_hidden
from beflow.ops import questions, rounds
from beflow.records.record import Answer, Mode, Question, RunRecord, now
from beflow.records.store import RunStore
from beflow.run import prompt
from beflow.trackers import Issue


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
    #: 0: the issue's first run; 1, 2...: a review round (docs/rounds.md), answering ``feedback`` on the branch.
    round: int = 0
    feedback: list[Feedback] = field(default_factory=list)
    #: Feedback the round's sources left out, and why (for its record).
    ignored: list[Ignored] = field(default_factory=list)
    #: The issue's labels that chose the run's agent or model (``agent:claude``), for its record.
    chosen_by: list[str] = field(default_factory=list)
    #: Best of N: the candidate this run is (1, 2...), on its own branch, judged before anything is proposed; 0: a
    #: plain run. A candidate leaves the tracker to the judged run (:mod:`beflow.run.attempts`).
    candidate: int = 0
    #: Best of N's reviewer: its prompt (the issue and the passing candidates' diffs, written by beflow, not the
    #: template); None: not a reviewer. A reviewer leaves the tracker to the judged run, and commits nothing.
    review: str | None = None
    #: A person's answer to the question the agent asked (the run that asked, ``answer.run``): this run resumes the
    #: agent's session with it, on the same branch (docs/questions.md).
    answer: Answer | None = None
    #: The question it answers.
    question: Question | None = None


def _prompt_variables(
    issue: Issue, request: RunRequest, branch: str, run_id: str, previous: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    previous = previous or []
    # Every text of the tracker as a reader of the page sees it, as in review rounds (beflow.feedback.strip_hidden),
    # and the words of one who may not give beflow work left out, saying so.
    comments = [
        {
            "author": c.author,
            "created": c.created.isoformat(),
            "body": strip_hidden(c.text) if c.withheld is None else f"[This comment is left out: {c.withheld}.]",
        }
        for c in issue.comments
    ]
    return {
        "issue": {
            "key": issue.key,
            "title": strip_hidden(issue.title),
            "body": strip_hidden(issue.body),
            "labels": [strip_hidden(label) for label in issue.labels],
            "url": issue.url,
            "comments": comments,
        },
        "attempt": request.attempt,
        "candidate": request.candidate,
        "round": request.round,
        "feedback": rounds.prompt_feedback(request.feedback),
        "previous": previous,
        "branch": branch,
        "run_id": run_id,
        "mode": request.mode,
    }


def render_prompt(project: Project, issue: Issue, request: RunRequest, *, branch: str, run_id: str) -> str:
    """The prompt of one run, from the configured template and the same variables in every mode."""
    # A round's prompt says what the earlier rounds changed and said (their records).
    runs = RunStore(project.directory).records([issue.key], ids=[issue.id] if issue.id else ()) if request.round else []
    earlier = rounds.previous(runs, request.round) if request.round else []
    variables = _prompt_variables(issue, request, branch, run_id, earlier)
    text = prompt.render(project.config.prompt, project.directory, variables)
    if request.answer is not None:  # after the whole prompt: an agent that cannot resume its session starts cold
        text += questions.answer_prompt(request.answer, request.question)
    return text


def new_record(project: Project, issue: Issue, request: RunRequest, *, run_id: str, branch: str | None) -> RunRecord:
    """A run record in the state ``running``; ``branch`` is where the run commits (None: it does not)."""
    return RunRecord(
        id=run_id,
        issue=issue.key,
        issue_id=issue.id,
        title=issue.title,
        mode=request.mode,
        agent=project.config.agent_label(),
        model=project.config.model,
        chosen_by=list(request.chosen_by),
        attempt=request.attempt,
        candidate=request.candidate,
        round=request.round,
        feedback=rounds.consumed(request.feedback),
        feedback_ignored=rounds.left_out(request.ignored),
        branch=branch,
        started_at=now(),
        answer=request.answer,
    )


def branch_of(directory: Path, issue: Issue) -> str:
    """Where the runs of ``issue`` commit: ``beflow/<key>``; an issue whose key changed (a Linear issue moved to
    another team) keeps the branch its earlier runs had, found by the tracker's stable id."""
    return rounds.branch_in(rounds.history(RunStore(directory), issue.key, issue.id), issue.key)
