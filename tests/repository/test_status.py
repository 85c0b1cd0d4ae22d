"""What changed between commits (beflow.repository.status)."""

from __future__ import annotations

from pathlib import Path

from beflow.repository.status import lines_changed
from tests.support.projects import git


def commit_all(repo: Path) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    return git(repo, "rev-parse", "HEAD").strip()


def test_lines_changed_counts_added_and_removed_a_binary_file_as_one_and_a_rename_once(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "README.md").write_text("# changed\nmore\n")  # one removed, two added
    (repo / "blob.bin").write_bytes(b"\0\1\2")
    (repo / "tab\tname.txt").write_text("a\n")
    head = commit_all(repo)

    assert lines_changed(repo, base, head) == 3 + 1 + 1
    git(repo, "mv", "tab\tname.txt", "moved.txt")
    assert lines_changed(repo, head, commit_all(repo)) == 0
    assert lines_changed(repo, base, base) == 0
