"""The agent's environment: beflow's own, minus every secret the agent has no business holding.

An agent runs as the same user as beflow and does what an issue tells it; whatever its environment holds, it can
print, commit or send away. So by default the agent (acpx, the agent it starts, the hooks that run in its worktree
afterwards) gets beflow's environment with three kinds of variable taken out:

1. **the tracker's secrets** (each tracker's settings name their own: ``secret_env()``), the code host's, the
   webhooks' (``webhooks.secret_env``) and beflow's own, and any other variable holding the same value; only the
   tracker's own setting (``agent_token``) gives the tracker's back;
2. **the default drop list** (:data:`DEFAULT_DROP`): cloud provider credentials, ``*_TOKEN``, ``*_SECRET*``,
   ``*_PASSWORD``, ``SSH_AUTH_SOCK``, ``GPG_AGENT_INFO``, ...;
3. what ``agent_env.drop`` names.

The variables agents log in with (:data:`AGENT_KEYS`, each supported agent's documented API key variables) are
passed although the drop list matches some of them (``CLAUDE_CODE_OAUTH_TOKEN``), and ``agent_env.pass`` passes
anything but the tracker's secrets. Pure: a table test pins every rule (``tests/agent/test_agent_env.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Protocol

from beflow.config import AgentCommand, Config, Project

#: The variables each agent of acpx's registry authenticates with (its documentation's API key and login-token
#: variables), keyed by acpx name. A raw agent command gets all of them: beflow does not know which it reads.
AGENT_KEYS: dict[str, tuple[str, ...]] = {
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY", "AZURE_OPENAI_API_KEY"),
    "claude": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "opencode": (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "OPENROUTER_API_KEY",
        "GROQ_API_KEY",
        "MISTRAL_API_KEY",
        "DEEPSEEK_API_KEY",
        "XAI_API_KEY",
    ),
    "cursor": ("CURSOR_API_KEY",),
    "copilot": ("COPILOT_GITHUB_TOKEN",),
    "qwen": ("DASHSCOPE_API_KEY", "OPENAI_API_KEY"),
    "kimi": ("MOONSHOT_API_KEY", "KIMI_API_KEY"),
    "droid": ("FACTORY_API_KEY",),
}

#: What no agent gets by default (names and ``fnmatch`` globs, case-sensitive as environment names are): cloud
#: provider credentials, anything named like a token, secret, password or key, and the agents that sign or log in
#: for the user (ssh, gpg).
DEFAULT_DROP: tuple[str, ...] = (
    # Amazon Web Services
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN*",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    # Google Cloud
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE",
    "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE",
    # Microsoft Azure (and Terraform's names for it)
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_CLIENT_CERTIFICATE_PASSWORD",
    "AZURE_PASSWORD",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "ARM_CLIENT_SECRET",
    "ARM_ACCESS_KEY",
    # by name
    "*_TOKEN",
    "*_TOKEN_*",
    "*_SECRET*",
    "*_PASSWORD*",
    "*_PASSWD",
    "*_API_KEY",
    "*_ACCESS_KEY*",
    "*_PRIVATE_KEY*",
    "*_CREDENTIALS",
    # agents that act for the user
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
)


@dataclass(frozen=True)
class AgentEnvironment:
    """What an agent gets: ``env`` (passed on) and ``withheld`` (names only, sorted), each with the rule."""

    env: dict[str, str]
    #: Withheld name → why (``tracker secret``, ``drop list``, ``agent_env.drop``, ``same value as <name>``).
    withheld: dict[str, str]

    @property
    def unset(self) -> list[str]:
        """The names to take out of beflow's environment (``proc.run(unset=...)``)."""
        return sorted(self.withheld)


def agent_keys(config: Config) -> tuple[str, ...]:
    """The variables the configured agent logs in with: its own, or every known one for a raw command."""
    if isinstance(config.agent, AgentCommand) or config.agent not in AGENT_KEYS:
        return tuple(dict.fromkeys(name for names in AGENT_KEYS.values() for name in names))
    return AGENT_KEYS[config.agent]


def tracker_secrets(config: Config) -> tuple[list[str], list[str]]:
    """The variables holding the tracker's and the code host's secrets: (withheld, granted). Withheld unless the
    tracker's own setting (``agent_token``) grants its own to the agent; the code host's are always withheld (but
    for a variable the tracker grants, which is the same token)."""
    tracker = config.tracker
    names = tracker.secret_env()
    withheld, granted = ([], names) if tracker.agent_gets_secrets() else (names, [])
    hosts = [name for name in config.code_host_settings().secret_env() if name not in names]
    engine = [name for name in config.engine.secret_env() if name not in names and name not in hosts]
    hooks = [name for name in config.webhooks.secret_env.named().values() if name not in names]
    own = [name for name in own_secret_env() if name not in names]
    return list(dict.fromkeys([*withheld, *hosts, *engine, *hooks, *own])), granted


def own_secret_env() -> list[str]:
    """The variables holding beflow's own secrets, whatever the project: the HTTP server's token."""
    from beflow.paths import TOKEN_ENV

    return [TOKEN_ENV]


def held_secret_env(config: Config) -> list[str]:
    """Every variable beflow holds a secret in for this project (the tracker's, the code host's, the engine's, and
    beflow's own: the HTTP server's token): their values are masked in everything a run writes, whoever gets them."""
    settings = config.code_host_settings()
    hooks = list(config.webhooks.secret_env.named().values())  # (the webhooks' secrets: a forged delivery's key)
    names = [*config.tracker.secret_env(), *settings.secret_env(), *config.engine.secret_env(), *hooks]
    return list(dict.fromkeys([*names, *own_secret_env()]))


def held_secrets(config: Config, environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of :func:`held_secret_env` that are set (stripped, as the trackers read them), and the HTTP
    server's token that beflow made and stored under ``BEFLOW_HOME`` (an agent running as the user can read it)."""
    from beflow.paths import stored_token

    environ = os.environ if environ is None else environ
    values = [environ.get(name, "").strip() for name in held_secret_env(config)]
    return list(dict.fromkeys(value for value in [*values, stored_token()] if value))


class HoldsSecrets(Protocol):
    """A tracker or a code host: what it holds that must never reach the agent, a log or a record."""

    def held_secrets(self) -> list[str]: ...


def run_secrets(project: Project, *holders: HoldsSecrets | None) -> list[str]:
    """The secret values beflow holds for a project's runs: the project's secret variables, the HTTP server's
    token, and what its tracker and code host hold (a token found through ``gh auth token`` too)."""
    values = held_secrets(project.config)
    for holder in holders:
        if holder is not None:
            values += [value for value in holder.held_secrets() if value not in values]
    return values


def withhold_from_git(config: Config) -> None:
    """The project's secret variables, and any other holding the same value, never reach a git command."""
    from beflow.repository import git

    names = set(held_secret_env(config))
    values = set(held_secrets(config))
    names |= {name for name, value in os.environ.items() if value.strip() in values}
    git.withhold(names)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def agent_environment(
    environ: Mapping[str, str],
    *,
    secret_names: Sequence[str] = (),
    granted: Sequence[str] = (),
    keys: Sequence[str] = (),
    passed: Sequence[str] = (),
    dropped: Sequence[str] = (),
) -> AgentEnvironment:
    """The agent's environment from ``environ``. In order, the first rule that matches a name decides:

    1. one of ``secret_names`` (the tracker's), or holding the same value as one → withheld, whatever else says;
       one of ``granted`` (the tracker's, which its settings give the agent) → passed;
    2. ``passed`` (``agent_env.pass``) → passed;
    3. ``dropped`` (``agent_env.drop``) → withheld;
    4. ``keys`` (the agent's login variables) → passed;
    5. :data:`DEFAULT_DROP` → withheld;
    6. anything else → passed.
    """
    secret_values = {environ[name] for name in secret_names if environ.get(name, "").strip()}
    env: dict[str, str] = {}
    withheld: dict[str, str] = {}
    for name, value in environ.items():
        if name in secret_names:
            withheld[name] = "tracker secret"
        elif value in secret_values:
            withheld[name] = "same value as a tracker secret"
        elif name in granted or _matches(name, passed):
            env[name] = value
        elif _matches(name, dropped):
            withheld[name] = "agent_env.drop"
        elif name in keys:
            env[name] = value
        elif _matches(name, DEFAULT_DROP):
            withheld[name] = "drop list"
        else:
            env[name] = value
    return AgentEnvironment(env, dict(sorted(withheld.items())))


def for_agent(config: Config, environ: Mapping[str, str] | None = None) -> AgentEnvironment:
    """The agent's environment for a project's configuration, from beflow's own (``environ``)."""
    withheld, granted = tracker_secrets(config)
    return agent_environment(
        os.environ if environ is None else environ,
        secret_names=withheld,
        granted=granted,
        keys=agent_keys(config),
        passed=config.agent_env.pass_,
        dropped=config.agent_env.drop,
    )
