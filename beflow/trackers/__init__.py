"""Trackers: where issues live. :func:`open_tracker` gives the one the project's config names."""

from __future__ import annotations

from beflow.config import GitHubTracker, Project
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
        from beflow.trackers.github import open_github  # httpx is imported only by projects that use GitHub

        return open_github(project, settings)
    return LocalTracker(project.tracker_dir, project.directory)
