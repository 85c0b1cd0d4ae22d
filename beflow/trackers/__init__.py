"""Trackers: where issues live. :func:`open_tracker` gives the one the project's config names."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from beflow.config import GitHubTrackerSettings, Project
from beflow.system import hardening
from beflow.trackers.base import (
    TRANSITIONS,
    Claim,
    ClaimInfo,
    Comment,
    FileProblem,
    Issue,
    Listing,
    ReadsOnce,
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
    if isinstance(settings, GitHubTrackerSettings):
        from beflow.trackers.github import open_github  # httpx is imported only by projects that use GitHub

        hardening.keep_private()  # the process holds a token from here on: no other process reads it
        _withhold_from_git(project)
        return open_github(project, settings)
    return LocalTracker(project.tracker_dir, project.directory)


def _withhold_from_git(project: Project) -> None:
    """The tracker's secret variables, and any other holding the same value, never reach a git command."""
    from beflow.agent import agent_env

    agent_env.withhold_from_git(project.config)


@contextlib.contextmanager
def reading_once(tracker: Tracker) -> Iterator[None]:
    """Within the block, the tracker reads its issues once and answers every question from that reading (its own
    writes start a new one); a tracker that cannot do that reads as usual."""
    with tracker.reading_once() if isinstance(tracker, ReadsOnce) else contextlib.nullcontext():
        yield
