"""How beflow's statuses live in a Linear team: its workflow states by type, and labels for what Linear has no
state for.

- ``completed`` -> ``done``, ``canceled`` -> ``closed``.
- ``started`` -> ``in_progress``; the team's review state (``tracker.review_state``, else a started state named
  ``Review`` or ``In Review``) -> ``review``, as is a started issue labelled ``beflow:review`` in a team without one.
- A state not started (triage, backlog, unstarted) -> ``ready`` when its type is one of ``tracker.ready_states``
  (default ``unstarted``) or the issue carries ``beflow:ready``; else ``open``. ``beflow:failed`` says ``failed``, and
  ``beflow:open`` holds an issue back in a team whose every not-started state is a ready one.

beflow moves an issue to the first state (by the team's order) of the type its status needs, and keeps the status
labels true to the status: none of them on a ``done`` issue, only ``beflow:failed`` on a failed one.
"""

from __future__ import annotations

import threading
from typing import Any

from beflow.config import LinearTrackerSettings
from beflow.errors import ConfigError
from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from beflow.trackers.issue import Status
from beflow.trackers.linear_api import Api
from beflow.trackers.wire import Wire

#: The label suffix of each status that may be a label (``beflow:ready``, ...).
STATUS_LABELS: dict[Status, str] = {
    Status.READY: "ready",
    Status.OPEN: "open",
    Status.REVIEW: "review",
    Status.FAILED: "failed",
    Status.BLOCKED: "blocked",  # a started issue waiting for the answer to its agent's question
}
LABEL_COLORS = {"ready": "#4cb782", "open": "#bec2c8", "review": "#5e6ad2", "failed": "#eb5757", "blocked": "#f2994a"}
_NOT_STARTED = ("backlog", "unstarted", "triage")
_REVIEW_NAMES = ("review", "in review")


class _TeamAnswer(Wire):
    teams: wire.Connection[wire.Team]


class Workflow:
    """One team's workflow states and labels (read once), and beflow's statuses in them."""

    def __init__(self, api: Api, settings: LinearTrackerSettings) -> None:
        self.api = api
        self.settings = settings
        self.prefix = settings.status_prefix
        self._team: wire.Team | None = None
        self._labels: dict[str, wire.Label] = {}  # casefolded name -> label of the team
        self._lock = threading.Lock()

    # -- the team ----------------------------------------------------------------------------------------------------

    def team(self) -> wire.Team:
        """The team of ``tracker.team``, with its states and labels (read once)."""
        if self._team is None:
            data = self.api.query(q.TEAM, {"key": self.settings.team})
            teams = wire.parse(_TeamAnswer, data, "BeflowTeam").teams.nodes
            if not teams:
                raise ConfigError(
                    f"tracker.team: Linear has no team {self.settings.team} this token can see",
                    fix="Set tracker.team to a team's key (the start of its issues' identifiers, ENG for ENG-123).",
                )
            team = teams[0]
            with self._lock:
                self._team = team
                self._labels = {label.name.casefold(): label for label in team.labels.nodes}
        return self._team

    def states(self) -> list[wire.WorkflowState]:
        """The team's states in its order."""
        return sorted(self.team().states.nodes, key=lambda state: state.position or 0.0)

    def first(self, *types: str, but: str | None = None) -> wire.WorkflowState | None:
        """The first state of the first of ``types`` the team has (not the state ``but``)."""
        for kind in types:
            found = [s for s in self.states() if s.type == kind and s.id != but]
            if found:
                return found[0]
        return None

    def review_state(self) -> wire.WorkflowState | None:
        wanted = self.settings.review_state
        for state in self.states():
            if wanted is not None and state.name.casefold() == wanted.casefold():
                return state
            if wanted is None and state.type == "started" and state.name.strip().casefold() in _REVIEW_NAMES:
                return state
        return None

    # -- labels ------------------------------------------------------------------------------------------------------

    def label(self, status: Status) -> str | None:
        suffix = STATUS_LABELS.get(status)
        return f"{self.prefix}{suffix}" if suffix else None

    def statuses(self) -> list[str]:
        return [f"{self.prefix}{suffix}" for suffix in STATUS_LABELS.values()]

    def says_status(self, name: str) -> bool:
        return name.casefold() in {label.casefold() for label in self.statuses()}

    def names(self, issue: wire.Issue) -> list[str]:
        """Every label of ``issue`` by name (one with more than a page of them named from the team's labels)."""
        if issue.labels_complete:
            return issue.label_names
        self.team()
        by_id = {label.id: label.name for label in self._labels.values()}
        named = {label.id: label.name for label in issue.labels}
        return [named.get(lid) or by_id.get(lid, lid) for lid in issue.labelIds or []]

    def needed(self) -> list[str]:
        """The labels beflow writes in this team: the tracker's, ``failed``, and ``open`` and ``review`` where the
        team has no state for them (``ready`` is a person's word: beflow moves an issue to a ready state instead)."""
        wanted = [Status.FAILED]
        if not any(t not in self.settings.ready_states for t in _NOT_STARTED if self.first(t)):
            wanted.append(Status.OPEN)
        if self.review_state() is None:
            wanted.append(Status.REVIEW)
        return [*self.settings.labels, *(label for status in wanted if (label := self.label(status)))]

    def missing(self) -> list[str]:
        """The labels beflow writes that the team lacks."""
        self.team()
        return [name for name in self.needed() if name.casefold() not in self._labels]

    def label_id(self, name: str) -> str:
        """The id of the team's label ``name``, made when the team has none."""
        self.team()
        found = self._labels.get(name.casefold())
        if found is not None:
            return found.id
        team = self.team()
        suffix = name.removeprefix(self.prefix)
        payload: dict[str, Any] = {"name": name, "teamId": team.id, "color": LABEL_COLORS.get(suffix, "#95a2b3")}
        data = self.api.mutate(q.LABEL_CREATE, {"input": payload})
        made = wire.parse(_LabelAnswer, data, "BeflowLabelCreate").issueLabelCreate.issueLabel
        with self._lock:
            self._labels[made.name.casefold()] = made
        return made.id

    def ensure(self) -> list[str]:
        """Make the labels beflow needs that the team lacks; the names made."""
        made = self.missing()
        for name in made:
            self.label_id(name)
        return made

    # -- statuses ----------------------------------------------------------------------------------------------------

    def status_of(self, issue: wire.Issue, names: list[str], *, delegated: bool = False) -> Status:
        """beflow's status of an issue, from its state's type and its labels; ``delegated`` to beflow's app user, an
        issue not started yet (in triage or the backlog too) is ready: the delegation is the ask."""
        labels = {name.casefold() for name in names}

        def labelled(status: Status) -> bool:
            label = self.label(status)
            return label is not None and label.casefold() in labels

        kind = issue.state.type
        if kind == "completed":
            return Status.DONE
        if kind == "canceled":
            return Status.CLOSED
        if kind == "started":
            if labelled(Status.BLOCKED):
                return Status.BLOCKED
            review = self.review_state()
            on_review = review is not None and issue.state.id == review.id
            return Status.REVIEW if on_review or labelled(Status.REVIEW) else Status.IN_PROGRESS
        if labelled(Status.FAILED):
            return Status.FAILED
        if labelled(Status.OPEN):
            return Status.OPEN
        if labelled(Status.READY) or kind in self.settings.ready_states or (delegated and kind in _NOT_STARTED):
            return Status.READY
        return Status.OPEN

    def move(self, issue: wire.Issue, names: list[str], status: Status, *, delegated: bool = False) -> dict[str, Any]:
        """The ``IssueUpdateInput`` that puts ``issue`` in ``status`` (empty: it is there); ``delegated`` to beflow's
        app user, ``open`` is a label (the issue is ready in every state not started)."""
        kind, current = issue.state.type, issue.state
        review = self.review_state()
        state: wire.WorkflowState | None = None
        labels: list[Status] = []
        if status == Status.IN_PROGRESS:
            if kind != "started" or (review is not None and current.id == review.id):
                state = self.first("started", but=review.id if review else None)
        elif status == Status.REVIEW:
            if review is not None:
                state = review
            else:
                state = None if kind == "started" else self.first("started")
                labels = [Status.REVIEW]
        elif status == Status.BLOCKED:  # (started, labelled: still the team's work in hand, waiting on a person)
            state = None if kind == "started" else self.first("started")
            labels = [Status.BLOCKED]
        elif status == Status.DONE:
            state = None if kind == "completed" else self.first("completed")
        elif status == Status.CLOSED:
            state = None if kind == "canceled" else self.first("canceled")
        elif status == Status.READY:
            if kind not in self.settings.ready_states:
                state = self.first(*self.settings.ready_states)
        else:  # open or failed: a state not started; one that is no ready one when the team has it
            held_back = [t for t in _NOT_STARTED if t not in self.settings.ready_states]
            if kind not in held_back:
                state = self.first(*held_back)
            if state is None and kind not in held_back:
                state = None if kind in _NOT_STARTED else self.first(*self.settings.ready_states)
                labels = [Status.OPEN] if status == Status.OPEN else []
            if status == Status.FAILED:
                labels = [Status.FAILED]
            elif delegated:
                labels = [Status.OPEN]
        update: dict[str, Any] = {}
        if state is not None and state.id != current.id:
            update["stateId"] = state.id
        present = {name.casefold() for name in names}
        wanted = {label for s in labels if (label := self.label(s))}
        added = [self.label_id(name) for name in sorted(wanted) if name.casefold() not in present]
        # (a label it carries by its own id: a workspace's label of the name is no team label)
        own = {label.name.casefold(): label.id for label in issue.labels}
        removed = [
            own.get(name.casefold()) or self.label_id(name)
            for name in self.statuses()
            if name not in wanted and name.casefold() in present
        ]
        if added:
            update["addedLabelIds"] = added
        if removed:
            update["removedLabelIds"] = removed
        return update


class _LabelCreated(Wire):
    issueLabel: wire.Label


class _LabelAnswer(Wire):
    issueLabelCreate: _LabelCreated
