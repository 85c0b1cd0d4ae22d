"""What each agent needs inside the sandbox (docs/safety.md#the-sandbox): its install and its auth/config
directories, its login files, and the hosts of its model API. One table; ``sandbox.read``, ``sandbox.write`` and
``sandbox.hosts`` add to it.

Paths start with ``~/`` (the user's home) or are absolute. acpx starts the registry agents through npm adapters
(``npx @zed-industries/codex-acp`` and the like), so npm's cache and registry come with every preset.

What a preset lets the agent write is the run's own, never the user's (:func:`beflow.sandbox.policy.per_run`): the
agent writes over an overlay of each directory (or a copy of a file), and all of it is dropped after the run — its
settings, hooks, plugins and caches — but for the login files named here, which are written back (an agent
refreshes its token as it works; the next run, and the user, need the new one).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    """One agent's needs: read-only paths, paths it writes for the run, the login files among what it writes (each
    directly in one of the ``write`` directories), and the hosts its proxy lets through."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    logins: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()


#: What every registry agent needs through acpx: npx's cache (the adapters acpx starts) and npm's registry.
NPX = Preset(write=("~/.npm",), hosts=("registry.npmjs.org",))

PRESETS: dict[str, Preset] = {
    # Codex keeps its login (auth.json), config and sessions in ~/.codex; ChatGPT sign-in talks to chatgpt.com.
    "codex": Preset(
        write=("~/.codex",),
        logins=("~/.codex/auth.json",),
        hosts=("api.openai.com", "chatgpt.com", "auth.openai.com"),
    ),
    # Claude Code: ~/.claude (settings, credentials, sessions) and ~/.claude.json (its state file).
    "claude": Preset(
        write=("~/.claude", "~/.claude.json"),
        logins=("~/.claude/.credentials.json",),  # (on Linux; macOS keeps it in the keychain)
        read=("~/.local/share/claude",),  # the native installer's versions (~/.local/bin/claude links there)
        hosts=("api.anthropic.com", "console.anthropic.com", "claude.ai", "statsig.anthropic.com"),
    ),
    # Gemini CLI: ~/.gemini (settings, OAuth credentials); Google sign-in and the Code Assist API.
    "gemini": Preset(
        write=("~/.gemini",),
        logins=("~/.gemini/oauth_creds.json",),
        hosts=(
            "generativelanguage.googleapis.com",
            "cloudcode-pa.googleapis.com",
            "oauth2.googleapis.com",
            "accounts.google.com",
        ),
    ),
    # opencode: its install (~/.opencode), XDG config, data (auth.json), state and cache; models.dev lists models.
    "opencode": Preset(
        read=("~/.opencode",),
        write=(
            "~/.config/opencode",
            "~/.local/share/opencode",
            "~/.local/state/opencode",
            "~/.cache/opencode",
        ),
        logins=("~/.local/share/opencode/auth.json",),
        hosts=("opencode.ai", "models.dev", "api.openai.com", "api.anthropic.com"),
    ),
}


def preset(name: str | None, *, npx: bool = False) -> Preset:
    """The preset called ``name`` with npx's needs added (a registry agent starts through npx, and so does acpx
    itself when beflow runs its pinned one through npx: ``npx``); no name and no npx: nothing."""
    chosen = PRESETS[name] if name is not None else Preset()
    if name is None and not npx:
        return chosen
    return Preset(
        read=chosen.read, write=(*chosen.write, *NPX.write), logins=chosen.logins, hosts=(*chosen.hosts, *NPX.hosts)
    )
