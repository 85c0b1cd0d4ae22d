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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from beflow.errors import NotBoundError, UsageError
from beflow.feedback import strip_hidden
from beflow.ops.agent_words import agent_words
from beflow.ops.issues import tracker
from beflow.ops.operations import AGENT_ACTOR, Context, Input, Key, operation
from beflow.ops.permission_asks import told
from beflow.records.record import Answer, CandidateRow, Question, RunRecord
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


def question_comment(
    key: str, question: Question, run_id: str, inert: Callable[[str], str] = str, *, judge: bool = False
) -> str:
    """The comment that puts ``question`` to people: the agent's words inert (``inert``: the tracker's), its choices
    numbered, and how to answer; ``judge``: best of N's confirmation (beflow's question, not an agent's)."""
    say = inert
    who = "**beflow asks which candidate to propose**" if judge else "**The agent has a question**"
    lines = [QUESTION_MARK.format(run=run_id), f"{who} (run {code(run_id)}):", ""]
    lines += [f"> {line}" if line else ">" for line in say(question.text).splitlines()]
    if question.choices:
        lines += ["", "Choices:"] + [f"{n}. {say(choice)}" for n, choice in enumerate(question.choices, 1)]
    goes_on = "its choice is proposed" if judge else "the agent's session goes on with your answer"
    lines += [
        "",
        f"Answer with a comment on this issue (`beflow issues answer {key} TEXT`, or the dashboard): {goes_on}. "
        "Until then the issue is `blocked`.",
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
        if record.outcome == "running" or record.set_of is not None or record.candidate or record.reviewing:
            continue  # (best of N's candidates and reviewer start after their judged run, and ask nothing)
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


#: A person's answer to best of N's confirmation (``attempts.confirm``): ``c2``, ``2``, ``candidate 2``, each with
#: ``anyway`` to choose one that did not pass; or ``yes`` (``ok``, ``confirm``) for the judge's choice.
_NAMED = re.compile(r"^(?:c|candidate\s*)?(\d{1,3})\b(.*)$", re.IGNORECASE)
_YES = re.compile(r"^(?:yes|ok|okay|confirm(?:ed)?)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Decision:
    """What a person's answer chose: a candidate (``anyway``: one that did not pass, said so), or why it chose none."""

    chosen: int | None
    why: str | None = None
    anyway: bool = False


def decision(text: str, rows: Sequence[CandidateRow], proposed: int | None) -> Decision:
    """The candidate a person's answer ``text`` chooses among ``rows`` (``proposed``: the judge's choice), read from
    its first line. Only a candidate that passed may be chosen, unless the answer says ``anyway``; one that
    committed nothing never (there is nothing to propose)."""
    line = next((each.strip() for each in text.splitlines() if each.strip()), "")
    asked_for = "answer c<N> (or yes for the judge's choice)"
    if _YES.match(line):
        if proposed is None:
            return Decision(None, f"the judge chose no candidate to confirm: {asked_for}")
        return Decision(proposed)
    named = _NAMED.match(line)
    if named is None:
        return Decision(None, f"the answer {code(line[:80])} names no candidate: {asked_for}")
    number, anyway = int(named.group(1)), "anyway" in named.group(2).lower()
    row = next((each for each in rows if each.candidate == number), None)
    if row is None:
        numbers = ", ".join(f"c{each.candidate}" for each in rows)
        return Decision(None, f"there is no candidate {number} (there are {numbers})")
    if row.commit is None:
        return Decision(None, f"candidate {number} committed nothing: there is nothing of it to propose")
    if not row.passes and not anyway:
        return Decision(None, f"candidate {number} did not pass: answer `c{number} anyway` to choose it all the same")
    return Decision(number, anyway=not row.passes)


class ConfirmCandidate(Input):
    key: Key = Field(min_length=1, max_length=100, description="The issue whose best-of-N choice waits (e.g. 7).")
    candidate: int | None = Field(
        default=None, ge=1, le=1000, description="The candidate to propose; none: the judge's choice, confirmed."
    )
    anyway: bool = Field(default=False, description="Choose a candidate that did not pass the judge all the same.")
    note: str | None = Field(default=None, max_length=2000, description="Why, said with the choice.")


class Confirmed(BaseModel):
    key: str
    #: The judged run whose choice is answered.
    run: str
    candidate: int
    comment: Comment
    #: What happens now: the watch proposes it.
    next: str


@operation(
    "candidate.confirm",
    title="Confirm or override best of N's choice",
    description="A person's choice among an issue's best-of-N candidates, when attempts.confirm holds the issue "
    "blocked after judging: confirm the judge's candidate, or choose another (one that did not pass only with "
    "anyway). The choice is a comment on the issue; `beflow watch` then makes it beflow/<key> and opens its pull "
    "request, saying who chose. Writes to the tracker.",
    safety="action",
    issue_field="key",
    category="issues",
    tags=("issues", "write", "question", "attempts"),
    tracker=True,
)
def confirm_candidate(context: Context, payload: ConfirmCandidate) -> Confirmed:
    if context.bound_issue is not None:  # (a candidate never chooses itself: the op is not agent-safe)
        raise UsageError("candidate.confirm is a person's")
    trackers = tracker(context, writes=True)
    issue = trackers.get(payload.key)
    asking = waiting(RunStore(context.project.directory), issue.key) if issue.status == Status.BLOCKED else None
    if asking is None or not asking.best_of or not asking.candidates:
        raise UsageError(
            f"issue {issue.key} waits for no choice among candidates (it is {issue.status.value})",
            fix="attempts.confirm holds an issue after judging its candidates; this one is not held so.",
        )
    given = answer_of(trackers, issue, asking)
    if given is not None:  # (the first answer is the one proposed: a second would be silently passed over)
        raise UsageError(
            f"issue {issue.key}'s choice was answered already, by {given.author}: "
            f"{code(given.text.splitlines()[0][:80])}",
            fix="beflow watch proposes that answer; once proposed, review rounds continue its branch.",
        )
    proposed = next((row.candidate for row in asking.candidates if row.chosen), None)
    said = f"c{payload.candidate}" if payload.candidate is not None else "yes"
    said += " anyway" if payload.anyway else ""
    decided = decision(said, asking.candidates, proposed)
    if decided.chosen is None:
        raise UsageError(f"candidate.confirm: candidate: {decided.why}", fix=f"beflow issues show {issue.key}")
    said = f"c{decided.chosen}" + (" anyway" if decided.anyway else "")
    text = said + (f"\n\n{payload.note}" if payload.note else "")
    comment = trackers.comment(issue.key, f"{text}\n\n{ANSWER_MARK}", author=context.actor)
    return Confirmed(
        key=issue.key,
        run=asking.id,
        candidate=decided.chosen,
        comment=comment,
        next=f"beflow watch proposes candidate {decided.chosen} as {code(f'beflow/{issue.key}')}",
    )
