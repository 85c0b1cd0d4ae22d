"""Worktrees on ``beflow/<key>`` branches, included files and commits, with real git."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from beflow import git
from beflow.errors import BeflowError, ConfigError, UsageError
from tests.conftest import git as run_git


@pytest.fixture
def worktrees(tmp_path: Path) -> Path:
    return tmp_path / "worktrees"


def test_a_plain_key_is_its_own_branch_and_path(worktrees: Path) -> None:
    assert git.branch_for("42") == "beflow/42"
    assert git.worktree_path(worktrees, "42") == worktrees.resolve() / "42"


@pytest.mark.parametrize("key", ["owner/repo#12", "../../etc", "a b", "x.lock", "..", "feat/ünïcode"])
def test_a_key_that_needs_sanitizing_gets_a_hash_suffix_and_stays_inside_the_worktrees_dir(
    worktrees: Path, key: str
) -> None:
    branch = git.branch_for(key)
    path = git.worktree_path(worktrees, key)

    assert path.parent == worktrees.resolve()
    name = branch.removeprefix("beflow/")
    assert path.name == name and "/" not in name and ".." not in name and not name.endswith(".lock")
    assert len(name.rsplit("-", 1)[1]) == 8  # the hash suffix: two keys that sanitize alike stay apart
    run_git(worktrees.parent, "check-ref-format", "--branch", branch)


def test_keys_that_sanitize_alike_stay_distinct(worktrees: Path) -> None:
    assert git.branch_for("a/b") != git.branch_for("a b")
    assert git.worktree_path(worktrees, "a/b") != git.worktree_path(worktrees, "a b")


def test_a_worktree_starts_from_the_base_and_a_later_one_continues_the_branch(repo: Path, worktrees: Path) -> None:
    repository = git.open_repo(repo)
    base = run_git(repo, "rev-parse", "HEAD").strip()
    path = git.worktree_path(worktrees, "7")

    first = git.create_worktree(repository, path, "beflow/7", "HEAD")
    assert (first.base_commit, first.continued) == (base, False)
    (path / "work.txt").write_text("attempt 1\n")
    commit = git.commit_all(path, "attempt 1")
    git.remove_worktree(repository, path)
    assert not path.exists() and "beflow/7" in run_git(repo, "branch")

    second = git.create_worktree(repository, path, "beflow/7", "HEAD")
    assert (second.base_commit, second.continued) == (commit, True)
    assert (path / "work.txt").read_text() == "attempt 1\n"
    repository.close()


def test_worktrees_made_at_the_same_time_all_succeed(repo: Path, worktrees: Path) -> None:
    """Parallel runs (watch) make worktrees at once; git alone races on that, beflow takes turns."""

    def make(index: int) -> git.Worktree:
        handle = git.open_repo(repo)
        try:
            return git.create_worktree(handle, worktrees / f"w{index}", f"beflow/w{index}", "HEAD")
        finally:
            handle.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        made = list(pool.map(make, range(40)))

    assert sorted(w.path.name for w in made) == sorted(f"w{i}" for i in range(40))
    assert len(run_git(repo, "worktree", "list").splitlines()) == 41


def test_a_base_that_is_not_a_commit_is_a_config_error(repo: Path, worktrees: Path) -> None:
    with pytest.raises(ConfigError, match=r"worktrees\.base: 'nope' is not a commit"):
        git.create_worktree(git.open_repo(repo), worktrees / "1", "beflow/1", "nope")


def test_a_branch_checked_out_elsewhere_is_refused_with_where(repo: Path, worktrees: Path) -> None:
    repository = git.open_repo(repo)
    git.create_worktree(repository, worktrees / "1", "beflow/1", "HEAD")
    with pytest.raises(BeflowError, match=r"branch beflow/1 is checked out in .*worktrees/1"):
        git.create_worktree(repository, worktrees / "other", "beflow/1", "HEAD")


def test_outside_a_git_repository_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not inside a git repository"):
        git.open_repo(tmp_path)


def test_included_files_are_copied_but_never_over_tracked_ones(repo: Path, worktrees: Path) -> None:
    (repo / ".gitignore").write_text(".env\nsecrets/\nbuild/\n")
    (repo / "settings.ini").write_text("tracked\n")
    (repo / ".worktreeinclude").write_text("# one glob a line\n\nsecrets/*.key\nsettings.ini\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-q", "-m", "setup")
    (repo / ".env").write_text("TOKEN=1\n")
    (repo / "secrets").mkdir()
    (repo / "secrets" / "api.key").write_text("k\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_text("not wanted\n")
    (repo / "settings.ini").write_text("local edit\n")
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")

    copied = git.copy_included(repo, path, [".env"])

    assert copied == [".env", "secrets/api.key"]
    assert (path / ".env").read_text() == "TOKEN=1\n" and (path / "secrets" / "api.key").read_text() == "k\n"
    assert not (path / "build").exists()
    assert (path / "settings.ini").read_text() == "tracked\n"  # the checkout's version, from git
    assert not git.is_dirty(path)  # ignored files are not the agent's work


def test_commit_all_leaves_an_untracked_acpxrc_out_and_reports_no_changes(repo: Path, worktrees: Path) -> None:
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    (path / git.ACPXRC).write_text('{"mcpServers": []}')

    assert git.commit_all(path, "nothing") is None
    assert not git.is_dirty(path)

    (path / "new.txt").write_text("x\n")
    commit = git.commit_all(path, "new")
    assert commit is not None
    assert run_git(path, "show", "--name-only", "--format=", commit).split() == ["new.txt"]
    assert git.changed_files(path, run_git(repo, "rev-parse", "main").strip(), commit) == ["A\tnew.txt"]


def test_commit_all_without_a_git_identity_commits_as_beflow(
    repo: Path, worktrees: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    (path / "new.txt").write_text("x\n")

    git.commit_all(path, "new")

    assert run_git(path, "log", "-1", "--format=%an <%ae>").strip() == "beflow <beflow@localhost>"


def test_a_commit_that_git_cannot_make_is_an_error_naming_the_worktree(repo: Path, worktrees: Path) -> None:
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    run_git(path, "init", "-q", "nested")  # a repository without a commit cannot be staged

    with pytest.raises(BeflowError, match=f"git add failed in {path}"):
        git.commit_all(path, "x")
