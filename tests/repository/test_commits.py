"""The run's commit, built on what HEAD names, and the branch moved to it only from where it was, with real git."""

from __future__ import annotations

from pathlib import Path

import pytest

from beflow.errors import BeflowError
from beflow.paths import ACPXRC
from beflow.repository import commits, git, refs, status, worktrees
from beflow.trackers import quoting
from tests.conftest import git as run_git


def test_commit_all_leaves_an_untracked_acpxrc_out_and_reports_no_changes(repo: Path, worktrees_dir: Path) -> None:
    path = worktrees_dir / "1"
    worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    (path / ACPXRC).write_text('{"mcpServers": []}')

    assert commits.commit_all(path, "nothing") is None
    assert not status.is_dirty(path)

    (path / "new.txt").write_text("x\n")
    commit = commits.commit_all(path, "new")
    assert commit is not None
    assert run_git(path, "show", "--name-only", "--format=", commit).split() == ["new.txt"]
    assert status.changed_files(path, run_git(repo, "rev-parse", "main").strip(), commit) == ["A\tnew.txt"]


def test_commit_all_without_a_git_identity_commits_as_beflow(
    repo: Path, worktrees_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = worktrees_dir / "1"
    worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    (path / "new.txt").write_text("x\n")

    commits.commit_all(path, "new")

    assert run_git(path, "log", "-1", "--format=%an <%ae>").strip() == "beflow <beflow@localhost>"


def test_a_commit_that_git_cannot_make_is_an_error_naming_the_worktree(repo: Path, worktrees_dir: Path) -> None:
    path = worktrees_dir / "1"
    worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    run_git(path, "init", "-q", "nested")  # a repository without a commit cannot be staged

    with pytest.raises(BeflowError, match=f"git add failed in {path}"):
        commits.commit_all(path, "x")


def test_publish_moves_the_branch_only_from_where_it_was(repo: Path, worktrees_dir: Path) -> None:
    path = worktrees_dir / "1"
    tree = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    (path / "a.txt").write_text("a\n")
    first = commits.commit_all(path, "a")
    assert first is not None
    commits.publish(path, "beflow/1", first, None, "run")
    assert run_git(repo, "rev-parse", "beflow/1").strip() == first
    with pytest.raises(BeflowError, match="changed during the run"):
        commits.publish(path, "beflow/1", first, tree.base_commit, "run")  # someone else moved it meanwhile


def test_uncommit_turns_the_runs_commits_into_uncommitted_changes(repo: Path, worktrees_dir: Path) -> None:
    path = worktrees_dir / "1"
    start = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "a.txt").write_text("a\n")
    made = commits.commit_all(path, "a")
    commits.uncommit(path, start)
    assert refs.head(path) == start and (path / "a.txt").read_text() == "a\n" and status.is_dirty(path)
    assert made not in run_git(path, "log", "--all", "--format=%H")


def test_the_agents_commit_messages_are_reworded_and_everything_else_of_them_is_kept(
    repo: Path, worktrees_dir: Path
) -> None:
    path = worktrees_dir / "1"
    tree = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    (path / "a.txt").write_text("a\n")
    run_git(path, "add", "a.txt")
    run_git(path, "commit", "-q", "-m", "add a", "--author", "Agent <agent@example.com>", "--date", "@1700000000 +0130")
    clean = run_git(path, "rev-parse", "HEAD").strip()
    run_git(path, "switch", "-q", "-c", "side")
    (path / "b.txt").write_text("b\n")
    run_git(path, "add", "b.txt")
    run_git(path, "commit", "-q", "-m", "b\n\nFixes #12, closes octo/other#3, cc @alice")
    run_git(path, "switch", "-q", "--detach", clean)
    (path / "c.txt").write_text("c\n")
    run_git(path, "add", "c.txt")
    run_git(path, "commit", "-q", "-m", "c")
    run_git(path, "merge", "-q", "--no-edit", "-m", "merge: resolves #7", "side")
    head = run_git(path, "rev-parse", "HEAD").strip()

    again = commits.reworded(path, tree.base_commit, head, quoting.inert)

    assert again != head
    assert (
        run_git(path, "rev-parse", f"{again}^{{tree}}").strip()
        == run_git(path, "rev-parse", f"{head}^{{tree}}").strip()
    )
    # An agent's commit whose message acts on nothing is the same commit; the others say the same, inert.
    assert run_git(path, "rev-list", "--reverse", f"{tree.base_commit}..{again}").split()[0] == clean
    messages = run_git(path, "log", "--format=%B%x00", f"{tree.base_commit}..{again}")
    assert "Fixes #12" not in messages and "octo/other#3" not in messages and "@alice" not in messages
    assert "#7" not in messages and "resolves #\u20607" in messages and "Fixes #\u206012" in messages
    assert run_git(path, "rev-list", "--count", "--merges", f"{tree.base_commit}..{again}").strip() == "1"
    was = run_git(path, "log", "--format=%an %ae %ad %cn %ce %cd", f"{tree.base_commit}..{head}").splitlines()
    now = run_git(path, "log", "--format=%an %ae %ad %cn %ce %cd", f"{tree.base_commit}..{again}").splitlines()
    assert sorted(was) == sorted(now)


def test_an_agent_that_made_too_many_commits_is_refused_rewording(
    repo: Path, worktrees_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = worktrees_dir / "1"
    tree = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    for n in range(3):
        run_git(path, "commit", "-q", "--allow-empty", "-m", f"#{n}")
    monkeypatch.setattr(commits, "MOST_REWORDED", 2)
    with pytest.raises(BeflowError, match="the agent made 3 commits"):
        commits.reworded(path, tree.base_commit, run_git(path, "rev-parse", "HEAD").strip(), quoting.inert)
