"""The agent's environment (beflow/agent/agent_env.py): which of beflow's variables an agent gets, rule by rule."""

from __future__ import annotations

import pytest

from beflow.agent.agent_env import AGENT_KEYS, agent_environment, agent_keys, for_agent, held_secrets
from beflow.config import Config

TOKEN = "ghp_" + "t" * 36

ENVIRON = {
    "PATH": "/usr/bin",
    "HOME": "/home/me",
    "LANG": "C.UTF-8",
    "GITHUB_TOKEN": TOKEN,
    "GH_ENTERPRISE_COPY": TOKEN,  # the same value under another name
    "OPENAI_API_KEY": "sk-openai",
    "CODEX_API_KEY": "sk-codex",
    "ANTHROPIC_API_KEY": "sk-ant",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth",
    "GEMINI_API_KEY": "gem",
    "OPENROUTER_API_KEY": "or",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_ACCESS_KEY_ID": "AKIA",
    "AWS_SESSION_TOKEN": "aws-session",
    "AWS_REGION": "eu-west-1",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/me/gcp.json",
    "AZURE_CLIENT_SECRET": "az",
    "NPM_TOKEN": "npm",
    "DB_PASSWORD": "pw",
    "STRIPE_SECRET_KEY": "sk_live",
    "SENTRY_API_KEY": "sentry",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "GPG_AGENT_INFO": "/run/gpg",
    "MY_TOOL_URL": "https://example.com",
}

GITHUB = {"kind": "github", "repo": "octo/hello"}
CODE_HOST = {"kind": "github", "repo": "octo/hello"}


@pytest.mark.parametrize(
    ("config", "name", "passed"),
    [
        # the tracker's secret, and the same value under another name
        ({"tracker": GITHUB}, "GITHUB_TOKEN", False),
        ({"tracker": GITHUB}, "GH_ENTERPRISE_COPY", False),
        # ... even when agent_env.pass names it; only the tracker's own setting gives it
        ({"tracker": GITHUB, "agent_env": {"pass": ["GITHUB_TOKEN", "GH_*"]}}, "GITHUB_TOKEN", False),
        ({"tracker": GITHUB, "agent_env": {"pass": ["*"]}}, "GH_ENTERPRISE_COPY", False),
        ({"tracker": {**GITHUB, "agent_token": True}}, "GITHUB_TOKEN", True),
        # a token_env elsewhere moves the secret with it
        ({"tracker": {**GITHUB, "token_env": "MY_GH"}}, "GITHUB_TOKEN", False),  # still *_TOKEN
        # the local tracker holds no secret: GITHUB_TOKEN is just a *_TOKEN
        ({}, "GITHUB_TOKEN", False),
        ({"agent_env": {"pass": ["GITHUB_TOKEN"]}}, "GITHUB_TOKEN", True),
        # the code host's secret, whatever the tracker: withheld even from agent_env.pass; the tracker's own grant
        # of the same variable (the code host it implies) still gives it
        ({"code_host": CODE_HOST, "agent_env": {"pass": ["GITHUB_TOKEN"]}}, "GITHUB_TOKEN", False),
        ({"code_host": CODE_HOST, "agent_env": {"pass": ["*"]}}, "GH_ENTERPRISE_COPY", False),
        ({"code_host": {**CODE_HOST, "token_env": "MY_TOOL_URL"}, "agent_env": {"pass": ["*"]}}, "MY_TOOL_URL", False),
        ({"tracker": {**GITHUB, "agent_token": True}, "code_host": CODE_HOST}, "GITHUB_TOKEN", True),
        ({"code_host": {"kind": "none"}, "agent_env": {"pass": ["GITHUB_TOKEN"]}}, "GITHUB_TOKEN", True),
        # the default drop list
        ({}, "AWS_SECRET_ACCESS_KEY", False),
        ({}, "AWS_ACCESS_KEY_ID", False),
        ({}, "AWS_SESSION_TOKEN", False),
        ({}, "GOOGLE_APPLICATION_CREDENTIALS", False),
        ({}, "AZURE_CLIENT_SECRET", False),
        ({}, "NPM_TOKEN", False),
        ({}, "DB_PASSWORD", False),
        ({}, "STRIPE_SECRET_KEY", False),
        ({}, "SENTRY_API_KEY", False),
        ({}, "SSH_AUTH_SOCK", False),
        ({}, "GPG_AGENT_INFO", False),
        # everything else passes
        ({}, "PATH", True),
        ({}, "AWS_REGION", True),
        ({}, "MY_TOOL_URL", True),
        # agents' login variables pass although the drop list matches them (a raw agent: every known one)
        ({"agent": {"command": "my-agent"}}, "OPENAI_API_KEY", True),
        ({"agent": {"command": "my-agent"}}, "CLAUDE_CODE_OAUTH_TOKEN", True),
        ({"agent": {"command": "my-agent"}}, "OPENROUTER_API_KEY", True),
        # a known agent gets its own, not another's
        ({"agent": "codex"}, "OPENAI_API_KEY", True),
        ({"agent": "codex"}, "CODEX_API_KEY", True),
        ({"agent": "codex"}, "ANTHROPIC_API_KEY", False),
        ({"agent": "claude"}, "ANTHROPIC_API_KEY", True),
        ({"agent": "claude"}, "CLAUDE_CODE_OAUTH_TOKEN", True),
        ({"agent": "gemini"}, "GEMINI_API_KEY", True),
        # agent_env.pass (names and globs) wins over the drop lists
        ({"agent_env": {"pass": ["AWS_*"]}}, "AWS_SECRET_ACCESS_KEY", True),
        ({"agent_env": {"pass": ["SSH_AUTH_SOCK"]}}, "SSH_AUTH_SOCK", True),
        ({"agent_env": {"pass": ["AWS_REGION"], "drop": ["AWS_*"]}}, "AWS_REGION", True),
        # agent_env.drop takes out more, the agent's own keys included
        ({"agent_env": {"drop": ["MY_TOOL_*"]}}, "MY_TOOL_URL", False),
        ({"agent": "codex", "agent_env": {"drop": ["OPENAI_API_KEY"]}}, "OPENAI_API_KEY", False),
        # globs are case-sensitive, as environment names are
        ({"agent_env": {"drop": ["path"]}}, "PATH", True),
    ],
)
def test_who_gets_what(config: dict[str, object], name: str, passed: bool) -> None:
    environment = for_agent(Config.model_validate(config), ENVIRON)
    assert (name in environment.env) is passed
    assert (name in environment.withheld) is not passed
    assert set(environment.env) | set(environment.withheld) == set(ENVIRON)
    if passed:
        assert environment.env[name] == ENVIRON[name]


def test_withheld_names_say_why_and_unset_lists_them_sorted() -> None:
    environment = for_agent(Config.model_validate({"tracker": GITHUB, "agent_env": {"drop": ["MY_*"]}}), ENVIRON)
    assert environment.withheld["GITHUB_TOKEN"] == "tracker secret"
    assert environment.withheld["GH_ENTERPRISE_COPY"] == "same value as a tracker secret"
    assert environment.withheld["AWS_SECRET_ACCESS_KEY"] == "drop list"
    assert environment.withheld["MY_TOOL_URL"] == "agent_env.drop"
    assert environment.unset == sorted(environment.withheld)


def test_an_unset_or_empty_tracker_secret_withholds_no_other_variable() -> None:
    environment = agent_environment({"GITHUB_TOKEN": "", "EMPTY": ""}, secret_names=["GITHUB_TOKEN"])
    assert environment.env == {"EMPTY": ""}


def test_every_known_agent_has_its_keys_and_a_raw_command_gets_them_all() -> None:
    every = set(agent_keys(Config.model_validate({"agent": {"command": "x"}})))
    assert every == {name for names in AGENT_KEYS.values() for name in names}
    assert set(agent_keys(Config.model_validate({"agent": "codex"}))) < every


def test_held_secrets_are_the_trackers_values_that_are_set() -> None:
    assert held_secrets(Config.model_validate({"tracker": GITHUB}), ENVIRON) == [TOKEN]
    assert held_secrets(Config.model_validate({"tracker": GITHUB}), {}) == []
    assert held_secrets(Config(), ENVIRON) == []


def test_held_secrets_are_the_code_hosts_too_whatever_the_tracker() -> None:
    assert held_secrets(Config.model_validate({"code_host": CODE_HOST}), ENVIRON) == [TOKEN]
    mine = {"code_host": {**CODE_HOST, "token_env": "MY_TOOL_URL"}}
    assert held_secrets(Config.model_validate(mine), ENVIRON) == ["https://example.com"]
    both = {"tracker": GITHUB, "code_host": {**CODE_HOST, "token_env": "NPM_TOKEN"}}
    assert held_secrets(Config.model_validate(both), ENVIRON) == [TOKEN, "npm"]
    assert held_secrets(Config.model_validate({"tracker": GITHUB, "code_host": {"kind": "none"}}), ENVIRON) == [TOKEN]


def test_bad_agent_env_entries_are_refused() -> None:
    with pytest.raises(ValueError, match="pass"):
        Config.model_validate({"agent_env": {"pass": ["A B"]}})
    with pytest.raises(ValueError, match="extra"):
        Config.model_validate({"agent_env": {"keep": ["A"]}})
