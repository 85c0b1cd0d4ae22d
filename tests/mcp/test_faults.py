"""Faults in real processes: a session that raises, times out, is signalled or killed; two processes, one file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from beflow.mcp.journal import journal_dir
from beflow.paths import ACPXRC

pytestmark = pytest.mark.slow  # every test here starts beflow as a real process

PRIOR = b'{"defaultAgent": "codex",\r\n "ttl": 1}'  # CRLF, no final newline: it must come back as is


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    (directory / ACPXRC).write_bytes(PRIOR)
    os.chmod(directory / ACPXRC, 0o644)
    return directory


def assert_restored(directory: Path) -> None:
    target = directory / ACPXRC
    assert target.read_bytes() == PRIOR
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in directory.iterdir()) == [ACPXRC]
    assert list(journal_dir().glob("*.json")) == []


def assert_managed(directory: Path) -> None:
    assert json.loads((directory / ACPXRC).read_text())["mcpServers"][0]["name"] == "probe"
    assert len(list(journal_dir().glob("*.json"))) == 1


def beflow_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m beflow ARGS`` run from the temporary home (outside any project of the real checkout)."""
    return subprocess.run(
        [sys.executable, "-m", "beflow", *args],
        cwd=os.environ["HOME"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )


@pytest.mark.parametrize(("then", "error"), [("raise", "RuntimeError"), ("timeout", "TimeoutError")])
def test_a_session_that_fails_restores_before_the_process_ends(work: Path, holder: Any, then: str, error: str) -> None:
    process = holder(work, "--then", then)
    code = process.finish()
    assert code == 1
    assert [e["event"] for e in process.events] == ["injected", "restored", "error"]
    assert process.events[-1]["kind"] == error
    assert_restored(work)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_cancels_the_session_and_the_file_is_restored(work: Path, holder: Any, signum: int) -> None:
    process = holder(work, "--then", "sleep", "--interrupts")
    process.wait_for("injected")
    assert_managed(work)
    process.process.send_signal(signum)
    assert process.finish() == 130
    assert process.events[-2:] == [
        {"event": "restored", "action": "restored"},
        {"event": "error", "kind": "Interrupted", "message": f"interrupted by {signal.Signals(signum).name}"},
    ]
    assert_restored(work)


def test_ctrl_c_without_beflows_signal_handling_still_restores(work: Path, holder: Any) -> None:
    process = holder(work, "--then", "sleep")  # Python's own SIGINT: KeyboardInterrupt
    process.wait_for("injected")
    process.process.send_signal(signal.SIGINT)
    assert process.finish() == 130
    assert process.events[-1]["kind"] == "KeyboardInterrupt"
    assert_restored(work)


@pytest.mark.parametrize("how", ["sigkill", "exit"])
def test_after_a_kill_beflow_restore_puts_the_file_back(work: Path, holder: Any, how: str) -> None:
    process = holder(work, "--then", "sleep" if how == "sigkill" else "exit")
    event = process.wait_for("injected")
    if how == "sigkill":
        process.process.kill()
    process.finish()
    assert_managed(work)  # the kill left it managed: the journal is what saves the day

    result = beflow_cli("restore")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"✓ restored {work / ACPXRC} to its content before the run (left by beflow pid {event['pid']})"
    )
    assert_restored(work)
    assert beflow_cli("restore").stdout.strip() == "Nothing to restore."


def test_any_beflow_command_restores_an_orphan_quietly_first(work: Path, holder: Any) -> None:
    process = holder(work, "--then", "exit")
    event = process.wait_for("injected")
    process.finish()

    result = beflow_cli("mcp", "check")
    assert result.returncode == 0
    assert result.stderr.strip() == (
        f"beflow: restored {work / ACPXRC} to its content before the run (left by beflow pid {event['pid']})"
    )
    assert_restored(work)
    assert beflow_cli("mcp", "check").stderr == ""


def test_restore_leaves_the_file_of_a_running_beflow_alone(work: Path, holder: Any) -> None:
    process = holder(work, "--then", "sleep")
    event = process.wait_for("injected")

    result = beflow_cli("restore")
    assert result.returncode == 0
    assert f"left alone: {work / ACPXRC} is managed by a running beflow (pid {event['pid']})" in result.stdout
    assert_managed(work)

    process.process.kill()
    process.finish()
    beflow_cli("restore")
    assert_restored(work)


# --- two processes, one file ---------------------------------------------------------------------------------


def test_a_second_process_waits_for_the_first_then_sees_the_real_prior(work: Path, holder: Any) -> None:
    first = holder(work, "--then", "wait-file")
    first.wait_for("injected")
    second = holder(work, "--then", "return", "--lock-timeout", "30")
    waiting = second.wait_for("waiting")
    assert str(work / ACPXRC) in waiting["message"] and f"pid {first.process.pid}" in waiting["message"]
    time.sleep(0.3)
    assert second.process.poll() is None  # still waiting: it has not touched the file
    assert_managed(work)

    (work / "release").touch()
    assert first.finish() == 0
    assert second.finish() == 0
    assert [e["event"] for e in second.events] == ["waiting", "injected", "restored"]
    (work / "release").unlink()
    assert_restored(work)


def test_a_second_process_refuses_after_its_timeout_naming_the_path_and_the_holder(work: Path, holder: Any) -> None:
    first = holder(work, "--then", "sleep")
    first.wait_for("injected")
    second = holder(work, "--then", "return", "--lock-timeout", "0.5")
    assert second.finish() == 1
    error = second.events[-1]
    assert error["kind"] == "LockedError"
    assert str(work / ACPXRC) in error["message"] and f"pid {first.process.pid}" in error["message"]
    assert_managed(work)  # the first run's file is untouched

    first.process.send_signal(signal.SIGKILL)
    first.finish()
    beflow_cli("restore")
    assert_restored(work)
