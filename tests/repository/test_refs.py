"""Branches and refs: what they name, read without git where it can be, with real git."""

from __future__ import annotations

from pathlib import Path

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
