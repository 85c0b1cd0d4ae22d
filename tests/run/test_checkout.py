"""The checkout the supervised modes run in: what a session changed, the warning about an un-ignored
.acpxrc.json, and one attended run per checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from beflow.errors import LockedError
from beflow.run import checkout


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


# --- what a session changed -----------------------------------------------------------------------------------


def test_a_session_is_credited_only_with_what_changed_during_it(repo: Path) -> None:
    (repo / "tracked.txt").write_text("one\n")
    (repo / "reverted.txt").write_text("committed\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "more")
    (repo / "README.md").write_text("# edited by the user, before\n")  # dirty before, untouched
    (repo / "tracked.txt").write_text("user's edit\n")  # dirty before, changed again during the session
    (repo / "reverted.txt").write_text("user's edit\n")  # dirty before, put back by the session
    (repo / "notes.txt").write_text("user's untracked file\n")  # untracked before, deleted by the session
    before = checkout.snapshot(repo, [])

    (repo / "tracked.txt").write_text("the agent's edit\n")
    (repo / "reverted.txt").write_text("committed\n")
    (repo / "notes.txt").unlink()
    (repo / "new dir").mkdir()
    (repo / "new dir" / "ünïcode.txt").write_text("new\n")
    changed, untouched = checkout.compare(repo, before, checkout.snapshot(repo, []))

    assert changed == ["A\tnew dir/ünïcode.txt", "D\tnotes.txt", "M\treverted.txt", "M\ttracked.txt"]
    assert untouched == ["M\tREADME.md"]


def test_excluded_directories_are_never_reported(repo: Path) -> None:
    issues = repo / ".beflow" / "issues"
    issues.mkdir(parents=True)
    before = checkout.snapshot(repo, [issues])
    (issues / "0001-task.md").write_text("status: in_progress\n")
    assert checkout.compare(repo, before, checkout.snapshot(repo, [issues])) == ([], [])


# --- the .acpxrc.json warning -----------------------------------------------------------------------------------


def test_an_unignored_acpxrc_gets_the_line_to_add(repo: Path) -> None:
    notice = checkout.acpxrc_notice(repo)
    assert notice is not None
    assert "is not git-ignored" in notice
    assert notice.endswith(f"add this line to {repo / '.gitignore'}:\n    .acpxrc.json")


def test_an_ignored_acpxrc_gets_no_warning(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.json\n")
    assert checkout.acpxrc_notice(repo) is None


def test_a_tracked_acpxrc_is_warned_about_differently(repo: Path) -> None:
    (repo / ".acpxrc.json").write_text("{}\n")
    git(repo, "add", ".acpxrc.json")
    git(repo, "commit", "-q", "-m", "acpx config")
    notice = checkout.acpxrc_notice(repo)
    assert notice is not None and "is tracked by git" in notice


# --- one attended run per checkout ------------------------------------------------------------------------------


def test_a_second_attended_run_in_the_same_checkout_is_refused_naming_the_first(repo: Path) -> None:
    with checkout.checkout_lock(repo, "7", "run-seven"), pytest.raises(LockedError) as caught:
        checkout.checkout_lock(repo, "9", "run-nine").__enter__()
    message = caught.value.message
    assert message.startswith(f"an attended run is already going on in {repo}: issue 7 (run run-seven), beflow pid ")
    with checkout.checkout_lock(repo, "9", "run-nine"):  # free again once the first is done
        pass


def test_attended_runs_in_different_checkouts_do_not_block_each_other(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with checkout.checkout_lock(tmp_path / "a", "1", "r1"), checkout.checkout_lock(tmp_path / "b", "1", "r2"):
        pass
