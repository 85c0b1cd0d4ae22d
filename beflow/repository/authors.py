"""Who commits and who is at the keyboard, as git knows them (asked of git itself: GitPython's configuration reader
misses ``GIT_CONFIG_GLOBAL``, includes and the like)."""

from __future__ import annotations

import getpass
import re
from pathlib import Path
from typing import TYPE_CHECKING

from beflow.errors import ToolMissingError
from beflow.repository.git import CommandFailed, GitError, at, common_dir, run

#: Who commits where git knows nobody: beflow itself.
FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "beflow",
    "GIT_AUTHOR_EMAIL": "beflow@localhost",
    "GIT_COMMITTER_NAME": "beflow",
    "GIT_COMMITTER_EMAIL": "beflow@localhost",
}

#: Whether git knows who commits, per repository: asked once per process (a watch asks once, not once per run; the
#: worktrees of one repository share its config).
_IDENTITIES: dict[str, bool] = {}

if TYPE_CHECKING:
    from beflow.repository.git import At


def has_identity(where: At) -> bool:
    """Whether git knows who commits in ``where``'s repository."""
    with at(where) as repo:
        key = str(common_dir(repo))
        if key not in _IDENTITIES:
            try:
                run(repo, "var", "GIT_AUTHOR_IDENT")
                run(repo, "var", "GIT_COMMITTER_IDENT")
                _IDENTITIES[key] = True
            except CommandFailed:
                _IDENTITIES[key] = False
    return _IDENTITIES[key]


def identity_env(directory: Path) -> dict[str, str]:
    """The author and committer git would use in ``directory``, as ``GIT_AUTHOR_NAME``, ... variables: for a git
    that cannot read the user's global config (a sandboxed agent's). Empty when git has none."""
    env: dict[str, str] = {}
    for role in ("AUTHOR", "COMMITTER"):
        try:
            ident = run(directory, "var", f"GIT_{role}_IDENT")
        except (GitError, ToolMissingError):
            continue
        match = re.match(r"^(.*) <([^>]*)>", ident)
        if match:
            env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = match[1], match[2]
    return env


def user_name(directory: Path) -> str:
    """Who is at the keyboard: git's ``user.name`` for this repository, else the login name."""
    try:
        name = run(directory, "config", "--get", "user.name").strip()
    except (GitError, ToolMissingError):
        name = ""
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "user"
