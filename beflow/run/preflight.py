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
import os
import shlex
import shutil
from pathlib import Path

from beflow import ACPX_VERSION
from beflow.config import CONFIG_PATH, AgentCommand, Config, Project
from beflow.errors import BeflowError, ConfigError, ProgramMissingError
from beflow.paths import acpx_home, git_toplevel
from beflow.repository import git, refs
from beflow.run import prompt
from beflow.system import node
from beflow.system.files import open_regular, read_regular
from beflow.validation import MAX_CONFIG_FILE, place_of

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


def _where(project: Project, *keys: str) -> str:
    """``<config file>:<line>: `` of the first key that is in the file (:func:`beflow.validation.place_of`)."""
    return place_of(project.config_path, *keys)


def check(project: Project, *, idle: bool = False) -> None:
    """Raise the first problem every run of this project would hit. ``idle``: no run is about to start (``watch
    --once`` with nothing ready), so the repository is checked without opening it with git (it is there, and
    worktrees are outside it); ``worktrees.base`` is checked when a run is about to start."""
    found = problems(project, first_only=True, idle=idle)
    if found:
        raise found[0]


def problems(project: Project, *, first_only: bool = False, idle: bool = False) -> list[ConfigError]:
    """Every problem every run of this project would hit, in the order a run meets them (a problem that hides
    the checks after it, such as no git repository, ends the list)."""
    found: list[ConfigError] = []
    repository = _repository_found if idle else _repository
    for step in (_pull_request, repository, _acpx, check_agent, _prompt, _servers):
        try:
            step(project)
        except _Stop as stop:
            found.append(stop.error)
            break
        except ConfigError as error:
            found.append(error)
        if found and first_only:
            break
    return found


class _Stop(Exception):
    """A problem after which the other checks cannot be made."""

    def __init__(self, error: ConfigError) -> None:
        self.error = error


def _pull_request(project: Project) -> None:
    config = project.config
    if config.after_run.pull_request and config.code_host_settings().kind == "none":
        raise ConfigError(
            f"{_where(project, 'after_run', 'pull_request')}after_run.pull_request: pull requests need a code host "
            '("code_host": {"kind": "github"}, which the GitHub tracker implies)',
            fix=f'Name one in "code_host", or remove "pull_request" from "after_run" in {project.config_name}.',
        )


def _repository(project: Project) -> None:
    config = project.config
    try:
        repo = git.open_repo(project.directory)
    except BeflowError as error:
        raise _Stop(ConfigError(error.message, fix=error.fix)) from None
    try:
        try:
            refs.resolve_base(repo, config.worktrees.base)
        except ConfigError as error:
            raise ConfigError(
                f"{_where(project, 'worktrees', 'base')}{error.message}",
                fix=(error.fix or "").replace(str(CONFIG_PATH), project.config_name),
            ) from None
        top = Path(repo.working_tree_dir or project.directory).resolve()
    finally:
        repo.close()
    _worktrees_outside(project, top)


def _repository_found(project: Project) -> None:
    """:func:`_repository` without git: the project is in a work tree, and worktrees go outside it."""
    top = git_toplevel(project.directory)
    if top is None:
        raise _Stop(ConfigError(git.NOT_A_REPOSITORY.format(directory=project.directory), fix=git.RUN_IN_A_CHECKOUT))
    _worktrees_outside(project, top.resolve())


def _worktrees_outside(project: Project, top: Path) -> None:
    if project.worktrees_dir.is_relative_to(top):
        raise ConfigError(
            f"{_where(project, 'worktrees', 'dir')}worktrees.dir: {project.worktrees_dir} is inside the repository "
            f"{top}",
            fix="Put worktrees outside the repository (the default is under $BEFLOW_HOME/worktrees).",
        )


def _prompt(project: Project) -> None:
    try:
        prompt.check(project.config.prompt, project.directory)
    except ConfigError as error:
        where, message = _where(project, "prompt"), error.message
        if message.startswith(prompt.INLINE):
            message = f"{where}prompt (inline){message.removeprefix(prompt.INLINE)}"
        elif message.startswith("prompt:"):
            message = f"{where}{message}"
        fix = (error.fix or "").replace(str(CONFIG_PATH), project.config_name) or None
        raise type(error)(message, fix=fix) from None


def _servers(project: Project) -> None:
    from beflow.mcp.acp import resolve_servers  # (the MCP machinery, for projects that get this far)
    from beflow.mcp.own import check_name

    check_name(project, resolve_servers(project))


def _acpx(project: Project) -> None:
    try:
        check_acpx(project.config, project.config_name)
    except ProgramMissingError:
        raise  # a program, not a setting: no place in the config file to name
    except ConfigError as error:
        raise ConfigError(f"{_where(project, 'acpx')}{error.message}", fix=error.fix) from None


def check_acpx(config: Config, where: str = str(CONFIG_PATH)) -> None:
    """The acpx that ``config`` names is installed, and the Node.js it runs on: the one check of them that runs
    and ``beflow doctor`` share (doctor then asks acpx for its version). ``where`` names the config file in the
    fix."""
    argv = config.acpx_argv()
    program = shutil.which(argv[0])
    # No Node.js is no setting to change: said as the missing program it is, before what it leaves missing (npx
    # comes with it; an acpx installed by npm starts with `#!/usr/bin/env node`).
    on_node = _runs_on_node(program) if program else not config.acpx or Path(argv[0]).name in ("npx", "acpx")
    if on_node and shutil.which("node") is None:
        how = node.how_to_get()
        raise ProgramMissingError(
            "node: Node.js is not installed (not found on PATH), and acpx runs on it",
            fix=f"{how[0].upper()}{how[1:]}; then check with `beflow doctor`.",
        )
    if program is not None:
        return
    if config.acpx:
        raise ConfigError(
            f"acpx: {argv[0]!r} is not installed (not found)",
            fix=f"Install it, or set `acpx` in {where} to the argv that starts acpx "
            f'(e.g. ["npx", "-y", "acpx@{ACPX_VERSION}"]), '
            f"or remove it and `npm install -g acpx@{ACPX_VERSION}`.",
        )
    raise ConfigError(
        "acpx: not on PATH, and npx (to fetch the pinned acpx) is missing too",
        fix=f"Install Node.js with npm, or `npm install -g acpx@{ACPX_VERSION}`, or set `acpx` in {where}.",
    )


def _runs_on_node(program: str) -> bool:
    """Whether ``program`` is a script that Node.js runs (its ``#!`` line names node)."""
    try:
        fd = open_regular(Path(program), below=None)
    except OSError:
        return False
    try:
        first = os.read(fd, 256).split(b"\n", 1)[0]
    except OSError:
        return False
    finally:
        os.close(fd)
    return first.startswith(b"#!") and b"node" in first


def check_agent(project: Project) -> None:
    """The agent must be something acpx can start: a command on PATH, or a name acpx knows."""
    agent, where = project.config.agent, _where(project, "agent", "command")
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
            data = json.loads(read_regular(path, limit=MAX_CONFIG_FILE))  # never a FIFO waited on
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("agents"), dict):
            names.update(str(name) for name in data["agents"])
    return names
