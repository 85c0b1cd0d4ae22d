"""The composition root: the one place that turns the config's kinds into objects.

Each choice by kind is one registry, ``kind → factory``, read from the ``kind`` the config names: the tracker
(:data:`TRACKERS`), the code host (:data:`CODE_HOSTS`) and the engine (:data:`ENGINES`). The engine decides how
issues are held (its claim store over the tracker's own); the tracker and the code host are built with it, and
every layer below gets the objects, or an opener of them, from here: none of them chooses by kind. What differs
between two trackers is a member of the Tracker protocol (:mod:`beflow.trackers.base`), never a check elsewhere.

Adding a tracker is its module in ``trackers/``, its settings model in ``config.py`` and one line in
:data:`TRACKERS` (docs/architecture.md); a code host or an engine the same. The modules of a kind are imported
only when a project uses it (httpx for GitHub, the Temporal SDK for a fleet).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from beflow.codehosts.base import CodeHost, Opened
from beflow.config import CodeHostSettings, Project
from beflow.errors import ConfigError
from beflow.system import hardening
from beflow.trackers.base import MarksHandOvers, Tracker
from beflow.trackers.claims import ClaimsOver
from beflow.validation import place_of

if TYPE_CHECKING:  # (a fleet's modules load with the Temporal SDK, for fleet projects only)
    from beflow.fleet.shapes import IssueState


@dataclass(frozen=True)
class TrackerKind:
    """How a tracker of one kind is opened, given the project and the engine's claims over its own."""

    open: Callable[[Project, ClaimsOver | None], Tracker]
    #: Whether it holds a secret (a token): the process then keeps itself private before opening it.
    holds_token: bool


@dataclass(frozen=True)
class CodeHostKind:
    """How a code host of one kind is opened, given the project's tracker (whose client it may share)."""

    open: Callable[[Project, CodeHostSettings, Tracker | None], CodeHost]


@dataclass(frozen=True)
class EngineKind:
    """What differs by engine: who holds an issue while it runs, and where its runs run."""

    #: The engine's claim store over each tracker's own (None: the tracker's own store is the authority).
    claims: Callable[[Project], ClaimsOver | None]
    #: Whether the engine's own workers run the issues (``beflow watch`` then starts their workflows).
    runs_elsewhere: bool
    #: Whether the engine's service answers (``beflow doctor``): ok, what was found, the fix; None: nothing to ask.
    probe: Callable[[Project], tuple[bool, str, str | None] | None]
    #: Where an issue's run is, as the engine tells it (``beflow issues show``); None: the engine keeps no state.
    state: Callable[[Project, Tracker, str], IssueState | None] | None = None
    #: What the engine needs installed, checked as it is opened: a UsageError naming the config's field and saying
    #: how to install it (``temporal``: beflow's ``temporal`` extra), so that every command refuses the same way.
    require: Callable[[Project], None] = lambda _project: None


# -- the kinds ------------------------------------------------------------------------------------------------------


def _local_tracker(project: Project, claims: ClaimsOver | None) -> Tracker:
    from beflow.trackers.local import LocalTracker

    return LocalTracker(project.tracker_dir, project.directory, claims=claims)


def _github_tracker(project: Project, claims: ClaimsOver | None) -> Tracker:
    from beflow.config import GitHubTrackerSettings
    from beflow.trackers.github import open_github  # httpx is imported only by projects that use GitHub

    settings = project.config.tracker
    assert isinstance(settings, GitHubTrackerSettings)  # (its registry line says so)
    return open_github(project, settings, claims)


def _gitlab_tracker(project: Project, claims: ClaimsOver | None) -> Tracker:
    from beflow.config import GitLabTrackerSettings
    from beflow.trackers.gitlab import open_gitlab  # httpx is imported only by projects that use GitLab

    settings = project.config.tracker
    assert isinstance(settings, GitLabTrackerSettings)  # (its registry line says so)
    return open_gitlab(project, settings, claims)


def _linear_tracker(project: Project, claims: ClaimsOver | None) -> Tracker:
    from beflow.config import LinearTrackerSettings
    from beflow.trackers.linear import open_linear  # httpx is imported only by projects that use Linear

    settings = project.config.tracker
    assert isinstance(settings, LinearTrackerSettings)  # (its registry line says so)
    return open_linear(project, settings, claims)


def _jira_tracker(project: Project, claims: ClaimsOver | None) -> Tracker:
    from beflow.config import JiraTrackerSettings
    from beflow.trackers.jira import open_jira  # httpx is imported only by projects that use Jira

    settings = project.config.tracker
    assert isinstance(settings, JiraTrackerSettings)  # (its registry line says so)
    return open_jira(project, settings, claims)


def _github_code_host(project: Project, settings: CodeHostSettings, tracker: Tracker | None) -> CodeHost:
    from beflow.codehosts.github import open_for

    return open_for(project, settings, tracker)


def _gitlab_code_host(project: Project, settings: CodeHostSettings, tracker: Tracker | None) -> CodeHost:
    from beflow.codehosts.gitlab import open_for  # httpx is imported only by projects that use GitLab

    return open_for(project, settings, tracker)


def _fleet_claims(project: Project) -> ClaimsOver:
    from beflow.fleet.claims import claims_over  # the Temporal SDK, for fleet projects only

    return claims_over(project)


def _fleet_require(project: Project) -> None:
    from beflow.fleet.remote import require_sdk

    require_sdk(project)


def _fleet_probe(project: Project) -> tuple[bool, str, str | None]:
    from beflow.fleet.remote import probe
    from beflow.fleet.shapes import engine_of

    return probe(engine_of(project))


def _fleet_state(project: Project, tracker: Tracker, key: str) -> IssueState | None:
    from beflow.fleet.claims import workflow_state

    return workflow_state(project, tracker.identity, key)


TRACKERS: dict[str, TrackerKind] = {
    "local": TrackerKind(_local_tracker, holds_token=False),
    "github": TrackerKind(_github_tracker, holds_token=True),
    "gitlab": TrackerKind(_gitlab_tracker, holds_token=True),
    "linear": TrackerKind(_linear_tracker, holds_token=True),
    "jira": TrackerKind(_jira_tracker, holds_token=True),
}
CODE_HOSTS: dict[str, CodeHostKind] = {
    "github": CodeHostKind(_github_code_host),
    "gitlab": CodeHostKind(_gitlab_code_host),
}
ENGINES: dict[str, EngineKind] = {
    "local": EngineKind(claims=lambda _project: None, runs_elsewhere=False, probe=lambda _project: None),
    "temporal": EngineKind(
        claims=_fleet_claims, runs_elsewhere=True, probe=_fleet_probe, state=_fleet_state, require=_fleet_require
    ),
}


# -- opening a project's objects ------------------------------------------------------------------------------------


def engine(project: Project) -> EngineKind:
    """The engine the config names (``engine``), once what it needs is known to be installed (else a UsageError
    saying how to install it: every command that opens the engine or a tracker refuses alike)."""
    kind = ENGINES[project.config.engine.kind]
    kind.require(project)
    return kind


def open_tracker(project: Project) -> Tracker:
    """The tracker the config names (``tracker``), holding issues as the engine does, ready to use."""
    kind = TRACKERS[project.config.tracker.kind]
    if kind.holds_token:
        hardening.keep_private()  # the process holds a token from here on: no other process reads it
        _withhold_from_git(project)
    tracker = kind.open(project, engine(project).claims(project))
    if not project.config.triggers.label and not isinstance(tracker, MarksHandOvers):
        raise ConfigError(
            f"{place_of(project.config_path, 'triggers', 'label')}triggers.label: false is not supported by the "
            f"{project.config.tracker.kind} tracker: only what beflow hands over would be ready, and it cannot mark "
            "its hand-overs there (GitHub and GitLab can)",
            fix=f'Remove "label" from "triggers" in {project.config_name} (the ready label stays a trigger).',
        )
    return tracker


def open_code_host(project: Project, tracker: Tracker | None = None) -> CodeHost | None:
    """The code host runs of ``project`` publish to, ready to use; None when there is none, or when no run will
    publish (``after_run.pull_request`` is false: then no token is looked for). Open it before any agent runs: it
    reads where to push from the checkout then. ``tracker``: the project's, whose client it may share."""
    settings = project.config.code_host_settings()
    if settings.kind == "none" or not project.config.after_run.pull_request:
        return None
    hardening.keep_private()
    _withhold_from_git(project)
    return CODE_HOSTS[settings.kind].open(project, settings, tracker)


def open_project(project: Project) -> Opened:
    """The project's tracker and code host, opened together (the code host shares the tracker's client)."""
    tracker = open_tracker(project)
    return Opened(tracker, open_code_host(project, tracker))


def _withhold_from_git(project: Project) -> None:
    """The project's secret variables, and any other holding the same value, never reach a git command."""
    from beflow.agent import agent_env

    agent_env.withhold_from_git(project.config)
