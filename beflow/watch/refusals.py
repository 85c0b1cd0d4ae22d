"""A watch's issues whose labels name an agent or a model the config does not list (docs/config.md#agents).

A ready issue so labelled goes back to ``open`` when refused, so it is refused once. An issue in review stays there
while its feedback waits, and each tick would queue its round again: it is said once — one comment (the run's) and
one ``error`` event — and not dispatched again while its labels stay the same (every dispatch claims the issue: on
GitHub a label and a lease comment)."""

from __future__ import annotations

from collections.abc import Callable

from beflow.errors import BeflowError
from beflow.run.agent_choice import AgentRefused
from beflow.trackers import Issue, Status


class Refusals:
    """The issues refused, by key: their labels then."""

    def __init__(self, emit: Callable[..., None]) -> None:
        self.emit = emit
        self.said: dict[str, tuple[str, ...]] = {}

    def failed(self, key: str, error: BeflowError) -> None:
        """A run of ``key`` failed before it started: an ``error`` event — unless it was refused for the very labels
        refused before."""
        if isinstance(error, AgentRefused):
            if self.said.get(key) == error.labels and error.labels:
                return
            self.said[key] = error.labels
        self.emit("error", key, message=error.message)

    def sift(self, queue: list[Issue]) -> list[Issue]:
        """``queue`` without the issues in review whose labels were refused and did not change since. A ready issue
        is a person's new request (its refusal put it back to open): it is tried, and said, again."""
        kept = []
        for issue in queue:
            said = self.said.get(issue.key)
            if said is not None and (issue.status == Status.READY or said != tuple(sorted(issue.labels))):
                del self.said[issue.key]
            elif said is not None:
                continue
            kept.append(issue)
        return kept
