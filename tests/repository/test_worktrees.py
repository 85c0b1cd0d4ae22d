"""Worktrees on ``beflow/<key>`` branches, made, continued, found again and removed, and the ignored files they
ask for, with real git."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from beflow.errors import BeflowError, ConfigError
from beflow.repository import commits, git, refs, status, worktrees
from tests.conftest import git as run_git


def test_a_plain_key_is_its_own_branch_and_path(worktrees_dir: Path) -> None:
    assert refs.branch_for("42") == "beflow/42"
    assert worktrees.worktree_path(worktrees_dir, "42") == worktrees_dir.resolve() / "42"


@pytest.mark.parametrize("key", ["owner/repo#12", "../../etc", "a b", "x.lock", "..", "feat/ünïcode"])
def test_a_key_that_needs_sanitizing_gets_a_hash_suffix_and_stays_inside_the_worktrees_dir(
    worktrees_dir: Path, key: str
) -> None:
    branch = refs.branch_for(key)
    path = worktrees.worktree_path(worktrees_dir, key)

    assert path.parent == worktrees_dir.resolve()
    name = branch.removeprefix("beflow/")
    assert path.name == name and "/" not in name and ".." not in name and not name.endswith(".lock")
    assert len(name.rsplit("-", 1)[1]) == 8  # the hash suffix: two keys that sanitize alike stay apart
    run_git(worktrees_dir.parent, "check-ref-format", "--branch", branch)


def test_keys_that_sanitize_alike_stay_distinct(worktrees_dir: Path) -> None:
    assert refs.branch_for("a/b") != refs.branch_for("a b")
    assert worktrees.worktree_path(worktrees_dir, "a/b") != worktrees.worktree_path(worktrees_dir, "a b")


def test_a_worktree_starts_from_the_base_and_a_later_one_continues_the_branch(repo: Path, worktrees_dir: Path) -> None:
    repository = git.open_repo(repo)
    base = run_git(repo, "rev-parse", "HEAD").strip()
    path = worktrees.worktree_path(worktrees_dir, "7")

    first = worktrees.create_worktree(repository, path, "beflow/7", "HEAD")
    assert (first.base_commit, first.continued, first.tip) == (base, False, None)
    (path / "work.txt").write_text("attempt 1\n")
    commit = commits.commit_all(path, "attempt 1")
    assert "beflow/7" not in run_git(repo, "branch")  # the worktree's HEAD is detached: only publish moves it
    assert commit is not None
    commits.publish(path, "beflow/7", commit, first.tip, "attempt 1")
    worktrees.remove_worktree(repository, path)
    assert not path.exists() and "beflow/7" in run_git(repo, "branch")

    second = worktrees.create_worktree(repository, path, "beflow/7", "HEAD")
    assert (second.base_commit, second.continued, second.tip) == (commit, True, commit)
    assert (path / "work.txt").read_text() == "attempt 1\n"
    repository.close()


def test_worktrees_made_at_the_same_time_all_succeed(repo: Path, worktrees_dir: Path) -> None:
    """Parallel runs (watch) make worktrees at once; git alone races on that, beflow takes turns."""

    def make(index: int) -> worktrees.Worktree:
        handle = git.open_repo(repo)
        try:
            return worktrees.create_worktree(handle, worktrees_dir / f"w{index}", f"beflow/w{index}", "HEAD")
        finally:
            handle.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        made = list(pool.map(make, range(40)))

    assert sorted(w.path.name for w in made) == sorted(f"w{i}" for i in range(40))
    assert len(run_git(repo, "worktree", "list").splitlines()) == 41


def test_a_base_that_is_not_a_commit_is_a_config_error(repo: Path, worktrees_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"worktrees\.base: 'nope' is not a commit"):
        worktrees.create_worktree(git.open_repo(repo), worktrees_dir / "1", "beflow/1", "nope")


def test_a_branch_checked_out_elsewhere_is_refused_with_where(repo: Path, worktrees_dir: Path, tmp_path: Path) -> None:
    repository = git.open_repo(repo)
    run_git(repo, "worktree", "add", "-q", "-b", "beflow/1", str(tmp_path / "mine"))
    with pytest.raises(BeflowError, match=r"branch beflow/1 is checked out in .*mine"):
        worktrees.create_worktree(repository, worktrees_dir / "1", "beflow/1", "HEAD")


def test_a_directory_in_the_worktrees_worktrees_dir_that_git_does_not_know_is_kept_aside_and_the_run_goes_on(
    repo: Path, worktrees_dir: Path
) -> None:
    path = worktrees_dir / "1"
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "work.txt").write_text("someone's work\n")
    with git.open_repo(repo) as repository:
        made = worktrees.create_worktree(repository, path, "beflow/1", "HEAD")
        again = worktrees.create_worktree(repository, path, "beflow/1", "HEAD")  # the next run: a worktree now
    assert made.set_aside == worktrees_dir / "1.left-1" and again.set_aside is None
    assert (worktrees_dir / "1.left-1" / "sub" / "work.txt").read_text() == "someone's work\n"  # kept, whole
    assert (path / ".git").is_file() and not (path / "sub").exists()


def test_included_files_are_copied_but_never_over_tracked_ones(repo: Path, worktrees_dir: Path) -> None:
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
    path = worktrees_dir / "1"
    worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")

    copied = worktrees.copy_included(repo, path, [".env"])

    assert copied == [".env", "secrets/api.key"]
    assert (path / ".env").read_text() == "TOKEN=1\n" and (path / "secrets" / "api.key").read_text() == "k\n"
    assert not (path / "build").exists()
    assert (path / "settings.ini").read_text() == "tracked\n"  # the checkout's version, from git
    assert not status.is_dirty(path)  # ignored files are not the agent's work


def test_a_worktree_whose_directory_vanished_is_pruned_before_the_next_one_is_made(
    repo: Path, worktrees_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository = git.open_repo(repo)
    gone = worktrees.worktree_path(worktrees_dir, "1")
    worktrees.create_worktree(repository, gone, "beflow/1", "HEAD")
    run_git(repo, "branch", "beflow/1", "HEAD")
    run_git(gone, "checkout", "-q", "beflow/1")  # as a killed beflow of an older version left it
    for path in sorted(gone.rglob("*"), reverse=True):
        path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
    gone.rmdir()
    monkeypatch.setattr(worktrees, "_PRUNED", set())  # a new process

    # The registration of the vanished worktree holds beflow/1: without a prune the branch seems checked out.
    again = worktrees.create_worktree(repository, worktrees.worktree_path(worktrees_dir, "other"), "beflow/1", "HEAD")

    assert again.continued and str(gone) not in run_git(repo, "worktree", "list")


def test_the_worktree_a_killed_run_left_is_removed_once_and_its_branch_kept(repo: Path, worktrees_dir: Path) -> None:
    repository = git.open_repo(repo)
    base = run_git(repo, "rev-parse", "HEAD").strip()
    path = worktrees.worktree_path(worktrees_dir, "7")
    made = worktrees.create_worktree(repository, path, "beflow/7", "HEAD")
    (path / "work.txt").write_text("done\n")
    commit = commits.commit_all(path, "work")
    assert commit is not None
    commits.publish(path, "beflow/7", commit, made.tip, "work")  # beflow had committed when it was killed

    assert worktrees.remove_left(repository, path, {base, commit}) is None
    assert not path.exists() and len(run_git(repo, "worktree", "list").splitlines()) == 1
    assert run_git(repo, "rev-parse", "beflow/7").strip() == commit
    assert worktrees.remove_left(repository, path, {base, commit}) is None  # (another beflow removed it: no-op)
    repository.close()


@pytest.mark.parametrize("agent_did", ["wrote", "committed"])
def test_the_worktree_of_a_killed_run_is_kept_with_work_no_check_has_seen(
    repo: Path, worktrees_dir: Path, agent_did: str
) -> None:
    repository = git.open_repo(repo)
    base = run_git(repo, "rev-parse", "HEAD").strip()
    path = worktrees.worktree_path(worktrees_dir, "7")
    worktrees.create_worktree(repository, path, "beflow/7", "HEAD")
    (path / "work.txt").write_text("half done\n")
    if agent_did == "committed":
        assert commits.commit_all(path, "the agent's") is not None

    kept = worktrees.remove_left(repository, path, {base})

    expected = "it holds commit" if agent_did == "committed" else "it holds uncommitted changes"
    assert kept is not None and kept.startswith(expected)
    assert (path / "work.txt").read_text() == "half done\n"
    assert len(run_git(repo, "worktree", "list").splitlines()) == 2
    repository.close()


def test_removing_a_killed_runs_worktree_never_follows_its_git_file(repo: Path, worktrees_dir: Path) -> None:
    """The agent pointed the worktree's ``.git`` at the user's checkout, which has changes: beflow's git reads the
    worktree's own registration (clean), and git refuses to remove a worktree whose ``.git`` does not point back."""
    repository = git.open_repo(repo)
    base = run_git(repo, "rev-parse", "HEAD").strip()
    path = worktrees.worktree_path(worktrees_dir, "7")
    worktrees.create_worktree(repository, path, "beflow/7", "HEAD")
    (path / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    (repo / "README.md").write_text("the user's edit\n")

    kept = worktrees.remove_left(repository, path, {base})

    assert kept is not None and kept.startswith("git could not remove it"), kept
    assert (repo / "README.md").read_text() == "the user's edit\n" and path.is_dir()
    assert run_git(repo, "rev-parse", "HEAD").strip() == base
    repository.close()
