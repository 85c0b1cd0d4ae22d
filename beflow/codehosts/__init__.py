"""Code hosts: where runs' branches are pushed and proposed. :func:`open_code_host` gives the one the config names
(``code_host``, else the one the tracker implies)."""

from __future__ import annotations

from beflow.agent import agent_env
from beflow.codehosts.base import CodeHost, PullRequest
from beflow.config import NoCodeHostSettings, Project
from beflow.system import hardening
from beflow.trackers import Tracker

__all__ = ["CodeHost", "PullRequest", "open_code_host"]


def open_code_host(project: Project, tracker: Tracker | None = None) -> CodeHost | None:
    """The code host runs of ``project`` publish to, ready to use; None when there is none, or when no run will
    publish (``after_run.pull_request`` is false: then no token is looked for). Open it before any agent runs: it
    reads where to push from the checkout then. ``tracker``: the project's, whose GitHub client it shares when both
    speak to the same GitHub with the same token."""
    settings = project.config.code_host_settings()
    if isinstance(settings, NoCodeHostSettings) or not project.config.after_run.pull_request:
        return None
    from beflow.codehosts.github import open_github  # httpx is imported only by projects that use GitHub
    from beflow.trackers.github import GitHubTracker

    hardening.keep_private()  # the process holds a token from here on: no other process reads it
    agent_env.withhold_from_git(project.config)
    if not isinstance(tracker, GitHubTracker):
        return open_github(project, settings)
    if project.config.code_host is None:  # implied by the tracker: its repository, as it resolved it
        settings = settings.model_copy(update={"repo": tracker.repo})
    return open_github(project, settings, tracker.api, tracker_repo=tracker.repo)
