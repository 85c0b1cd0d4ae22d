"""The one way beflow runs git: the repository opened, a command that fails or hangs, with real git."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from beflow.errors import UsageError
from beflow.repository import git, worktrees


def test_outside_a_git_repository_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not inside a git repository"):
        git.open_repo(tmp_path)


def test_a_git_command_that_hangs_is_stopped_at_the_timeout_with_what_it_started(
    repo: Path, worktrees_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A post-checkout hook that never returns (here: until a file appears that nobody writes) would hold
    ``git worktree add`` — and the run — forever: git is killed with the hook at ``GIT_TIMEOUT``.

    The timeout has to fall while the hook runs: on a loaded machine git may take longer than a short timeout to
    get there, and a timeout that fell before the hook started says nothing of the hook. Such a try is made again,
    on a worktree of its own, with twice the time."""
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(
        f"#!/bin/sh\necho $$ > {repo / 'hook.pid.new'} && mv {repo / 'hook.pid.new'} {repo / 'hook.pid'}\n"
        f"for i in $(seq 1200); do [ -e {repo / 'never'} ] && exit 0; sleep 0.05; done\ntouch {repo / 'hook.ended'}\n"
    )
    hook.chmod(0o755)

    for attempt, timeout in enumerate((1.0, 2.0, 4.0, 8.0, 16.0)):
        monkeypatch.setattr(git, "GIT_TIMEOUT", timeout)
        repository = git.open_repo(repo)
        with pytest.raises(git.GitError) as raised:
            worktrees.create_worktree(
                repository, worktrees.worktree_path(worktrees_dir, str(7 + attempt)), f"beflow/{7 + attempt}", "HEAD"
            )
        repository.close()
        assert f"did not finish within {timeout:g} s and was stopped" in raised.value.message
        if (repo / "hook.pid").exists():
            break

    assert raised.value.message.startswith(f"git worktree add did not finish within {timeout:g} s and was stopped")
    pid = int((repo / "hook.pid").read_text())
    assert psutil.pid_exists(pid) is False or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (repo / "hook.ended").exists(), "the hook was not stopped: it ran to its end"


def test_a_failing_command_says_its_status_and_what_git_said_in_english(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    with pytest.raises(git.CommandFailed) as failed:
        git.run(repo, "rev-parse", "--verify", "no-such-branch")
    assert failed.value.status == 128 and failed.value.stderr == "fatal: Needed a single revision"
    assert failed.value.message == "git rev-parse failed: fatal: Needed a single revision"


def test_gitpython_runs_no_git_command(repo: Path) -> None:
    """GitPython gives the repository object; a command through it (which the architecture test keeps out of
    beflow's code) would escape the supervision of the one runner, so it is refused."""
    with git.open_repo(repo) as repository, pytest.raises(git.GitError, match="beflow runs git itself"):
        repository.git.status()


def test_beflows_own_secrets_reach_no_git_command(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(git, "_WITHHELD", set())
    monkeypatch.setenv("BEFLOW_TEST_TOKEN", "s3cret")
    git.withhold(["BEFLOW_TEST_TOKEN"])

    seen = git.run(repo, "-c", "alias.environment=!env", "environment")  # (what a hook or an alias would see)

    assert "BEFLOW_TEST_TOKEN=\n" in seen and "s3cret" not in seen


def test_a_pinned_worktree_runs_git_in_its_own_git_directory_whatever_its_git_file_says(
    repo: Path, worktrees_dir: Path
) -> None:
    with git.open_repo(repo) as repository:
        made = worktrees.create_worktree(repository, worktrees_dir / "1", "beflow/1", "HEAD")
    assert made.git_dir is not None
    (made.path / ".git").write_text(f"gitdir: {repo / '.git'}\n")  # an agent pointing it at the user's checkout

    with worktrees.open_worktree(made) as pinned:
        assert git.run(pinned, "rev-parse", "--absolute-git-dir").strip() == str(made.git_dir)
    assert git.run(made.path, "rev-parse", "--absolute-git-dir").strip() == str(repo / ".git")  # (unpinned)


def test_output_longer_than_beflow_reads_fails_the_step(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(git, "MAX_OUTPUT", 50)
    assert git.run(repo, "rev-parse", "HEAD")  # 41 bytes
    with pytest.raises(git.GitError, match="git cat-file printed more than beflow reads"):
        git.run(repo, "cat-file", "-p", "HEAD")


def test_a_streamed_command_that_fails_says_so_once_its_output_is_read(repo: Path) -> None:
    with pytest.raises(git.CommandFailed, match="git rev-list failed: fatal: ambiguous argument 'nothing'"):
        list(git.streamed(repo, "rev-list", "nothing", separator=b"\n"))
    assert list(git.streamed(repo, "rev-list", "HEAD", separator=b"\n")) == [
        git.run(repo, "rev-parse", "HEAD")[:-1].encode()
    ]
