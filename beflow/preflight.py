"""What would fail every run alike, checked before any issue is touched.

A configuration problem that no issue causes — no git repository, a ``worktrees.base`` that names no commit, acpx
or the agent not installed, a prompt template that cannot work, MCP servers that do not resolve — is reported
once, as a :class:`~beflow.errors.ConfigError` (exit 2, nothing changed), instead of failing the issues one by
one. ``beflow --auto`` stops on it; ``beflow watch`` holds dispatching back until it is fixed; ``beflow doctor``
shows it.
"""

from __future__ import annotations

import difflib
import json
import shlex
import shutil
from pathlib import Path

from beflow import git, prompt
from beflow.config import AgentCommand, Project
from beflow.errors import ConfigError
from beflow.mcp.acp import resolve_servers
from beflow.mcp.own import check_name
from beflow.paths import acpx_home

#: The agents acpx 0.19.1 knows by name (``acpx --help``); acpx config files can add more (``agents``).
ACPX_AGENTS = frozenset(
    [
        "antigravity",
        "claude",
        "codex",
        "copilot",
        "cursor",
        "devin",
        "droid",
        "fast-agent",
        "fx",
        "gemini",
        "grok-build",
        "iflow",
        "junie",
        "kilocode",
        "kimi",
        "kiro",
        "mcode",
        "mux",
        "openclaw",
        "opencode",
        "pi",
        "pool",
        "qoder",
        "qwen",
        "trae",
        "zeroclaw",
    ]
)


def _where(project: Project) -> str:
    return f"{project.config_path}: " if project.config_path else ""


def check(project: Project) -> None:
    """Raise the first problem every run of this project would hit."""
    where, config = _where(project), project.config
    if config.after_run.pull_request and config.tracker.kind != "github":
        raise ConfigError(
            f'{where}after_run.pull_request: pull requests need the GitHub tracker ("tracker": {{"kind": "github"}})',
            fix=f'Use the GitHub tracker, or remove "pull_request" from "after_run" in {project.config_name}.',
        )
    repo = git.open_repo(project.directory)
    try:
        git.resolve_base(repo, config.worktrees.base)
        top = Path(repo.working_tree_dir or project.directory).resolve()
    finally:
        repo.close()
    if project.worktrees_dir.is_relative_to(top):
        raise ConfigError(
            f"{where}worktrees.dir: {project.worktrees_dir} is inside the repository {top}",
            fix="Put worktrees outside the repository (the default is under $BEFLOW_HOME/worktrees).",
        )
    check_acpx(project)
    check_agent(project)
    prompt.check(config.prompt, project.directory)
    check_name(project, resolve_servers(project))


def check_acpx(project: Project) -> None:
    argv = project.config.acpx_argv()
    if shutil.which(argv[0]) is None:
        configured = project.config.acpx is not None
        raise ConfigError(
            f"{_where(project)}acpx: {argv[0]!r} is not installed (not found{'' if configured else ' on PATH'})",
            fix="Install Node.js (npx fetches the pinned acpx), or set `acpx` in "
            f"{project.config_name} to the argv that starts acpx; `beflow doctor` checks it.",
        )


def check_agent(project: Project) -> None:
    """The agent must be something acpx can start: a command on PATH, or a name acpx knows."""
    agent, where = project.config.agent, _where(project)
    if isinstance(agent, AgentCommand):
        try:
            program = shlex.split(agent.command)[0]
        except (ValueError, IndexError):
            raise ConfigError(f"{where}agent.command: cannot parse {agent.command!r} as a command line") from None
        if shutil.which(program) is None:
            raise ConfigError(
                f"{where}agent.command: {program!r} is not installed (not found on PATH)",
                fix="Install the agent, or give its full path in agent.command.",
            )
        return
    known = ACPX_AGENTS | _configured_agents(project)
    if agent in known or shutil.which(agent) is not None:
        return
    close = difflib.get_close_matches(agent, sorted(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(
        f"{where}agent: {agent!r} is not an agent acpx knows{hint}",
        fix=f'Use one of: {", ".join(sorted(known))}; or {{"command": "..."}} for a raw ACP agent.',
    )


def _configured_agents(project: Project) -> set[str]:
    """Agent names from acpx's own config files (global, and the repository's ``.acpxrc.json``)."""
    names: set[str] = set()
    for path in (acpx_home() / ".acpx" / "config.json", project.directory / ".acpxrc.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("agents"), dict):
            names.update(str(name) for name in data["agents"])
    return names
