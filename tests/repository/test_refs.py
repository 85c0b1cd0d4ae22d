"""Branches and refs: what they name, read without git where it can be, with real git."""

from __future__ import annotations

from pathlib import Path

import pytest

from beflow.repository import git, refs
from tests.conftest import git as run_git


def test_the_default_base_is_read_without_git_and_names_the_same_commit(repo: Path) -> None:
    repository = git.open_repo(repo)
    assert refs.resolve_base(repository, "HEAD") == run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "checkout", "-q", "--detach")
    run_git(repo, "commit", "-q", "--allow-empty", "-m", "detached")
    assert refs.resolve_base(repository, "HEAD") == run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "pack-refs", "--all")
    run_git(repo, "checkout", "-q", "-")
    assert refs.resolve_base(repository, "HEAD") == run_git(repo, "rev-parse", "HEAD").strip()


def test_a_planted_branch_is_set_aside_and_replaced_never_followed_even_as_a_symbolic_ref(repo: Path) -> None:
    main = run_git(repo, "rev-parse", "main").strip()
    run_git(repo, "commit", "-q", "--allow-empty", "-m", "chosen")
    chosen = run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "reset", "-q", "--hard", main)
    # An agent made beflow/7 a symbolic ref to main: replacing it must not move main.
    run_git(repo, "symbolic-ref", "refs/heads/beflow/7", "refs/heads/main")

    planted = refs.set_aside(repo, "beflow/7", refs.planted_branch("7"), chosen, "beflow test")

    assert planted == main and refs.planted_branch("7") == "beflow-attempts/7/planted"
    assert run_git(repo, "rev-parse", "main").strip() == main
    assert run_git(repo, "rev-parse", "beflow/7").strip() == chosen
    assert (repo / ".git" / "refs" / "heads" / "beflow" / "7").read_text().strip() == chosen  # (no longer symbolic)
    assert run_git(repo, "rev-parse", "beflow-attempts/7/planted").strip() == main
    # Set aside once: a second planted branch finds the place taken and is refused, nothing moved.
    run_git(repo, "update-ref", "refs/heads/beflow/8", main)
    with pytest.raises(git.GitError, match="could not be set aside"):
        refs.set_aside(repo, "beflow/8", refs.planted_branch("7"), None, "beflow test")
    assert run_git(repo, "rev-parse", "beflow/8").strip() == main
    assert refs.set_aside(repo, "beflow/9", refs.planted_branch("9"), None, "beflow test") is None
    # A branch removed only as its run left it, and only itself when it is a symbolic ref.
    run_git(repo, "symbolic-ref", "refs/heads/beflow-attempts/7/c1", "refs/heads/main")
    assert refs.delete_branch_at(repo, "beflow-attempts/7/c1", main)
    assert run_git(repo, "rev-parse", "main").strip() == main
