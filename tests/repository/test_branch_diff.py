"""A branch's change against its base, read from verified git objects."""

from __future__ import annotations

import subprocess
from pathlib import Path

from beflow.repository.branch_diff import branch_diff


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_a_branch_diff_names_each_file_with_numbered_lines(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "a.py").write_text("one\ntwo\nthree\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "checkout", "-qb", "beflow/1")
    (repo / "a.py").write_text("one\nTWO\nthree\n")
    (repo / "b.bin").write_bytes(b"\0\1\2")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "work")
    _git(repo, "checkout", "-q", "main")

    diff = branch_diff(repo, "beflow/1", "HEAD")

    assert diff is not None
    by_path = {f.path: f for f in diff.files}
    assert by_path["b.bin"].status == "added" and by_path["b.bin"].note == "a binary file"
    lines = [(line.kind, line.old, line.new, line.text) for line in by_path["a.py"].hunks[0].lines]
    assert ("del", 2, None, "two") in lines and ("add", None, 2, "TWO") in lines
    assert branch_diff(repo, "beflow/none", "HEAD") is None

    # The branch moved on: its new tip's change, not the one read before.
    _git(repo, "checkout", "-q", "beflow/1")
    (repo / "a.py").write_text("one\nTWO\nthree\nfour\n")
    _git(repo, "commit", "-qam", "more")
    _git(repo, "checkout", "-q", "main")
    again = branch_diff(repo, "beflow/1", "HEAD")
    assert again is not None and again.tip != diff.tip
    assert {f.path: (f.added, f.removed) for f in again.files}["a.py"] == (2, 1)
