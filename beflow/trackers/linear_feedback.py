"""Feedback on Linear: a person's follow-up message (a prompt) in an agent session of beflow's on the issue, sent
once the session's run had started, is a piece of feedback for a review round on the same branch (docs/rounds.md),
as a review is on GitHub.

Trust: only the workspace's members are heard — a prompt by a guest (let into some teams only), an app (another
agent) or a suspended account is left out, and said so in the round's record. A stop signal is no feedback: it
stopped the run it was sent to. The piece's id is ``linear-prompt:<activity id>``; its answer is the round's own run,
which goes on in the session the prompt was written in (:func:`beflow.trackers.linear_sessions.open_session`), so
nothing more is posted as a reply.

A run whose agent asked a person (docs/questions.md) ends its session with an ``elicitation``: the first member's
prompt after it is the answer (:func:`answer_in_sessions`), which resumes the agent, and no feedback.
"""

from __future__ import annotations

import datetime as dt

from beflow.feedback import Feedback, Gathered, Ignored, strip_hidden
from beflow.records.record import Answer
from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from beflow.trackers.linear_api import Api
from beflow.trackers.wire import Wire

#: The start of the id of every piece this source gives.
PREFIX = "linear-prompt:"


class _Author(Wire):
    id: wire.Id
    name: str
    displayName: str | None = None
    app: bool = False
    active: bool = True
    guest: bool = False


class _PromptBody(Wire):
    type: str | None = None
    body: str | None = None


class _Prompt(Wire):
    id: wire.Id
    createdAt: dt.datetime
    signal: str | None = None
    user: _Author
    content: _PromptBody


class _Session(Wire):
    id: wire.Id
    startedAt: dt.datetime | None = None
    url: str | None = None
    appUser: wire.Ref
    activities: wire.Connection[_Prompt]


class _Issue(Wire):
    id: wire.Id
    url: str | None = None
    agentSessions: wire.Connection[_Session]


class _Answer(Wire):
    issue: _Issue


def stranger(user: _Author) -> str | None:
    """Why ``user``'s words are not beflow's to act on (None: a member of the workspace)."""
    if user.app:
        return "an app, not a person"
    if user.guest:
        return "a guest of the workspace, not a member"
    if not user.active:
        return "a suspended account"
    return None


def _read(api: Api, issue_id: str) -> _Issue:
    return wire.parse(_Answer, api.query(q.ISSUE_PROMPTS, {"id": issue_id}), "BeflowIssuePrompts").issue


def _replies(session: _Session) -> list[tuple[_Prompt, bool]]:
    """A session's prompts sent once its run had started, oldest first, each with whether it answers beflow's
    elicitation (the first member's prompt after one, or a stranger's before that); stop signals left out."""
    replies: list[tuple[_Prompt, bool]] = []
    awaiting = False
    for activity in sorted(session.activities.nodes, key=lambda a: (a.createdAt, a.id)):
        if activity.content.type == "elicitation":
            awaiting = True
        elif activity.content.type == "prompt" and activity.signal != wire.STOP:
            if session.startedAt is not None and activity.createdAt > session.startedAt:
                replies.append((activity, awaiting))
            if stranger(activity.user) is None:  # (a stranger's words answer nothing: the question still waits)
                awaiting = False
    return replies


def gather_prompts(api: Api, issue_id: str, me: str) -> Gathered:
    """The prompts people sent the sessions of beflow's app user (``me``) on the issue once their run had started,
    answers to its questions aside (one request)."""
    issue = _read(api, issue_id)
    pieces: list[Feedback] = []
    ignored: list[Ignored] = []
    for session in issue.agentSessions.nodes:
        if session.appUser.id != me or session.startedAt is None:
            continue  # (another agent's, or one no run took up: its prompt was the work itself)
        for activity, answers in _replies(session):
            piece = f"{PREFIX}{activity.id}"
            author = activity.user.displayName or activity.user.name
            why = stranger(activity.user)
            if why is not None:
                ignored.append(Ignored(id=piece, author=author, why=why))
                continue
            if answers:
                continue  # (it resumes the agent that asked: no round)
            body = strip_hidden(activity.content.body or "")
            if not body.strip():
                continue
            pieces.append(
                Feedback(
                    id=piece, kind="comment", author=author, url=session.url, body=body, created=activity.createdAt
                )
            )
    return Gathered(pieces=sorted(pieces, key=lambda p: p.created), ignored=ignored)


def answer_in_sessions(api: Api, issue_id: str, me: str, since: dt.datetime, run_id: str) -> Answer | None:
    """A member's reply, from ``since`` on, to the elicitation of a session of beflow's app user (``me``) on the
    issue: the answer to the question the run ``run_id`` asked (one request)."""
    replies = [
        activity
        for session in _read(api, issue_id).agentSessions.nodes
        if session.appUser.id == me
        for activity, answers in _replies(session)
        if answers and activity.createdAt >= since and stranger(activity.user) is None
    ]
    for activity in sorted(replies, key=lambda a: a.createdAt):
        text = strip_hidden(activity.content.body or "").strip()
        if text:
            author = activity.user.displayName or activity.user.name
            return Answer(text=text, author=author, given=activity.createdAt, run=run_id)
    return None
