"""The labels of the GitLab tracker: its status labels (``beflow:ready``, ...: status lives in labels on GitLab, as on
GitHub) and the labels that say an issue is beflow's, made in the project when they are missing (``beflow init``).

GitLab closes an issue one way only (it has no "completed" and "not planned" as GitHub has), and closing is how a
person says an issue is finished — by hand, or by merging a merge request that closes it. So a closed issue is
``done``, unless it carries ``<prefix>closed`` (``beflow:closed``): beflow puts that label on an issue it closes as
``closed`` (nobody will work on it), and a person may too; reopening takes it off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from beflow.config import GitLabTrackerSettings
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.gitlab_api import Api
from beflow.trackers.issue import Status

#: The label suffix of each status a label says: the four of an open issue (``open`` is "no status label"), and
#: ``closed`` for a closed issue nobody will work on (a closed issue without it is ``done``).
STATUS_LABELS: dict[Status, str] = {
    Status.READY: "ready",
    Status.IN_PROGRESS: "in-progress",
    Status.BLOCKED: "blocked",
    Status.REVIEW: "review",
    Status.FAILED: "failed",
    Status.CLOSED: "closed",
}
#: When an open issue carries several status labels (two people edited it), the furthest along wins.
_PRECEDENCE = [Status.IN_PROGRESS, Status.BLOCKED, Status.REVIEW, Status.FAILED, Status.READY]
LABEL_COLORS = {"ready": "#0e8a16", "in-progress": "#fbca04", "blocked": "#d93f0b", "review": "#1d76db",
                "failed": "#b60205", "closed": "#6a737d"}  # fmt: skip
OTHER_COLOR = "#5319e7"


class ProjectLabels:
    """One project's labels as the tracker reads and makes them (``call``: the tracker's calls of ``api``)."""

    def __init__(self, api: Api, base: str, call: Callable[..., Any], settings: GitLabTrackerSettings) -> None:
        self.api = api
        self._base = base
        self._call = call
        self.settings = settings
        self.prefix = settings.status_prefix
        self._checked = False

    def of(self, status: Status) -> str | None:
        """The label that says ``status`` (None for ``open`` and ``done``: no label says them)."""
        suffix = STATUS_LABELS.get(status)
        return f"{self.prefix}{suffix}" if suffix else None

    def statuses(self) -> list[str]:
        """Every status label."""
        return [f"{self.prefix}{suffix}" for suffix in STATUS_LABELS.values()]

    def says_status(self, name: str) -> bool:
        return name in self.statuses()

    def status_of(self, issue: wire.Issue) -> Status:
        """The status of an issue as GitLab gives it."""
        names = issue.labels
        if issue.state == "closed":
            return Status.CLOSED if self.of(Status.CLOSED) in names else Status.DONE
        present = {s for s in _PRECEDENCE if self.of(s) in names}
        return next((s for s in _PRECEDENCE if s in present), Status.OPEN)

    def change(self, issue: wire.Issue, status: Status) -> dict[str, Any]:
        """The edit (``PUT .../issues/:iid``) that moves ``issue`` to ``status``: one request, labels and state
        together; empty when it is there already."""
        target = self.of(status)
        names = issue.labels
        edit: dict[str, Any] = {}
        closing = status in (Status.DONE, Status.CLOSED)
        if closing and issue.state == "opened":
            edit["state_event"] = "close"
        elif not closing and issue.state == "closed":
            edit["state_event"] = "reopen"
        if target and target not in names:
            edit["add_labels"] = target
        stale = [name for name in self.statuses() if name != target and name in names]
        if stale:
            edit["remove_labels"] = ",".join(stale)
        return edit

    def missing(self) -> list[str]:
        """The labels beflow needs that the project lacks (its group's labels count: GitLab lists them too)."""
        path = f"{self._base}/labels"
        # A label GitLab gives in a shape of its own is taken as missing: making it again is refused (409), harmlessly.
        labels, _ = wire.read_each(wire.Label, self._call(self.api.paginate, path), f"GET {path}")
        existing = {label.name for label in labels}
        return [name for name in [*self.settings.labels, *self.statuses()] if name not in existing]

    def ensure(self) -> list[str]:
        """Create the labels beflow needs that the project lacks; returns the names created."""
        created = []
        for name in self.missing():
            color = LABEL_COLORS.get(name.removeprefix(self.prefix), OTHER_COLOR)
            response = self._call(
                self.api.request,
                "POST",
                f"{self._base}/labels",
                json={"name": name, "color": color, "description": "beflow: issues for coding agents"},
                ok=(409,),  # created meanwhile by another machine
                retry=True,  # twice is harmless: the second is refused as it exists
            )
            if response.status == 201:
                created.append(name)
        self._checked = True
        return created

    def ready(self) -> None:
        """The labels exist (made once per tracker, before its first write that needs them)."""
        if not self._checked:
            self.ensure()
