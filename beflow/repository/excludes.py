"""Keeping beflow's managed file out of the run's commits.

A linked worktree shares ``info/exclude`` with the user's repository, so nothing is written there. Instead the agent
(through acpx) and the hooks get an environment whose ``core.excludesFile`` is a file beflow makes in the worktree's
own git directory: the user's global excludes plus ``/.acpxrc.json``. A tracked ``.acpxrc.json`` is marked
skip-worktree in the worktree's own index. Both only make an accident unlikely; what guarantees that no injected
byte reaches a branch is the check of every commit before the branch moves
(:func:`beflow.repository.leaks.find_leaks`, :func:`beflow.repository.commits.publish`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from beflow.paths import ACPXRC
from beflow.repository.git import CommandFailed, open_at, run
from beflow.repository.status import is_tracked
from beflow.system.files import FileTooLarge, NotRegularError, atomic_write, read_regular

#: The name of beflow's excludes file in a worktree's own git directory.
EXCLUDES_NAME = "beflow-exclude"
#: Bytes of the user's global excludes file copied into it, at most.
MAX_EXCLUDES = 1 << 20

if TYPE_CHECKING:
    from beflow.repository.git import At


def _user_excludes(directory: Path) -> str:
    """The user's global excludes (``core.excludesFile``, else git's default ``$XDG_CONFIG_HOME/git/ignore``)."""
    try:
        configured = run(directory, "config", "--path", "--get", "core.excludesFile").strip()
    except CommandFailed:
        configured = ""
    if configured:
        path = Path(configured)
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.environ.get("HOME", ""), ".config")
        path = Path(xdg) / "git" / "ignore"
    try:
        data = read_regular(path, limit=MAX_EXCLUDES)
    except (OSError, NotRegularError, FileTooLarge):
        return ""
    return data.decode("utf-8", errors="surrogateescape")


def excludes_env(directory: Path, excludes: Path) -> dict[str, str]:
    """The environment that makes git (run by the agent in ``directory``) ignore ``.acpxrc.json`` as well as all
    the user ignores globally: ``core.excludesFile`` set to ``excludes``, written here with both."""
    user = _user_excludes(directory)
    if user and not user.endswith("\n"):
        user += "\n"
    note = "# beflow: the .acpxrc.json it manages during a run is never the agent's to commit\n"
    # Not fsynced: it is written again before every run in the worktree, and nothing recovers from it.
    data = (user + note + f"/{ACPXRC}\n").encode("utf-8", errors="surrogateescape")
    atomic_write(excludes, data, durable=False)
    count = os.environ.get("GIT_CONFIG_COUNT", "")
    index = int(count) if count.isdigit() else 0  # the user's own GIT_CONFIG_KEY_<n> entries stay in force
    return {
        "GIT_CONFIG_COUNT": str(index + 1),
        f"GIT_CONFIG_KEY_{index}": "core.excludesFile",
        f"GIT_CONFIG_VALUE_{index}": str(excludes),
    }


def hide_managed_file(worktree: Path) -> dict[str, str]:
    """Keep ``.acpxrc.json`` out of what git stages in ``worktree``; the environment for what runs in it.

    Nothing of the user's repository changes: the excludes file lives in the worktree's private git directory,
    and the skip-worktree bit in the worktree's own index.
    """
    with open_at(worktree) as repo:
        git_dir = Path(repo.git_dir).absolute()  # the worktree's own, read from its `.git` file by GitPython
    if is_tracked(worktree, ACPXRC):
        run(worktree, "update-index", "--skip-worktree", "--", ACPXRC)
    return excludes_env(worktree, git_dir / EXCLUDES_NAME)


def unhide_managed_file(worktree: At) -> None:
    """Undo :func:`hide_managed_file`'s skip-worktree bit (the excludes file goes with the worktree)."""
    if is_tracked(worktree, ACPXRC):
        run(worktree, "update-index", "--no-skip-worktree", "--", ACPXRC)
