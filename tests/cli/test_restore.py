"""``beflow restore``, and the quiet restore every other command does first."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beflow.mcp.journal import journal_dir
from beflow.paths import ACPXRC
from tests.mcp.conftest import spawn_holder

PRIOR = b'{"ttl": 1}\r\n'


@pytest.fixture
def orphaned(tmp_path: Path) -> tuple[Path, int]:
    """A directory whose ``.acpxrc.json`` a beflow left managed when it died without cleanup; and its pid."""
    directory = tmp_path / "checkout"
    directory.mkdir()
    (directory / ACPXRC).write_bytes(PRIOR)
    process = spawn_holder(directory, "--then", "exit")
    pid = process.wait_for("injected")["pid"]
    process.finish()
    assert (directory / ACPXRC).read_bytes() != PRIOR
    return directory, pid


def test_restore_puts_an_orphan_back_and_says_so(beflow, orphaned: tuple[Path, int]) -> None:
    directory, pid = orphaned
    result = beflow("restore")
    assert result.exit_code == 0
    assert (
        result.stdout.strip()
        == f"✓ restored {directory / ACPXRC} to its content before the run (left by beflow pid {pid})"
    )
    assert (directory / ACPXRC).read_bytes() == PRIOR
    assert list(journal_dir().glob("*.json")) == []


def test_restore_with_nothing_to_do(beflow, tmp_path: Path) -> None:
    result = beflow("restore")
    assert (result.exit_code, result.stdout.strip()) == (0, "Nothing to restore.")


def test_restore_json(beflow, orphaned: tuple[Path, int]) -> None:
    directory, pid = orphaned
    data = json.loads(beflow("restore", "--json").stdout)
    assert data == {
        "restored": [
            {
                "target": str(directory / ACPXRC),
                "action": "restored",
                "pid": pid,
                "saved": None,
                "replaced": None,
                "detail": None,
            }
        ],
        "in_use": [],
        "git": [],  # repositories put back (tests/faults/test_users_git.py)
    }


def test_restore_reports_a_version_changed_after_the_crash(beflow, orphaned: tuple[Path, int]) -> None:
    directory, _ = orphaned
    (directory / ACPXRC).write_text('{"mine": true}')
    result = beflow("restore")
    saved_at = result.stdout.split("saved at ")[1].strip()
    assert saved_at.endswith(" (for 7 days)")  # then deleted: it may hold the injected secrets
    saved = Path(saved_at.removesuffix(" (for 7 days)"))
    assert saved.read_text() == '{"mine": true}'
    assert (directory / ACPXRC).read_bytes() == PRIOR


def test_restore_quarantines_an_unreadable_journal_entry_and_says_so_once(beflow, tmp_path: Path) -> None:
    journal_dir().mkdir(parents=True)
    (journal_dir() / "acpxrc-x.json").write_text("not json")
    result = beflow("restore")
    assert result.exit_code == 1
    assert "! journal entry acpxrc-x.json is damaged (it is not valid JSON" in result.stdout
    assert "not recovered" in result.stdout
    assert list(journal_dir().glob("*.json")) == []
    assert beflow("restore").stdout.strip() == "Nothing to restore."


def test_every_command_restores_orphans_first_and_reports_only_that(
    beflow, repo: Path, orphaned: tuple[Path, int]
) -> None:
    directory, pid = orphaned
    result = beflow("mcp", "check")
    assert result.exit_code == 0
    assert result.stderr.strip() == (
        f"beflow: restored {directory / ACPXRC} to its content before the run (left by beflow pid {pid})"
    )
    assert (directory / ACPXRC).read_bytes() == PRIOR
    assert beflow("mcp", "check").stderr == ""


def test_a_broken_beflow_home_does_not_stop_other_commands(beflow, repo: Path, isolated_home: Path) -> None:
    isolated_home.mkdir()
    (isolated_home / "journal").write_text("a file where a directory should be")
    result = beflow("mcp", "check")
    assert result.exit_code == 0
    assert os.path.isfile(isolated_home / "journal")
