"""The managed file stays out of the run's commits: the agent's git ignores it, the user's repository unchanged."""

from __future__ import annotations

from pathlib import Path

from beflow.paths import ACPXRC
from beflow.repository import excludes, git, status, worktrees
from tests.conftest import git as run_git


def _agent_git(path: Path, env: dict[str, str], *args: str) -> str:
    """git as the agent runs it: in the worktree, with the environment beflow gives acpx."""
    import os
    import subprocess

    done = subprocess.run(["git", *args], cwd=path, env={**os.environ, **env}, capture_output=True, text=True)
    return done.stdout + done.stderr


def test_an_agents_add_all_leaves_an_untracked_managed_file_out_and_the_users_repository_unchanged(
    repo: Path, worktrees_dir: Path
) -> None:
    exclude = repo / ".git" / "info" / "exclude"
    before = exclude.read_bytes()
    path = worktrees_dir / "1"
    worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    env = excludes.hide_managed_file(path)
    (path / ACPXRC).write_text('{"mcpServers": [{"name": "s", "env": [{"name": "K", "value": "secret"}]}]}')
    (path / "work.txt").write_text("x\n")

    _agent_git(path, env, "add", "-A")
    _agent_git(path, env, "commit", "-q", "-m", "agent")

    assert run_git(path, "show", "--name-only", "--format=", "HEAD").split() == ["work.txt"]
    assert exclude.read_bytes() == before  # shared with the user's checkout: never written
    assert (repo / ACPXRC).exists() is False and run_git(repo, "status", "--porcelain") == ""


def test_a_tracked_managed_file_is_skipped_by_the_agents_commit_all_and_given_back_to_git_after(
    repo: Path, worktrees_dir: Path
) -> None:
    (repo / ACPXRC).write_text('{"ttl": 1}\n')
    run_git(repo, "add", ACPXRC)
    run_git(repo, "commit", "-q", "-m", "acpxrc")
    path = worktrees_dir / "1"
    worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    env = excludes.hide_managed_file(path)
    (path / ACPXRC).write_text('{"ttl": 1, "mcpServers": [{"name": "s"}]}\n')

    _agent_git(path, env, "commit", "-q", "-a", "-m", "agent")
    _agent_git(path, env, "add", "-A")

    assert _agent_git(path, env, "diff", "--cached", "--name-only").strip() == ""
    (path / ACPXRC).write_text('{"ttl": 1}\n')  # restored
    excludes.unhide_managed_file(path)
    assert "S " not in run_git(path, "ls-files", "-v", ACPXRC)[:2]
    assert not status.is_dirty(path)


def test_the_users_global_excludes_still_apply_to_the_agent(repo: Path, worktrees_dir: Path, tmp_path: Path) -> None:
    ignore = tmp_path / "global-ignore"
    ignore.write_text("*.log\n")
    run_git(repo, "config", "core.excludesFile", str(ignore))
    path = worktrees_dir / "1"
    worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    env = excludes.hide_managed_file(path)
    (path / "debug.log").write_text("x\n")
    (path / ACPXRC).write_text("{}")

    assert _agent_git(path, env, "status", "--porcelain") == ""
