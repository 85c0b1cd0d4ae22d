"""The agents' own interactive clients (``claude``, ``codex``, ...) that ``beflow --open`` starts: which one goes
with the configured agent, how its argv takes the prompt, and how to install it."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from beflow.config import CONFIG_PATH, AgentCommand, Project
from beflow.errors import ConfigError, ToolMissingError

#: Where ``{prompt}`` goes in a native client's argv.
PROMPT_MARK = "{prompt}"


@dataclass(frozen=True)
class NativeClient:
    """How to start an agent's own interactive client with a first message, and how to install it."""

    argv: tuple[str, ...]
    install: str


#: Keyed by the acpx agent name (``agent`` in the config). Each starts the interactive client with the prompt
#: as its first message (docs/modes.md has the same table).
NATIVE_CLIENTS: dict[str, NativeClient] = {
    "claude": NativeClient(("claude", PROMPT_MARK), "npm install -g @anthropic-ai/claude-code"),
    "codex": NativeClient(("codex", PROMPT_MARK), "npm install -g @openai/codex"),
    "gemini": NativeClient(("gemini", "-i", PROMPT_MARK), "npm install -g @google/gemini-cli"),
    "opencode": NativeClient(("opencode", "--prompt", PROMPT_MARK), "npm install -g opencode-ai"),
    "cursor": NativeClient(("cursor-agent", PROMPT_MARK), "curl https://cursor.com/install -fsS | bash"),
}
NATIVE_CLIENTS["cursor-agent"] = NATIVE_CLIENTS["cursor"]


@dataclass(frozen=True)
class ClientChoice:
    """The native client ``--open`` starts: its argv template, where it came from, and how to install it."""

    argv: list[str]
    source: str  # "built-in table" or "open.<name> in <config>"
    install: str | None


def native_client(project: Project) -> ClientChoice:
    """The client for the configured agent: ``open.<agent>`` in the config, else ``open.default``, else the
    built-in table. A raw ``{"command": ...}`` agent has no name; it needs ``open.default`` (or an entry keyed by
    its command)."""
    config = project.config
    raw = isinstance(config.agent, AgentCommand)
    name = config.agent_label()
    where = project.config_name
    for key in (name, "default"):
        if key in config.open:
            argv = list(config.open[key])
            _check_template(argv, f"{where}: open.{key}")
            return ClientChoice(argv, f"open.{key} in {where}", None)
    if not raw and name in NATIVE_CLIENTS:
        client = NATIVE_CLIENTS[name]
        return ClientChoice(list(client.argv), "built-in table", client.install)
    example = '"open": {"%s": ["my-client", "{prompt}"]}' % ("default" if raw else name)
    if raw:
        message = f"agent is a raw ACP command ({name}); beflow does not know which native client goes with it"
    else:
        known = ", ".join(sorted(NATIVE_CLIENTS))
        message = f"no native client is known for agent {name!r} (built in: {known})"
    raise ConfigError(f"{where}: {message}", fix=f"Name the client in {where}, e.g. {example}.")


def _check_template(argv: list[str], where: str) -> None:
    if not argv or not argv[0].strip():
        raise ConfigError(f'{where}: expected the client\'s argv, e.g. ["my-client", "{PROMPT_MARK}"]; got {argv}')
    if not any(PROMPT_MARK in arg for arg in argv):
        raise ConfigError(
            f"{where}: no {PROMPT_MARK} in {argv}: the client would start without the issue",
            fix=f'Mark where the prompt goes, e.g. ["{argv[0]}", "{PROMPT_MARK}"].',
        )


def client_argv(template: list[str], prompt: str) -> list[str]:
    """The template with the prompt in place of every ``{prompt}`` (which may sit inside a larger argument)."""
    return [arg.replace(PROMPT_MARK, prompt) for arg in template]


def require(executable: str, what: str, install: str | None) -> None:
    """A clear error, with how to install it, when ``executable`` cannot be started."""
    found = os.access(executable, os.X_OK) if os.sep in executable else shutil.which(executable) is not None
    if not found:
        fix = f"Install it: {install}" if install else f"Install it, or fix the argv in {CONFIG_PATH}."
        raise ToolMissingError(f"{executable}: {what} is not installed (not found on PATH)", fix=fix)
