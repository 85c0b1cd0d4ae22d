"""The managed ``.acpxrc.json`` against hostile files, damaged journals and a second ``BEFLOW_HOME``, each through
real processes (tests/mcp/holder.py manages the file exactly as a run does)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beflow.mcp.journal import journal_dir
from beflow.paths import ACPXRC, beflow_home
from tests.faults.conftest import beflow_run, secrets_in_files
from tests.mcp.conftest import Holder, spawn_holder
from tests.support.projects import AutoProject

PRIOR = b'{"defaultAgent": "codex", "env-like": "user-secret-3141"}\n'


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    (directory / ACPXRC).write_bytes(PRIOR)
    os.chmod(directory / ACPXRC, 0o640)
    return directory


def cli(*args: str, home: Path | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"BEFLOW_HOME": str(home)} if home else {})}
    return subprocess.run(
        [sys.executable, "-m", "beflow", *args],
        cwd=os.environ["HOME"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def holder(directory: Path, *args: str, home: Path | None = None) -> Holder:
    if home is None:
        return spawn_holder(directory, *args)
    saved = os.environ["BEFLOW_HOME"]
    os.environ["BEFLOW_HOME"] = str(home)
    try:
        return spawn_holder(directory, *args)
    finally:
        os.environ["BEFLOW_HOME"] = saved


def assert_prior_back(directory: Path) -> None:
    assert (directory / ACPXRC).read_bytes() == PRIOR
    assert (directory / ACPXRC).stat().st_mode & 0o777 == 0o640


# -- FIFOs and other non-regular files ---------------------------------------------------------------------------


def test_a_fifo_put_in_place_of_the_managed_file_is_reported_and_left_never_opened(work: Path) -> None:
    process = holder(work, "--then", "wait-file")
    process.wait_for("injected")
    (work / ACPXRC).unlink()
    os.mkfifo(work / ACPXRC)
    (work / "release").touch()

    assert process.finish(timeout=20) == 1  # before: blocked for ever in open(), deaf to signals
    error = process.events[-1]
    assert "is now a FIFO" in error["message"]

    # Every later command goes on (before: each one hung on the FIFO); restore says what is wrong ...
    result = cli("restore")
    assert result.returncode == 1 and "is now a FIFO" in result.stdout
    # ... and once the FIFO is moved away, the prior comes back.
    (work / ACPXRC).unlink()
    (work / "release").unlink()
    assert cli("restore").returncode == 0
    assert_prior_back(work)
    assert list(journal_dir().glob("*.json")) == []


@pytest.mark.parametrize("kind", ["fifo", "link to a fifo"])
def test_a_fifo_at_the_managed_path_is_refused_before_anything_is_written(tmp_path: Path, kind: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if kind == "fifo":
        os.mkfifo(work / ACPXRC)
    else:
        os.mkfifo(tmp_path / "pipe")
        (work / ACPXRC).symlink_to(tmp_path / "pipe")

    process = holder(work, "--then", "return")

    assert process.finish(timeout=20) == 1
    assert "beflow will not replace it" in process.events[-1]["message"]
    assert sorted(p.name for p in work.iterdir()) == [ACPXRC]
    assert not journal_dir().exists() or list(journal_dir().glob("*.json")) == []


def test_a_symlink_the_agent_put_in_place_of_the_managed_file_is_never_followed_nor_saved(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    auto_project.configure(sandbox={"enabled": False})
    key_file = Path(os.environ["HOME"]) / ".ssh" / "id_ed25519"
    key_file.parent.mkdir()
    key_file.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nuser-secret-5772\n")
    key = auto_project.new_issue(f"run rm {ACPXRC} && ln -s {key_file} {ACPXRC}", "write hello.txt hi\\n")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr
    # Before: the user's key was copied to $BEFLOW_HOME/saved/ as "the version changed during the run".
    found = [p for p in beflow_home().rglob("*") if p.is_file() and b"user-secret-5772" in p.read_bytes()]
    assert found == [] and not (beflow_home() / "saved").exists()
    record = auto_project.only_record()
    assert any(f"replaced by a symlink to {key_file}, which beflow did not follow" in r for r in record.restored)
    assert "replaced during the run by a symlink" in done.stdout + done.stderr
    assert key_file.read_text().endswith("user-secret-5772\n")
    assert secrets_in_files(beflow_home(), auto_project.directory / ".beflow") == []


# -- damaged journal entries -------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "bad base64"])
def test_a_damaged_journal_entry_never_blocks_a_run_nor_prints_its_bytes(work: Path, damage: str) -> None:
    process = holder(work, "--then", "exit")  # killed while injected: the journal entry is what is left
    process.wait_for("injected")
    process.finish()
    (entry,) = journal_dir().glob("*.json")
    text = entry.read_text()
    secret = base64.b64encode(PRIOR).decode()
    assert secret in text
    entry.write_text(
        {
            "truncated": text[: len(text) // 2],
            "empty": "",
            "garbage": "\x00\x01 user-secret-3141",
            "bad base64": text.replace(secret, "user-secret-3141!!"),
        }[damage]
    )

    result = cli("restore")

    assert result.returncode == 1
    assert "is damaged" in result.stdout and "moved to" in result.stdout
    for shown in (result.stdout, result.stderr):
        assert "user-secret-3141" not in shown and secret not in shown
    # A later session on the same file is not blocked; it runs and restores what it found.
    again = holder(work, "--then", "return")
    assert again.finish() == 0, again.events


# -- two BEFLOW_HOMEs, one directory ----------------------------------------------------------------------------


def test_the_orphan_of_another_beflow_home_is_restored_before_a_new_session_takes_the_file(
    work: Path, tmp_path: Path
) -> None:
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    crashed = holder(work, "--then", "exit", home=home_a)
    crashed.wait_for("injected")
    crashed.finish()

    second = holder(work, "--then", "return", home=home_b)
    assert second.finish() == 0, second.events

    assert_prior_back(work)  # before: the first run's injected file (its secrets) stayed, taken for the prior
    assert list((home_a / "journal").glob("*.json")) == []
    assert cli("restore", home=home_a).stdout.strip() == "Nothing to restore."
    assert cli("restore", home=home_b).stdout.strip() == "Nothing to restore."
    assert not (home_b / "saved").exists() or list((home_b / "saved").iterdir()) == []


def test_any_beflow_home_restores_the_orphan_of_another(work: Path, tmp_path: Path) -> None:
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    crashed = holder(work, "--then", "exit", home=home_a)
    event = crashed.wait_for("injected")
    crashed.finish()

    result = cli("restore", home=home_b)  # before: "Nothing to restore." in B, the secrets left in place

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"✓ restored {work / ACPXRC} to its content before the run (left by beflow pid {event['pid']})"
    )
    assert_prior_back(work)
    assert cli("restore", home=home_a).stdout.strip() == "Nothing to restore."


def test_a_live_session_of_another_beflow_home_holds_the_directory(work: Path, tmp_path: Path) -> None:
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    first = holder(work, "--then", "sleep", home=home_a)
    first.wait_for("injected")

    second = holder(work, "--then", "return", "--lock-timeout", "0.5", home=home_b)
    assert second.finish() == 1
    assert second.events[-1]["kind"] == "LockedError"
    assert f"pid {first.process.pid}" in second.events[-1]["message"]

    first.process.kill()
    first.finish()
    assert cli("restore", home=home_a).returncode == 0
    assert_prior_back(work)
