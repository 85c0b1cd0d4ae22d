"""Trackers: where issues live. :func:`open_tracker` gives the one the project's config names."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from beflow.config import GitHubTracker, Project
from beflow.errors import ConfigError
from beflow.trackers.base import (
    TRANSITIONS,
    Claim,
    ClaimInfo,
    Comment,
    FileProblem,
    Issue,
    Listing,
    Status,
    Tracker,
)
from beflow.trackers.local import LocalTracker

__all__ = [
    "TRANSITIONS",
    "Claim",
    "ClaimInfo",
    "Comment",
    "FileProblem",
    "Issue",
    "Listing",
    "LocalTracker",
    "Status",
    "Tracker",
    "open_tracker",
    "reading_once",
]


def open_tracker(project: Project) -> Tracker:
    """The tracker the config names (``tracker``), ready to use."""
    settings = project.config.tracker
    if isinstance(settings, GitHubTracker):
        where = f"{project.config_path}: " if project.config_path else ""
        raise ConfigError(
            f'{where}tracker: the GitHub tracker ("kind": "github") is not available yet in this version of beflow',
            fix='Use the local tracker for now: "tracker": {"kind": "local"} (or remove the key).',
        )
    return LocalTracker(project.tracker_dir, project.directory)


@contextlib.contextmanager
def reading_once(tracker: Tracker) -> Iterator[None]:
    """Within the block, the tracker reads its issues once and answers every question from that reading (its own
    writes start a new one); a tracker that cannot do that reads as usual."""
    hold = getattr(tracker, "reading_once", None)
    with hold() if callable(hold) else contextlib.nullcontext():
        yield
