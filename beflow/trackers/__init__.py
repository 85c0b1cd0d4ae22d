"""Trackers: where issues live. :func:`open_tracker` gives the one the project's config names."""

from __future__ import annotations

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
