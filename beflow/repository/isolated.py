"""Git that reads no configuration file: commands in a scratch bare repository of beflow's own, talking to one URL.

What beflow's push, fetch, the import of a sandboxed run's objects and a pack's verification run: only the settings
given here and git's defaults apply — not the repository's configuration (whose ``pushurl``, ``insteadOf``, hooks
or ``core.sshCommand`` an agent may have written), nor the system's or the user's global one; no hook runs, no
redirect is followed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from beflow.repository.git import run

#: Variables of such a git's environment emptied: configuration from a parent git (``git -c``), and an askpass
#: program that would be asked for any host (beflow's credential helper answers for one).
CLEARED = ("GIT_CONFIG_PARAMETERS", "GIT_ASKPASS")


def bare(root: Path, commit: str, extra: str = "") -> None:
    """A bare repository's HEAD and config at ``root`` for ids like ``commit`` (SHA-1 or SHA-256), ``extra``
    sections after."""
    (root / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    formats = "\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n" if len(commit) == 64 else ""
    (root / "config").write_text(f"[core]\n\tbare = true\n{formats}{extra}", encoding="utf-8")


def isolated(
    root: Path, url: str, *settings: tuple[str, str], pass_fds: Sequence[int] = (), **env: str
) -> Callable[..., str]:
    """A runner of git commands (``run("push", ...)``: their output) in the scratch repository ``root``, which talk
    to ``url`` as the remote ``beflow``, with ``settings`` (a credential helper's among them) on git's defaults.
    ``pass_fds`` are inherited by each command (the helper's socket); ``env`` goes into its environment (where its
    objects are). A failure is a :class:`beflow.repository.git.CommandFailed`."""
    pairs = [
        # The URL goes in as a remote of this configuration, not in argv (readable by every user on the machine),
        # where credentials in it would show.
        ("remote.beflow.url", url),
        ("core.hooksPath", os.devnull),
        ("http.followRedirects", "false"),  # a token goes to the URL's host, never where it redirects
        ("credential.helper", ""),  # (resets the list: beflow's helper alone, if any)
        *settings,
    ]
    entries = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for index, (key, value) in enumerate(pairs):
        entries |= {f"GIT_CONFIG_KEY_{index}": key, f"GIT_CONFIG_VALUE_{index}": value}
    environment = {
        **dict.fromkeys(CLEARED, ""),
        "GIT_DIR": str(root),
        **env,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_TRACE_REDACT": "1",
        **entries,
    }

    def isolated_git(*args: str) -> str:
        # Not hardened: its configuration is all here, nothing else is read.
        return run(root, *args, env=environment, pass_fds=pass_fds, hardened=False)

    return isolated_git
