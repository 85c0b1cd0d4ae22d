"""beflow SIGKILLed in the middle of a run (no chance to stop anything): acpx and the agent it started are gone
within seconds, however the agent behaves, and the next beflow command puts back what the run had changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.conftest import processes_under
from tests.faults.conftest import beflow_run
from tests.support.projects import AutoProject


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.05)


def prompted(record: Path) -> bool:
    return record.exists() and any(
        json.loads(line)["method"] == "session/prompt" for line in record.read_text().splitlines()
    )


@pytest.mark.parametrize(
    "agent",
    [
        "sleep 60",  # an agent that stops when asked
        "run trap '' TERM INT HUP; sleep 60 & wait; sleep 60",  # one whose tool ignores every polite signal
    ],
)
def test_acpx_and_the_agent_die_with_beflow_and_the_next_command_cleans_up(
    auto_project: AutoProject, tmp_path: Path, agent: str, no_leftover_processes: None
) -> None:
    agent_log = tmp_path / "agent.jsonl"
    key = auto_project.new_issue(agent, "write late.txt too late", title="long")
    beflow = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "--auto", key],
        cwd=auto_project.directory,
        env={**os.environ, "ACP_TEST_RECORD": str(agent_log)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: prompted(agent_log), 30, "the agent never got its prompt")
        time.sleep(0.3)  # (the agent's tool starts)
        below = psutil.Process(beflow.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in below)
        assert "acpx" in names and "acp_agent.py" in names, names
    finally:
        beflow.send_signal(signal.SIGKILL)
        beflow.wait()

    deadline = time.monotonic() + 10
    while any(_alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in below), f"left running after beflow was killed: {processes_under(tmp_path)}"

    done = beflow_run(auto_project, "runs", "list")
    assert done.code == 0, done.stderr
    assert not list((Path(os.environ["BEFLOW_HOME"]) / "journal").glob("*.json"))
    assert auto_project.only_record().outcome == "cancelled"
    assert not (Path(auto_project.only_record().worktree or tmp_path / "none") / "late.txt").exists()


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
