"""Questions instead of failures (docs/questions.md): a run's agent asks a person (``issue.ask``), its turn ends, its
issue waits ``blocked``; a trusted person's answer (a comment, or ``issue.answer`` from the dashboard) resumes the
agent's session in a new turn on the same branch; unanswered after ``limits.wait`` the issue fails, saying so.

The question is one comment (and, where the run is an agent session, an elicitation in it), and the answer the
first comment after it by someone the tracker trusts with beflow's work (GitHub's and GitLab's rule of who may give
feedback: a comment whose words are withheld from prompts is none) that is not beflow's own — or an answer given the
tracker's own way (:class:`~beflow.trackers.base.HearsAnswers`: a reply in Linear's agent session).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable

from pydantic import BaseModel, Field

from beflow.errors import NotBoundError, UsageError
from beflow.feedback import strip_hidden
from beflow.ops.agent_words import agent_words
from beflow.ops.issues import tracker
from beflow.ops.operations import AGENT_ACTOR, Context, Input, Key, operation
from beflow.ops.permission_asks import told
from beflow.records.record import Answer, Question, RunRecord
from beflow.records.store import RunStore
from beflow.trackers.base import HearsAnswers, Tracker
from beflow.trackers.issue import MAX_TEXT, Comment, Issue, Status, format_time, normalize_key, utc_now
from beflow.trackers.quoting import code

#: Bounds on a question: a question and a few choices, not a report.
MAX_QUESTION = 4_000
MAX_CHOICES = 10
MAX_CHOICE = 200

#: The mark of a question's comment (the run that asked), and of an answer given through beflow (``issue.answer``:
#: on GitHub and GitLab it is posted with beflow's token, whose comments are otherwise beflow's own).
QUESTION_MARK = "<!-- beflow:question {run} -->"
ANSWER_MARK = "<!-- beflow:answer-to-question -->"
#: Any mark of beflow's in a comment (its own comments carry one): no answer, unless it is the answer mark.
_OWN = re.compile(r"<!--\s*beflow", re.IGNORECASE)

#: The comment's author beflow writes its own comments as on a tracker that keeps the name it is given.
BEFLOW = "beflow"


# -- the question: put, found, answered ----------------------------------------------------------------------------


def question_comment(key: str, question: Question, run_id: str, inert: Callable[[str], str] = str) -> str:
    """The comment that puts ``question`` to people: the agent's words inert (``inert``: the tracker's), its choices
    numbered, and how to answer."""
    say = inert
    lines = [QUESTION_MARK.format(run=run_id), f"**The agent has a question** (run {code(run_id)}):", ""]
    lines += [f"> {line}" if line else ">" for line in say(question.text).splitlines()]
    if question.choices:
        lines += ["", "Choices:"] + [f"{n}. {say(choice)}" for n, choice in enumerate(question.choices, 1)]
    lines += [
        "",
        f"Answer with a comment on this issue (`beflow issues answer {key} TEXT`, or the dashboard): the agent's "
        "session goes on with your answer. Until then the issue is `blocked`.",
    ]
    return "\n".join(lines)


def answer_in(comments: list[Comment], question: Question, run_id: str) -> Answer | None:
    """The first answer to ``question`` among an issue's ``comments`` (oldest first): a comment from the time it was
    asked on, by someone trusted (its words not withheld), not an agent's, and not beflow's own (its marks; the
    question's own comment is one) unless given through ``issue.answer``."""
    if question.asked is None:
        return None
    asked = question.asked.replace(microsecond=0)
    for comment in comments:
        if _aware(comment.created) < asked or comment.withheld is not None:
            continue
        if comment.author == AGENT_ACTOR:  # (the agent's own words: in the second its turn ended, they look timely)
            continue
        given = ANSWER_MARK in comment.text
        if not given and (comment.author == BEFLOW or _OWN.search(comment.text)):
            continue
        text = strip_hidden(comment.text.replace(ANSWER_MARK, "")).strip()
        if text:
            return Answer(text=text, author=comment.author, given=comment.created, run=run_id)
    return None


def _aware(when: dt.datetime) -> dt.datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def answer_of(trackers: Tracker, issue: Issue, asking: RunRecord) -> Answer | None:
    """The answer to the question of ``asking`` (the run that asked), if a person gave one."""
    if asking.question is None:
        return None
    if isinstance(trackers, HearsAnswers):
        heard = trackers.answer_of(issue.key, asking.question, asking.id)
        if heard is not None:
            return heard
    return answer_in(issue.comments, asking.question, asking.id)


def waiting(store: RunStore, key: str) -> RunRecord | None:
    """The run whose question the issue waits on: its latest run, when that one asked."""
    for record in store.records([normalize_key(key)], limit=None):
        if record.outcome == "running":
            continue
        return record if record.outcome == "asked" and record.question is not None else None
    return None


def deadline(asking: RunRecord, wait: float) -> dt.datetime | None:
    """When the question of ``asking`` is no longer waited for (``limits.wait`` after it was asked)."""
    asked = asking.question.asked if asking.question is not None else None
    return None if asked is None else asked + dt.timedelta(seconds=wait)


def give_up_note(asking: RunRecord, wait: float) -> str:
    return (
        f"Nobody answered the question of run {code(asking.id)} within {wait:g} s (limits.wait): beflow gives up on "
        "this issue. Make it ready to run it again."
    )


def answer_prompt(answer: Answer, question: Question | None) -> str:
    """What a resumed turn is told, after its prompt: the question it asked and the person's answer."""
    if question is not None and question.permission is not None:
        lines = ["", "## The answer to your permission request", "", *told(answer, question)]
        return "\n".join([*lines, "", "Go on with the work from where you stopped."]) + "\n"
    lines = ["", "## The answer to your question", ""]
    if question is not None:
        lines += ["You asked:", "", *(f"> {line}" for line in question.text.splitlines()), ""]
    lines += [f"{answer.author} answered:", "", answer.text, "", "Go on with the work from where you stopped."]
    return "\n".join(lines) + "\n"


# -- the operations ------------------------------------------------------------------------------------------------


class AskQuestion(Input):
    key: Key | None = Field(default=None, min_length=1, max_length=100, description="Your issue (implied).")
    question: str = Field(min_length=1, max_length=MAX_QUESTION, description="The question, in a few sentences.")
    choices: list[str] = Field(
        default_factory=list,
        max_length=MAX_CHOICES,
        description="The answers you expect, if it is a choice (e.g. ['keep the old API', 'remove it']).",
    )


class Asked(BaseModel):
    key: str
    run: str
    question: Question
    #: What the agent does now.
    next: str


@operation(
    "issue.ask",
    title="Ask a person a question",
    description="Ask the people behind your issue a question you cannot go on without (a decision, a missing fact), "
    "instead of failing or guessing. Your turn ENDS with it: after calling it, stop working and end your turn at "
    "once, without further changes. Your issue waits for a person's answer, and your session goes on with that answer "
    "as your next prompt (your work so far is kept on the branch). Ask once, plainly; list `choices` when it is a "
    "choice. Writes to the tracker when your turn ends.",
    safety="action",
    agent=True,
    issue_field="key",
    category="issues",
    tags=("issues", "write", "question"),
    tracker=True,
)
def ask_question(context: Context, payload: AskQuestion) -> Asked:
    tracker(context, writes=True)  # (the question is written there when the turn ends: refused now, if it cannot be)
    if context.bound_run is None or context.asks is None:
        raise NotBoundError(
            "issue.ask: this session is not an unattended run's agent, so nobody waits for its question",
            fix="With a person beside you, ask them in your reply; elsewhere, comment on the issue.",
        )
    choices = [" ".join(agent_words(context, c).split())[:MAX_CHOICE] for c in payload.choices]
    question = Question(text=agent_words(context, payload.question), choices=[c for c in choices if c])
    context.asks(question)
    return Asked(
        key=normalize_key(payload.key or context.bound_issue or ""),
        run=context.bound_run,
        question=question,
        next="End your turn now. A person's answer comes back as your next prompt, in this session.",
    )


class GiveAnswer(Input):
    key: Key = Field(min_length=1, max_length=100, description="The issue whose question is answered (e.g. 7).")
    text: str = Field(min_length=1, max_length=MAX_TEXT, description="The answer, in Markdown.")


class Answered(BaseModel):
    key: str
    #: The run whose question it answers.
    run: str
    comment: Comment
    #: What happens now: the watch resumes the agent's session with the answer.
    next: str


@operation(
    "issue.answer",
    title="Answer the agent's question",
    description="Answer the question an issue's agent asked (the issue is `blocked`): the answer is a comment on "
    "the issue, and `beflow watch` resumes the agent's session with it. Writes to the tracker.",
    safety="action",
    issue_field="key",
    category="issues",
    tags=("issues", "write", "question"),
    tracker=True,
)
def answer_question(context: Context, payload: GiveAnswer) -> Answered:
    if context.bound_issue is not None:  # (an agent never answers its own question: the op is not agent-safe)
        raise UsageError("issue.answer is a person's")
    trackers = tracker(context, writes=True)
    issue = trackers.get(payload.key)
    asking = waiting(RunStore(context.project.directory), issue.key) if issue.status == Status.BLOCKED else None
    if asking is None:
        raise UsageError(
            f"issue {issue.key} waits for no answer (it is {issue.status.value})",
            fix=f"Comment instead: beflow issues comment {issue.key} TEXT",
        )
    comment = trackers.comment(issue.key, f"{payload.text}\n\n{ANSWER_MARK}", author=context.actor)
    when = format_time(utc_now())
    return Answered(
        key=issue.key,
        run=asking.id,
        comment=comment,
        next=f"answered at {when}: beflow watch resumes the agent's session with it",
    )
