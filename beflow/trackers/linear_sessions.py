"""A run as a Linear agent session (an app's token only: Linear lets apps alone open sessions and post activities).

The session is opened on the issue as the run starts, and a ``thought`` posted at once: Linear wants an agent's first
word within seconds. The run's steps are ``action`` activities (a tool call is ephemeral: the next activity replaces
it), its end a ``response`` with the pull request among the session's links (``externalUrls``), or an ``error``. A
person's ``stop`` signal is a prompt activity carrying it: :meth:`LinearSession.stop_asked` reads the activities
posted since it last looked, newest first (one request while nothing is new).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from beflow.trackers.linear_api import Api
from beflow.trackers.wire import Wire

#: Activities read a page at a time when looking for a stop signal (most looks find one or two new ones).
STOP_PAGE = 10
#: Linear's limit on an activity's text is generous; beflow's stay a status line, not a report.
MAX_TEXT = 2000


class _Made(Wire):
    agentSessionCreateOnIssue: wire.SessionWritten


class _Read(Wire):
    agentSession: wire.AgentSessionWithActivities


class _Sessions(Wire):
    agentSessions: wire.Connection[wire.AgentSession]


class _IssueSessions(Wire):
    issue: _Sessions


def open_session(api: Api, issue_id: str, me: str) -> LinearSession:
    """The agent session of beflow's app user (``me``) on the issue ``issue_id`` for a run: the one a person's
    delegation or mention opened and that waits for beflow, or the one whose run asked a question (awaiting input:
    the answer's run goes on there), else the one a person wrote in after its run ended (a
    follow-up: the round that answers it goes on there), else a new one."""
    data = api.query(q.ISSUE_SESSIONS, {"id": issue_id})
    sessions = wire.parse(_IssueSessions, data, "BeflowIssueSessions").issue.agentSessions.nodes
    mine = [s for s in sessions if s.appUser.id == me]
    waiting = [s for s in mine if s.status in ("pending", "awaitingInput")] or [
        s for s in mine if s.endedAt is not None and s.updatedAt > s.endedAt
    ]
    if waiting:
        newest = max(waiting, key=lambda s: s.updatedAt)
        # A stop looked for from its latest change on: an earlier run's stop in it stopped that run, not this one.
        return LinearSession(api, newest.id, newest.updatedAt)
    data = api.mutate(q.AGENT_SESSION_CREATE_ON_ISSUE, {"input": {"issueId": issue_id}})
    made = wire.parse(_Made, data, "BeflowAgentSessionCreate").agentSessionCreateOnIssue.agentSession
    return LinearSession(api, made.id, made.createdAt)


class LinearSession:
    """One run's agent session (:class:`beflow.trackers.base.AgentSession`)."""

    def __init__(self, api: Api, session_id: str, since: dt.datetime) -> None:
        self.api = api
        self.id = session_id
        self._since = since  # activities up to this time were looked at for a stop signal

    def _post(self, content: wire.Said, ephemeral: bool = False) -> None:
        payload: dict[str, Any] = {"agentSessionId": self.id, "content": wire.content_input(content)}
        if ephemeral:
            payload["ephemeral"] = True
        self.api.mutate(q.AGENT_ACTIVITY_CREATE, {"input": payload})

    def thought(self, text: str) -> None:
        self._post(wire.Thought(body=_short(text)))

    def action(self, action: str, parameter: str, *, ephemeral: bool = False) -> None:
        self._post(wire.Action(action=_short(action), parameter=_short(parameter)), ephemeral)

    def respond(self, text: str, link: str | None = None) -> None:
        if link:  # (the schema's current field: externalLink is deprecated for it)
            added = [{"label": "Pull request", "url": link}]
            self.api.mutate(q.AGENT_SESSION_UPDATE, {"id": self.id, "input": {"addedExternalUrls": added}})
        self._post(wire.Response(body=_short(text)))

    def error(self, text: str) -> None:
        self._post(wire.Error(body=_short(text)))

    def elicit(self, text: str) -> None:
        self._post(wire.Elicitation(body=_short(text)))

    def stop_asked(self) -> bool:
        """Whether an activity since the last look is a person's stop signal: the newest first, a page at a time,
        down to the last look."""
        after: str | None = None
        newest = self._since
        try:
            while True:
                variables = {"id": self.id, "first": STOP_PAGE, "after": after}
                page = wire.parse(_Read, self.api.query(q.AGENT_SESSION, variables), "BeflowAgentSession")
                activities = page.agentSession.activities
                fresh = [a for a in activities.nodes if a.createdAt > self._since]
                newest = max([newest, *(a.createdAt for a in fresh)])
                if any(a.stops for a in fresh):
                    return True
                more = activities.pageInfo.hasNextPage and activities.pageInfo.endCursor
                if len(fresh) < len(activities.nodes) or not more:
                    return False
                after = activities.pageInfo.endCursor
        finally:
            self._since = newest


def _short(text: str) -> str:
    text = text.strip() or "-"
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"
