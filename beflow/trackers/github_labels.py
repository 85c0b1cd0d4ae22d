"""The labels of the GitHub tracker: its status labels (``beflow:ready``, ...: status lives in labels on GitHub) and
the labels that say an issue is beflow's, made in the repository when they are missing (``beflow init --labels``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from beflow.config import GitHubTrackerSettings
from beflow.trackers import github_wire as wire
from beflow.trackers.github_api import Api
from beflow.trackers.issue import Status

#: The label suffix of each status an open issue can have (``open`` is "no status label").
STATUS_LABELS: dict[Status, str] = {
    Status.READY: "ready",
    Status.IN_PROGRESS: "in-progress",
    Status.BLOCKED: "blocked",
    Status.REVIEW: "review",
    Status.FAILED: "failed",
}
#: When an issue carries several status labels (two people edited it), the furthest along wins.
_PRECEDENCE = [Status.IN_PROGRESS, Status.BLOCKED, Status.REVIEW, Status.FAILED, Status.READY]
LABEL_COLORS = {"ready": "0e8a16", "in-progress": "fbca04", "blocked": "d93f0b", "review": "1d76db", "failed": "b60205"}


class RepoLabels:
    """One repository's labels as the tracker reads and makes them (``call``: the tracker's calls of ``api``)."""

    def __init__(self, api: Api, base: str, call: Callable[..., Any], settings: GitHubTrackerSettings) -> None:
        self.api = api
        self._base = base
        self._call = call
        self.settings = settings
        self.prefix = settings.status_prefix
        self._checked = False

    def of(self, status: Status) -> str | None:
        """The label that says ``status`` (None for ``open``, ``done`` and ``closed``: no label says them)."""
        suffix = STATUS_LABELS.get(status)
        return f"{self.prefix}{suffix}" if suffix else None

    def statuses(self) -> list[str]:
        """Every status label."""
        return [f"{self.prefix}{suffix}" for suffix in STATUS_LABELS.values()]

    def says_status(self, name: str) -> bool:
        return name in self.statuses()

    def status_of(self, issue: wire.IssueState, names: list[str]) -> Status:
        """The status of an issue as GitHub gives it, with its label names."""
        if issue.state == "closed":
            return Status.DONE if issue.state_reason == "completed" else Status.CLOSED
        present = {s for s in _PRECEDENCE if self.of(s) in names}
        return next((s for s in _PRECEDENCE if s in present), Status.OPEN)

    def missing(self) -> list[str]:
        """The labels beflow needs that the repository lacks."""
        path = f"{self._base}/labels"
        # A label GitHub gives in a shape of its own is taken as missing: making it again is refused (422), harmlessly.
        labels, _ = wire.read_each(wire.Label, self._call(self.api.paginate, path), f"GET {path}")
        existing = {label.name for label in labels}
        return [name for name in [*self.settings.labels, *self.statuses()] if name not in existing]

    def ensure(self) -> list[str]:
        """Create the labels beflow needs that the repository lacks; returns the names created."""
        created = []
        for name in self.missing():
            color = LABEL_COLORS.get(name.removeprefix(self.prefix), "5319e7")
            response = self._call(
                self.api.request,
                "POST",
                f"{self._base}/labels",
                json={"name": name, "color": color, "description": "beflow: issues for coding agents"},
                ok=(422,),  # created meanwhile by another machine
                retry=True,
            )
            if response.status == 201:
                created.append(name)
        self._checked = True
        return created

    def ready(self) -> None:
        """The labels exist (made once per tracker, before its first write that needs them)."""
        if not self._checked:
            self.ensure()
