"""Who beflow is in Linear: the user its token acts as (asked once), whether that is an app's (``actor=app``: only an
app may open agent sessions), and which issues were handed to it — delegated to it, or assigned to it."""

from __future__ import annotations

import threading
from typing import Any

from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from beflow.trackers.linear_api import Api


class Identity:
    """The token's user, read from Linear the first time it is needed (one request per process)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._viewer: wire.Viewer | None = None
        self._lock = threading.Lock()

    def viewer(self) -> wire.Viewer:
        with self._lock:
            if self._viewer is None:
                self._viewer = wire.parse(wire.Viewer, self.api.query(q.VIEWER), "BeflowViewer")
            return self._viewer

    @property
    def is_app(self) -> bool:
        return self.viewer().is_app

    def handed(self, raw: wire.Issue) -> bool:
        """Whether ``raw`` was handed to beflow: delegated to its app user. (An issue merely assigned to the token's
        user is not: with a person's key that is every issue of theirs, and assignment as a trigger is opt-in.)"""
        me = self.viewer().viewer.id
        return raw.delegate is not None and raw.delegate.id == me

    def take(self, raw: wire.Issue) -> dict[str, Any]:
        """The ``IssueUpdateInput`` that makes beflow the one working ``raw``: its delegate with an app's token (the
        person assigned stays so), its assignee with a person's; empty when it is already."""
        me = self.viewer().viewer.id
        if self.is_app:
            return {} if raw.delegate is not None and raw.delegate.id == me else {"delegateId": me}
        return {} if raw.assignee is not None and raw.assignee.id == me else {"assigneeId": me}
