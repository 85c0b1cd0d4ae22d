"""Git through GitPython: finding the repository, worktrees, commits."""

from __future__ import annotations

from pathlib import Path

import git


def toplevel(start: Path) -> Path | None:
    """The top level of the git work tree containing ``start``, if any."""
    try:
        repo = git.Repo(start, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    return Path(repo.working_tree_dir) if repo.working_tree_dir else None
