"""``.beflow/config.json``: the models for every key (docs/config.md), discovery and loading.

Discovery: ``--config PATH``, else ``$BEFLOW_CONFIG``, else the nearest ``.beflow/config.json`` from the current
directory up to the git top level; no file means defaults. The project directory is the directory holding
``.beflow/`` (for a named file elsewhere: the file's directory; with no file: the git top level, else the current
directory). A ``config.json`` at the project's root is the application's, never beflow's: it is not read.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from beflow import ACPX_VERSION
from beflow.errors import ConfigError
from beflow.paths import STATE_DIR, beflow_home, git_toplevel, slug
from beflow.validation import Problem, line_of, read_json5, validate

CONFIG_NAME = "config.json"
#: Where beflow's project config lives, relative to the project directory: a home that is beflow's alone.
CONFIG_PATH = Path(STATE_DIR) / CONFIG_NAME

Permissions = Literal["approve-all", "approve-reads", "deny-all"]

# JSON has real numbers and booleans: `"60"` or `true` for a number, `"no"` or `0` for a boolean are mistakes to
# report, not values to guess at (pydantic's lax mode would take them).
Seconds = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, gt=0)]
Flag = Annotated[bool, Field(strict=True)]


class Model(BaseModel):
    """Strict base: unknown keys are errors, values are checked on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AgentCommand(Model):
    """A raw ACP agent command, passed to acpx as ``--agent``."""

    command: str = Field(min_length=1)


class LocalTrackerSettings(Model):
    kind: Literal["local"] = "local"
    #: The forge whose webhooks concern it (``/hooks/<forge>``; None: none do).
    forge: ClassVar[str | None] = None
    dir: str = ".beflow/issues"

    def secret_env(self) -> list[str]:
        """The environment variables holding this tracker's secrets: none (files on disk)."""
        return []

    def agent_gets_secrets(self) -> bool:
        return False

    def issues_in_checkout(self) -> bool:
        """Whether the issues are files of the checkout (a supervised run writes its issue's status there)."""
        return True

    def outside_service(self) -> bool:
        """Whether the issues live in a service over the network (slower to ask, and open to the world)."""
        return False

    def status_label_prefix(self) -> str | None:
        """What starts a label that says a status (none: the local tracker keeps status in the file)."""
        return None

    def implied_code_host(self) -> CodeHostSettings:
        """The code host when ``code_host`` is left out: none for local issues."""
        return NoCodeHostSettings(kind="none")


class _ServiceTracker:
    """What a tracker of an outside service (GitHub, GitLab, Linear) says of itself: its token is a secret of every
    run, its issues are not files of the checkout, and beflow's statuses it has no place for are labels."""

    if TYPE_CHECKING:  # (each tracker's settings model declares them, with its own defaults)
        token_env: str
        agent_token: bool
        status_prefix: str

    def secret_env(self) -> list[str]:
        """The environment variables holding this tracker's secrets: every run masks their values and withholds
        them from the agent (docs/safety.md)."""
        return [self.token_env]

    def agent_gets_secrets(self) -> bool:
        """Whether the agent's environment keeps :meth:`secret_env` (``agent_token``)."""
        return self.agent_token

    def issues_in_checkout(self) -> bool:
        return False

    def outside_service(self) -> bool:
        return True

    def status_label_prefix(self) -> str | None:
        return self.status_prefix


class GitHubTrackerSettings(_ServiceTracker, Model):
    """GitHub Issues (docs/trackers.md): which issues are beflow's, where status lives, how claims are leased."""

    kind: Literal["github"]
    #: The forge whose webhooks concern it (``/hooks/<forge>``; None: none do).
    forge: ClassVar[str | None] = "github"
    #: ``owner/name``; left out, it is read from the checkout's ``origin`` remote.
    repo: str | None = None
    #: An issue is beflow's when it carries every one of these labels (and is not a pull request).
    labels: list[Annotated[str, Field(min_length=1, max_length=50)]] = Field(default_factory=lambda: ["beflow"])
    #: Status labels are this prefix and the status: ``beflow:ready``, ``beflow:in-progress``, ...
    status_prefix: str = Field(default="beflow:", min_length=1, max_length=30)
    #: The environment variable holding the token (else ``gh auth token``).
    token_env: str = Field(default="GITHUB_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: The REST API's base URL; else ``$GITHUB_API_URL``; else https://api.github.com.
    api_url: str | None = None
    #: Seconds a claim lasts without renewal: after that another watcher may take the issue over.
    lease: Seconds = 300.0
    #: Whether the agent's environment gets the token (it does not by default).
    agent_token: Flag = False

    def implied_code_host(self) -> CodeHostSettings:
        """The issues' own repository, through the same API and token."""
        return GitHubCodeHostSettings(kind="github", repo=self.repo, api_url=self.api_url, token_env=self.token_env)

    @field_validator("repo")
    @classmethod
    def _owner_slash_name(cls, value: str | None) -> str | None:
        return _owner_slash_name(value)

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return _http_url(value)


class GitLabTrackerSettings(_ServiceTracker, Model):
    """GitLab issues (docs/trackers.md): which issues are beflow's, where status lives, how claims are leased."""

    kind: Literal["gitlab"]
    #: The forge whose webhooks concern it (``/hooks/<forge>``; None: none do).
    forge: ClassVar[str | None] = "gitlab"
    #: The project's path (``group/name``, subgroups included); left out, it is read from the checkout's ``origin``.
    project: str | None = None
    #: The GitLab instance: gitlab.com, or a self-managed one's address (its REST API is ``<url>/api/v4``).
    url: str = "https://gitlab.com"
    #: An issue is beflow's when it carries every one of these labels.
    labels: list[Annotated[str, Field(min_length=1, max_length=50)]] = Field(default_factory=lambda: ["beflow"])
    #: Status labels are this prefix and the status: ``beflow:ready``, ``beflow:in-progress``, ...
    status_prefix: str = Field(default="beflow:", min_length=1, max_length=30)
    #: The environment variable holding the token (else ``glab config get token --host <host>``).
    token_env: str = Field(default="GITLAB_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: Seconds a claim lasts without renewal: after that another watcher may take the issue over.
    lease: Seconds = 300.0
    #: Confidential issues are beflow's too (they are skipped by default: an agent's words about them are public
    #: wherever its branch and merge request are).
    confidential: Flag = False
    #: Whether the agent's environment gets the token (it does not by default).
    agent_token: Flag = False

    def implied_code_host(self) -> CodeHostSettings:
        """The issues' own project, on the same instance with the same token."""
        return GitLabCodeHostSettings(kind="gitlab", project=self.project, url=self.url, token_env=self.token_env)

    @field_validator("project")
    @classmethod
    def _project_path(cls, value: str | None) -> str | None:
        return _project_path(value)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return _instance_url(value)


#: The kinds of Linear workflow state (``WorkflowState.type``) a setting may name.
LinearStateType = Literal["triage", "backlog", "unstarted", "started", "completed", "canceled"]


class LinearTrackerSettings(_ServiceTracker, Model):
    """Linear issues of one team (docs/trackers.md): which issues are beflow's, how beflow's statuses map to the
    team's workflow states, how claims are leased."""

    kind: Literal["linear"]
    #: The forge whose webhooks concern it (``/hooks/<forge>``; None: none do).
    forge: ClassVar[str | None] = "linear"
    #: The team's key (``ENG``: the start of its issues' identifiers).
    team: str = Field(pattern=r"^[A-Za-z0-9_]{1,20}$")
    #: Only the issues of this project (by name), when given.
    project: str | None = Field(default=None, min_length=1, max_length=200)
    #: An issue is beflow's when it carries every one of these labels (names compared without regard to case).
    labels: list[Annotated[str, Field(min_length=1, max_length=50)]] = Field(default_factory=lambda: ["beflow"])
    #: Labels for the statuses Linear's workflow has no state for: ``beflow:failed``, ``beflow:open``, ...
    status_prefix: str = Field(default="beflow:", min_length=1, max_length=30)
    #: The environment variable holding the personal API key or OAuth token.
    token_env: str = Field(default="LINEAR_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: Linear's GraphQL endpoint.
    api_url: str = "https://api.linear.app/graphql"
    #: The workflow state types whose issues are ready (``beflow:ready`` makes any other not-started issue ready).
    ready_states: list[LinearStateType] = Field(
        default_factory=lambda: list[LinearStateType](["unstarted"]), min_length=1
    )
    #: The name of the team's state that means review (left out: a started state named "Review" or "In Review").
    review_state: str | None = Field(default=None, min_length=1, max_length=100)
    #: Seconds a claim lasts without renewal: after that another watcher may take the issue over.
    lease: Seconds = 300.0
    #: Whether the agent's environment gets the token (it does not by default).
    agent_token: Flag = False

    def implied_code_host(self) -> CodeHostSettings:
        """None: Linear keeps no code; ``code_host`` names where the branches go."""
        return NoCodeHostSettings(kind="none")

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        checked = _http_url(value)
        assert checked is not None
        return checked

    @field_validator("ready_states")
    @classmethod
    def _not_started(cls, value: list[LinearStateType]) -> list[LinearStateType]:
        late = [kind for kind in value if kind in ("started", "completed", "canceled")]
        if late:
            raise ValueError(f"a ready issue is one not started yet: {', '.join(late)} cannot be ready")
        return list(dict.fromkeys(value))


class JiraTransitions(Model):
    """The names of the workflow's transitions beflow takes (a transition's name, or the name of the status it goes
    to, compared without regard to case). A status beflow needs none for is reached by any transition to a status of
    the right category, or is a label under ``status_prefix``."""

    #: Into a status of the "In Progress" category: a run starts.
    in_progress: str = Field(default="In Progress", min_length=1, max_length=100)
    #: A run opened a pull request (left out: the issue stays where it is, labelled ``<status_prefix>review``).
    review: str | None = Field(default=None, min_length=1, max_length=100)
    #: Into a status of the "Done" category: the work is accepted (``beflow issues done``).
    done: str = Field(default="Done", min_length=1, max_length=100)


class JiraVisibility(Model):
    """Who may see beflow's claim comments (Jira's comment visibility): Jira tells of a comment only those who may
    see it, so a claim restricted to a role or group the account is in notifies no one else (docs/trackers.md)."""

    type: Literal["role", "group"]
    #: The project role's name (``Developers``) or the group's (``beflow-bots``).
    value: str = Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")


class JiraTrackerSettings(_ServiceTracker, Model):
    """Jira Cloud issues of one project (docs/trackers.md): which issues are beflow's, the workflow's transitions
    beflow takes, how claims are leased. The token is an Atlassian API token, sent with the account's email."""

    kind: Literal["jira"]
    #: The forge whose webhooks concern it (``/hooks/<forge>``; None: none do).
    forge: ClassVar[str | None] = "jira"
    #: The Jira Cloud site: ``https://acme.atlassian.net`` (its REST API is ``<site>/rest/api/3``).
    site: str
    #: The project's key (``WID``: the start of its issues' keys).
    project: str = Field(pattern=r"^[A-Z][A-Z0-9_]{0,19}$")
    #: An issue is beflow's when it carries every one of these labels (Jira's labels hold no spaces).
    labels: list[Annotated[str, Field(min_length=1, max_length=50, pattern=r"^\S+$")]] = Field(
        default_factory=lambda: ["beflow"]
    )
    #: More JQL the issues must match (``component = Backend``), and-ed with the project and the labels.
    jql: str | None = Field(default=None, min_length=1, max_length=1000)
    transitions: JiraTransitions = Field(default_factory=JiraTransitions)
    #: The issue type of the issues beflow files (``beflow issues new``): one the account may create in the project
    #: (``beflow doctor`` checks it).
    issue_type: str = Field(default="Task", min_length=1, max_length=60, pattern=r"^[^\x00-\x1f\x7f]+$")
    #: Labels for the statuses Jira's workflow has no category for: ``beflow:failed``, ``beflow:review``, ...
    status_prefix: str = Field(default="beflow:", min_length=1, max_length=30, pattern=r"^\S+$")
    #: The environment variable holding the account's email, sent with the token (Jira Cloud's basic auth).
    email_env: str = Field(default="JIRA_EMAIL", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: The environment variable holding the API token.
    token_env: str = Field(default="JIRA_API_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: Seconds a claim lasts without renewal: after that another watcher may take the issue over.
    lease: Seconds = 300.0
    #: Who may see the claim comments (None: everyone who may see the issue, and its watchers are told of each).
    claim_visibility: JiraVisibility | None = None
    #: Whether the agent's environment gets the token (it does not by default).
    agent_token: Flag = False

    def implied_code_host(self) -> CodeHostSettings:
        """None: Jira keeps no code; ``code_host`` names where the branches go."""
        return NoCodeHostSettings(kind="none")

    @field_validator("site")
    @classmethod
    def _site(cls, value: str) -> str:
        checked = _http_url(value)
        assert checked is not None
        return checked.removesuffix("/rest/api/3")

    @field_validator("jql")
    @classmethod
    def _jql(cls, value: str | None) -> str | None:
        if value is not None and re.search(r"(?i)\border\s+by\s*$", value):
            raise ValueError("its ORDER BY names no field (say `ORDER BY Rank ASC`, or leave it out for beflow's)")
        return value


def _project_path(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+", value):
        raise ValueError('expected a project path, "group/name" (or "group/subgroup/name")')
    return value


def _instance_url(value: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
        raise ValueError('expected an http(s) URL, such as "https://gitlab.example.com"')
    return value.rstrip("/").removesuffix("/api/v4")


def _owner_slash_name(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", value):
        raise ValueError('expected "owner/name"')
    return value


def _http_url(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
        raise ValueError('expected an http(s) URL, such as "https://github.example.com/api/v3"')
    return value.rstrip("/") if value else value


Tracker = Annotated[
    LocalTrackerSettings | GitHubTrackerSettings | GitLabTrackerSettings | LinearTrackerSettings | JiraTrackerSettings,
    Field(discriminator="kind"),
]


class GitHubCodeHostSettings(Model):
    """GitHub as the code host (docs/config.md): where runs' branches are pushed and proposed as pull requests."""

    kind: Literal["github"]
    #: The forge whose webhooks concern it (``/hooks/<forge>``; None: none do).
    forge: ClassVar[str | None] = "github"
    #: ``owner/name``; left out, it is read from the checkout's ``origin`` remote.
    repo: str | None = None
    #: The REST API's base URL; else ``$GITHUB_API_URL``; else https://api.github.com.
    api_url: str | None = None
    #: The environment variable holding the token (else ``gh auth token``).
    token_env: str = Field(default="GITHUB_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("repo")
    @classmethod
    def _owner_slash_name(cls, value: str | None) -> str | None:
        return _owner_slash_name(value)

    @field_validator("api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return _http_url(value)

    def secret_env(self) -> list[str]:
        """The environment variables holding this code host's secrets: masked in every run, never the agent's."""
        return [self.token_env]


class GitLabCodeHostSettings(Model):
    """GitLab as the code host (docs/config.md): where runs' branches are pushed and proposed as merge requests."""

    kind: Literal["gitlab"]
    #: The forge whose webhooks concern it (``/hooks/<forge>``; None: none do).
    forge: ClassVar[str | None] = "gitlab"
    #: The project's path (``group/name``); left out, it is read from the checkout's ``origin`` remote.
    project: str | None = None
    #: The GitLab instance: gitlab.com, or a self-managed one's address.
    url: str = "https://gitlab.com"
    #: The environment variable holding the token (else ``glab config get token --host <host>``).
    token_env: str = Field(default="GITLAB_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("project")
    @classmethod
    def _project_path(cls, value: str | None) -> str | None:
        return _project_path(value)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return _instance_url(value)

    def secret_env(self) -> list[str]:
        """The environment variables holding this code host's secrets: masked in every run, never the agent's."""
        return [self.token_env]


class NoCodeHostSettings(Model):
    """No code host: branches stay in the local repository."""

    kind: Literal["none"]
    #: The forge whose webhooks concern it (``/hooks/<forge>``; None: none do).
    forge: ClassVar[str | None] = None

    def secret_env(self) -> list[str]:
        return []


CodeHostSettings = Annotated[
    GitHubCodeHostSettings | GitLabCodeHostSettings | NoCodeHostSettings, Field(discriminator="kind")
]


class Worktrees(Model):
    dir: str | None = None
    base: str = "HEAD"
    include: list[str] = Field(default_factory=list)


class Hook(Model):
    command: str = Field(min_length=1)
    timeout: Seconds = 60.0


HookSpec = str | Hook


class Hooks(Model):
    after_create: HookSpec | None = None
    before_run: HookSpec | None = None
    after_run: HookSpec | None = None
    before_remove: HookSpec | None = None

    def get(self, name: str) -> Hook | None:
        spec = getattr(self, name)
        return Hook(command=spec) if isinstance(spec, str) else spec


class AfterRun(Model):
    commit: Flag = True
    comment: Flag = True
    #: Push ``beflow/<key>`` and open (or update) a pull request; needs a code host (``code_host``).
    pull_request: Flag = False
    #: Pull requests are opened as drafts.
    draft: Flag = True
    #: The pull request's description says ``Closes #<key>``, so that merging it closes the issue (for issues of the
    #: code host's own repository; the issue is linked either way).
    closes_issue: Flag = False


class AfterReview(Model):
    """What beflow does once people reviewed a pull request it opened (docs/rounds.md#landing)."""

    #: ``"approved-and-green"``: merge it once ``approvals`` trusted people approved it (none asks for changes,
    #: beflow's own token never counts) and every check of its head passed (none failing or pending); the issue
    #: moves to done and the branch is deleted. Left out: people merge.
    merge: Literal["approved-and-green"] | None = None
    method: Literal["merge", "squash", "rebase"] = "merge"
    approvals: int = Field(default=1, ge=1, le=20)


class Judge(Model):
    """How best of N picks its candidate (docs/runs.md#best-of-n): the checks each candidate's work runs, in its
    sandbox as hooks are; ``reviewer``: an agent that reads the passing candidates' diffs and chooses one."""

    checks: list[HookSpec] = Field(default_factory=list)
    reviewer: str | AgentCommand | None = None

    def commands(self) -> list[Hook]:
        return [Hook(command=spec) if isinstance(spec, str) else spec for spec in self.checks]


Currency = Annotated[str, Field(min_length=1)]
Money = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]


class Attempts(Model):
    """Best of N: several candidates at one issue, judged, one pull request (docs/runs.md)."""

    #: Candidates per issue; left out, one per entry of ``agents`` (none: one run, as without this key).
    count: Count | None = None
    #: The agent of each candidate, in turn (``agent``'s forms); left out, the configured ``agent`` for all.
    agents: list[str | AgentCommand] = Field(default_factory=list)
    judge: Judge = Field(default_factory=Judge)
    #: Keep the other candidates' branches (``beflow-attempts/<key>/c<N>``) once one is chosen.
    keep: Flag = True
    #: The most candidates ``--attempts`` and the label ``attempts:N`` may ask for.
    max: Count = 4
    #: After judging, wait (``blocked``, no lane held, at most ``limits.wait``) for a person to confirm or override
    #: the choice before anything is proposed.
    confirm: Flag = False
    #: The most all of one issue's candidates and its reviewer may cost together, in ``limits.currency``: reached,
    #: every one still running is stopped and no more start.
    max_cost: Money | None = None

    @model_validator(mode="after")
    def _within_max(self) -> Attempts:
        if self.count is not None and self.count > self.max:
            raise ValueError(f"count ({self.count}) is more than max ({self.max})")
        return self

    def configured(self) -> int:
        """How many candidates an issue gets when neither ``--attempts`` nor a label says (1: a plain run)."""
        return self.count if self.count is not None else max(1, len(self.agents))

    def agent_of(self, candidate: int, default: str | AgentCommand) -> str | AgentCommand:
        """The agent of candidate ``candidate`` (from 1): ``agents`` in turn, else ``default``."""
        return self.agents[(candidate - 1) % len(self.agents)] if self.agents else default


class Watch(Model):
    interval: Seconds = 30.0
    concurrency: Count = 2
    max_attempts: Count = 3
    backoff: Seconds = 10.0
    backoff_max: Seconds = 300.0


class Limits(Model):
    """What an unattended run may take (docs/config.md#limits): silence, tokens and cost (as the agent reports
    them over ACP), and a watch's spending per day."""

    #: Seconds the agent may send nothing (no message, tool call or output) before the run is stopped as stalled.
    stall: Seconds = 300.0
    #: The most one run may cost, in ``currency``; a run past it is stopped as over budget.
    cost_per_run: Money | None = None
    #: The most tokens one run may use.
    tokens_per_run: Count | None = None
    #: What a watch may spend in a day (the local calendar day) before it stops dispatching.
    cost_per_day: Money | None = None
    #: The ISO 4217 currency of the cost budgets: the one the agent reports its cost in.
    currency: Currency = "USD"
    #: Seconds an issue waits ``blocked`` for a person's answer to its agent's question before it fails, saying so.
    wait: Seconds = 86400.0

    @field_validator("currency")
    @classmethod
    def _iso_code(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Z]{3}", value):
            raise ValueError('expected an ISO 4217 currency code in capitals, such as "USD" or "EUR"')
        return value


class Attend(Model):
    permissions: Permissions = "approve-reads"


#: What names a permission request to escalate (acpx's matchers): a tool kind (``edit``, ``execute``, ``fetch``, ...),
#: a tool's name or title, or ``*`` (every request). Compared without case.
PermissionMatcher = Annotated[
    str, Field(min_length=1, max_length=100, pattern=r"^(\*|[A-Za-z0-9_][A-Za-z0-9_.:/ -]*)$")
]


class PermissionPolicy(Model):
    """``permissions`` as an object (docs/config.md#permissions): the mode, and the requests a person decides —
    the run's turn ends on such a request, and its issue waits ``blocked`` on the question (docs/questions.md)."""

    mode: Permissions
    #: Requests asked of a person even where ``mode`` would decide them (acpx ``--permission-policy`` ``escalate``).
    escalate: list[PermissionMatcher] = Field(default_factory=list, max_length=50)
    #: What becomes of a request ``mode`` leaves undecided (``approve-reads``: all but reads and searches): denied, as
    #: the string form does, or asked of a person (acpx ``--non-interactive-permissions fail``).
    undecided: Literal["deny", "ask"] = "deny"

    @model_validator(mode="after")
    def _undecided_needs_a_mode_that_leaves_some(self) -> PermissionPolicy:
        if self.undecided == "ask" and self.mode != "approve-reads":
            raise ValueError(
                f'undecided: "ask" needs mode "approve-reads" ({self.mode} decides every request itself); '
                "name the requests to ask with escalate"
            )
        return self

    @property
    def asks(self) -> bool:
        """Whether any request can become a person's question."""
        return bool(self.escalate) or self.undecided == "ask"


EnvName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_*?\[\]!.-]+$")]


class AgentEnv(Model):
    """How the agent's environment differs from the default (docs/safety.md#the-agents-environment): names and
    globs (``fnmatch``) passed although the default drop list names them, and names dropped besides."""

    pass_: list[EnvName] = Field(default_factory=list, alias="pass")
    drop: list[EnvName] = Field(default_factory=list)


class Mcp(Model):
    enabled: Flag = False
    self_server: Flag = Field(default=False, alias="self")


HostName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.:\[\]-]+$")]
OriginUrl = Annotated[str, Field(min_length=1, max_length=300, pattern=r"^https?://[A-Za-z0-9.:\[\]-]+$")]


class Http(Model):
    """``beflow watch --http`` and ``beflow serve`` (docs/dashboard.md)."""

    #: Cancel a run, retry an issue, set a status from the page and the API (POST, token, same origin).
    actions: Flag = False
    #: Host names the server answers to besides its bind address (DNS rebinding is refused for every other).
    hosts: list[HostName] = Field(default_factory=list)
    #: Origins besides the server's own that may call the API from a browser.
    origins: list[OriginUrl] = Field(default_factory=list)


EnvVar = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class WebhookSecrets(Model):
    """The environment variable holding each forge's webhook secret (docs/webhooks.md): a forge with none named is
    refused at ``/hooks/<forge>``."""

    github: EnvVar | None = None
    gitlab: EnvVar | None = None
    linear: EnvVar | None = None
    jira: EnvVar | None = None

    def named(self) -> dict[str, str]:
        """Forge → variable, for the forges that name one."""
        return {forge: name for forge, name in self.model_dump().items() if name}


class Webhooks(Model):
    """``POST /hooks/{github,gitlab,linear,jira}`` on ``beflow watch --http`` and ``beflow serve`` (docs/webhooks.md): a
    verified delivery of the configured tracker's or code host's forge wakes the watch at once."""

    secret_env: WebhookSecrets = Field(default_factory=WebhookSecrets)


class Feedback(Model):
    """Review rounds (docs/rounds.md): what counts as feedback on a run's work, from whom, and how many rounds."""

    #: A conversation comment starts a round only when it mentions this (a word, any case).
    trigger: str = Field(default="@beflow", min_length=1)
    #: Seconds to wait after the latest piece before a round starts (reviewers batch their comments).
    settle: Seconds = 60.0
    max_rounds: int = Field(default=5, ge=1)
    #: Rounds failed checks may start (with ``checks``) before the issue is flagged ``needs-human`` for a person.
    max_fix_rounds: int = Field(default=2, ge=0)
    #: Failed check runs and commit statuses on the pull request's head start rounds too.
    checks: bool = False
    #: Logins whose feedback counts besides the repository's owners, members and collaborators.
    allow: list[str] = Field(default_factory=list)


class Triggers(Model):
    """What hands an issue to beflow (docs/config.md#triggers): the ready label (``label``, the way it always was), a
    mention of ``feedback.trigger`` in a comment by a person who may give beflow work (``mention``), an assignment to
    the user of beflow's token (``assign``). A mention or an assignment labels the issue ready (GitHub, GitLab). With
    ``label: false`` only what beflow itself handed over is ready (beflow.trackers.handovers): a tracker that cannot
    mark its hand-overs refuses it (beflow.app)."""

    label: Flag = True
    mention: Flag = False
    assign: Flag = False


SandboxPath = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00]+$")]
#: A host the sandbox's proxy lets through: ``name``, ``name:port``, or ``*.domain`` (any name below it).
SandboxHost = Annotated[str, Field(min_length=1, max_length=260, pattern=r"^(\*\.)?[A-Za-z0-9._-]+(:[0-9]{1,5})?$")]
#: The agents with a preset (beflow/sandbox/presets.py), and "agent": the preset named after ``agent``, if any.
SandboxPreset = Literal["agent", "codex", "claude", "gemini", "opencode"]


#: ``sandbox.enabled``: ``"auto"`` sandboxes runs where the sandbox starts on this machine (else they run without it,
#: and a notice says so), ``true`` requires it (a run whose sandbox cannot start fails), ``false`` never uses it.
SandboxChoice = Literal["auto"] | Flag


class Sandbox(Model):
    """Unattended runs in a sandbox (docs/safety.md#the-sandbox): whether (``enabled``), what the agent may read and
    write besides its worktree and its preset's directories, and the hosts it may reach through beflow's proxy."""

    enabled: SandboxChoice = "auto"
    read: list[SandboxPath] = Field(default_factory=list)
    write: list[SandboxPath] = Field(default_factory=list)
    hosts: list[SandboxHost] = Field(default_factory=list)
    preset: SandboxPreset | None = "agent"


class LocalEngineSettings(Model):
    """The embedded engine: ``beflow watch`` dispatches and runs on this machine (docs/fleet.md)."""

    kind: Literal["local"] = "local"

    def secret_env(self) -> list[str]:
        return []


class TemporalEngineSettings(Model):
    """A fleet on Temporal (docs/fleet.md): ``beflow watch`` starts one workflow per issue, ``beflow worker`` runs
    them on any machine that can reach the service."""

    kind: Literal["temporal"]
    #: The Temporal frontend, ``host:port`` (``beflow temporal dev`` prints a local one).
    address: str = Field(default="127.0.0.1:7233", min_length=3, pattern=r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$")
    namespace: str = Field(default="default", min_length=1, max_length=200)
    #: The queue every worker polls for workflows and lane claims; each worker also has its own, named after it.
    task_queue: str = Field(default="beflow", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._\-]+$")
    #: Connect over TLS (Temporal Cloud, a production service).
    tls: Flag = False
    #: The environment variable holding the API key (Temporal Cloud); never the agent's.
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: Seconds a run's worker may go unheard before its run is resumed on another worker.
    heartbeat: Seconds = 30.0
    #: The environment variable holding the key (32 bytes, base64) that seals what the fleet stores in Temporal;
    #: the same on every machine of the fleet; never the agent's.
    encryption_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    def secret_env(self) -> list[str]:
        """The variables holding the API key and the encryption key, if any: masked in every run, withheld from the
        agent."""
        return [name for name in (self.api_key_env, self.encryption_key_env) if name]


Engine = Annotated[LocalEngineSettings | TemporalEngineSettings, Field(discriminator="kind")]


#: A name of acpx's agent registry (``claude``, ``codex``...): a word, never an option or a command.
AgentName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9._-]*$")]
#: A model id as the agent advertises it (``sonnet``, ``gpt-5.2``, ``anthropic/claude-opus``): never an option.
ModelName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]*$")]
LabelPrefix = Annotated[str, Field(min_length=1, max_length=30, pattern=r"^[^\s]+$")]


class Agents(Model):
    """Which agent and model an issue's labels may choose (docs/config.md#agents): ``agent:NAME`` picks one of
    ``allowed`` (the configured ``agent`` always may be), ``model:NAME`` one of ``models``. Anything else named by a
    label is refused, never run: an issue cannot name a command."""

    allowed: list[AgentName] = Field(default_factory=list)
    models: list[ModelName] = Field(default_factory=list)
    label_prefix: LabelPrefix = "agent:"
    model_prefix: LabelPrefix = "model:"


class Config(Model):
    """Every key of ``.beflow/config.json``, with its default (docs/config.md)."""

    agent: str | AgentCommand = "codex"
    #: The agent's model (acpx ``--model``), as the agent advertises it; left out: the agent's own default.
    model: ModelName | None = None
    agents: Agents = Field(default_factory=Agents)
    acpx: list[str] | None = Field(default=None, min_length=1)
    permissions: Permissions | PermissionPolicy = "approve-all"
    timeout: Seconds | None = 3600.0
    tracker: Tracker = Field(default_factory=LocalTrackerSettings)
    #: Where branches are pushed and proposed; left out, the GitHub tracker's repository (the local tracker: none).
    code_host: CodeHostSettings | None = None
    worktrees: Worktrees = Field(default_factory=Worktrees)
    hooks: Hooks = Field(default_factory=Hooks)
    after_run: AfterRun = Field(default_factory=AfterRun)
    after_review: AfterReview = Field(default_factory=AfterReview)
    prompt: str | None = None
    watch: Watch = Field(default_factory=Watch)
    open: dict[str, list[str]] = Field(default_factory=dict)
    attend: Attend = Field(default_factory=Attend)
    mcp: Mcp = Field(default_factory=Mcp)
    agent_env: AgentEnv = Field(default_factory=AgentEnv)
    http: Http = Field(default_factory=Http)
    webhooks: Webhooks = Field(default_factory=Webhooks)
    limits: Limits = Field(default_factory=Limits)
    feedback: Feedback = Field(default_factory=Feedback)
    triggers: Triggers = Field(default_factory=Triggers)
    attempts: Attempts = Field(default_factory=Attempts)
    sandbox: Sandbox = Field(default_factory=Sandbox)
    #: What dispatches and runs issues: this machine's ``beflow watch``, or a fleet on Temporal.
    engine: Engine = Field(default_factory=LocalEngineSettings)

    @field_validator("tracker", mode="before")
    @classmethod
    def _local_by_default(cls, value: object) -> object:
        # `{"tracker": {"dir": "issues"}}` means the local tracker, as the default does.
        if isinstance(value, dict) and "kind" not in value:
            return {"kind": "local", **value}
        return value

    def code_host_settings(self) -> CodeHostSettings:
        """The code host: ``code_host`` as configured, else the one the tracker implies (GitHub's repository for
        the GitHub tracker, GitLab's project for the GitLab tracker, none for the local one); a code host of the
        tracker's own kind takes what it leaves out from the tracker."""
        implied = self.tracker.implied_code_host()
        if self.code_host is None:
            return implied
        if type(self.code_host) is type(implied):
            # `{"kind": "gitlab"}` beside a GitLab tracker is that tracker's project, instance and token, but for
            # what it says itself.
            return implied.model_copy(update=self.code_host.model_dump(include=self.code_host.model_fields_set))
        return self.code_host

    def webhook_forges(self) -> set[str]:
        """The forges whose webhooks may wake a watch of this project: the tracker's and the code host's."""
        found = {self.tracker.forge, self.code_host_settings().forge}
        return {forge for forge in found if forge is not None}

    @property
    def permission_policy(self) -> PermissionPolicy:
        """``permissions``, the string form as the object it stands for (its mode; undecided requests denied)."""
        if isinstance(self.permissions, PermissionPolicy):
            return self.permissions
        return PermissionPolicy(mode=self.permissions)

    def acpx_argv(self) -> list[str]:
        """The argv prefix that starts acpx: configured, else ``acpx`` on PATH, else the pinned one via npx — with
        the pinned Node.js beside it when this machine's is older than acpx needs (:mod:`beflow.system.node`)."""
        if self.acpx:
            return list(self.acpx)
        if shutil.which("acpx"):
            return ["acpx"]
        from beflow.system import node  # (the process runner it asks node with: not for every config loaded)

        if node.too_old(node.version()):
            return node.npx_acpx()
        return ["npx", "-y", f"acpx@{ACPX_VERSION}"]

    def agent_label(self) -> str:
        return self.agent if isinstance(self.agent, str) else self.agent.command


class Project(BaseModel):
    """The loaded configuration and where it came from."""

    model_config = ConfigDict(frozen=True)

    config: Config
    config_path: Path | None
    directory: Path

    @property
    def config_name(self) -> str:
        """The config file as messages name it: the one in use, else where ``beflow init`` would write it."""
        return str(self.config_path) if self.config_path else str(CONFIG_PATH)

    @property
    def state_dir(self) -> Path:
        return self.directory / ".beflow"

    @property
    def tracker_dir(self) -> Path:
        tracker = self.config.tracker
        assert isinstance(tracker, LocalTrackerSettings)
        return (self.directory / tracker.dir).resolve()

    @property
    def worktrees_dir(self) -> Path:
        configured = self.config.worktrees.dir
        if configured:
            return (self.directory / Path(configured).expanduser()).resolve()
        return beflow_home() / "worktrees" / slug(self.directory.name + "-" + str(self.directory), max_length=24)


def find_config(explicit: Path | None = None, cwd: Path | None = None) -> Path | None:
    """The config file to use, in discovery order; an explicitly named file must exist."""
    cwd = cwd or Path.cwd()
    named = explicit or (Path(os.environ["BEFLOW_CONFIG"]) if os.environ.get("BEFLOW_CONFIG") else None)
    if named is not None:
        # Absolute but not resolved: a config file that is a symlink belongs to the directory of the link.
        named = Path(os.path.abspath(cwd / named.expanduser()))
        if not named.is_file():
            source = "--config" if explicit else "BEFLOW_CONFIG"
            raise ConfigError(f"{named}: no such config file (named by {source})")
        return named
    for directory in search_dirs(cwd):
        candidate = directory / CONFIG_PATH
        if candidate.is_file():
            return candidate
    return None


def search_dirs(cwd: Path) -> list[Path]:
    """The directories whose ``.beflow/config.json`` counts, nearest first: the current directory and its parents up
    to the git top level (outside git, the current directory alone: never a stray one further up, such as
    ``~/.beflow``)."""
    here = Path(os.path.abspath(cwd))
    top = git_toplevel(here)
    if top is None:
        return [here]
    top = top.resolve()
    found = []
    for directory in (here, *here.parents):
        found.append(directory)
        if directory.resolve() == top:
            return found
    return [here]  # not below its own top level (a path through a symlink): the current directory alone


def project_directory(config_path: Path) -> Path:
    """The project a config file belongs to: the directory holding ``.beflow/`` for ``.beflow/config.json``, else
    (a file named by ``--config`` or ``$BEFLOW_CONFIG``) the file's own directory."""
    parent = config_path.parent
    return parent.parent if parent.name == STATE_DIR else parent


def earlier_root_config(project: Project) -> Path | None:
    """A ``config.json`` at the project's root that looks like beflow's (earlier versions read it there): every key
    is one of beflow's. An application's own ``config.json`` has other keys and is none of beflow's business."""
    path = project.directory / CONFIG_NAME
    try:
        if not path.is_file() or path.stat().st_size > 1_000_000:
            return None
        _, data = read_json5(path)
    except (OSError, ConfigError):
        return None
    keys = {field.alias or name for name, field in Config.model_fields.items()}
    return path if isinstance(data, dict) and data and set(data) <= keys else None


def load_config_file(path: Path) -> Config:
    """Parse and validate one config file; every problem is reported at once."""
    text, data = read_json5(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}")
    config = validate(Config, data, path=path, text=text)
    if isinstance(config.engine, TemporalEngineSettings) and config.limits.cost_per_day is not None:
        # The fleet's dispatcher keeps no day's ledger: a budget it would silently never hold is refused instead.
        keys = ("limits", "cost_per_day")
        why = (
            'a fleet ("engine": {"kind": "temporal"}) does not hold a day\'s budget: its workflows are dispatched '
            "without counting what the day's runs cost. Remove limits.cost_per_day (limits.cost_per_run and "
            "limits.tokens_per_run still hold on every worker), or use the embedded engine"
        )
        raise ConfigError(Problem(path, line_of(text, keys), ".".join(keys), why).render())
    return config


def load_project(explicit: Path | None = None, cwd: Path | None = None) -> Project:
    """Find and load the configuration; the project directory follows from where it was found."""
    cwd = (cwd or Path.cwd()).resolve()
    path = find_config(explicit, cwd)
    if path is None:
        return Project(config=Config(), config_path=None, directory=git_toplevel(cwd) or cwd)
    return Project(config=load_config_file(path), config_path=path, directory=project_directory(path))
