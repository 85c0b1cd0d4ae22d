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
from tests.support.projects import AutoProject, git


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


def _auto(project: AutoProject, key: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(project.config_path), "--auto", key],
        cwd=project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _agent_at_work(beflow: subprocess.Popen[bytes]) -> bool:
    return any("acp_agent.py" in " ".join(_cmdline(p)) for p in psutil.Process(beflow.pid).children(recursive=True))


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone, or a zombie not reaped yet (a git that just ended): no agent
        return []


def _worktree_of(project: AutoProject, key: str) -> Path:
    (record,) = [r for r in project.runs.records() if r.issue == key]
    assert record.worktree is not None
    return Path(record.worktree)


def _registered(project: AutoProject) -> list[Path]:
    return [Path(p).resolve() for p in project.registered_worktrees()]


@pytest.mark.parametrize("sandbox", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_worktree_of_a_killed_run_is_removed_by_the_next_command_never_a_live_runs(
    auto_project: AutoProject, sandbox: bool, no_leftover_processes: None
) -> None:
    if sandbox:
        auto_project.configure(sandbox={"enabled": True})
    live_key = auto_project.new_issue("sleep 60", title="goes on")
    killed_key = auto_project.new_issue("sleep 60", title="killed")
    live, killed = _auto(auto_project, live_key), _auto(auto_project, killed_key)
    try:
        wait_for(lambda: _agent_at_work(live) and _agent_at_work(killed), 60, "the agents never started")
        time.sleep(0.3)
        below = psutil.Process(killed.pid).children(recursive=True)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        wait_for(lambda: not any(_alive(p) for p in below), 10, "the killed run's agent outlived beflow")
        left, going = _worktree_of(auto_project, killed_key), _worktree_of(auto_project, live_key)
        assert left.is_dir() and sorted(_registered(auto_project)) == sorted([left, going])

        # The next command, twice at once: each closes the killed run; its worktree goes once, the live one stays.
        command = [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "runs", "list"]
        both = [subprocess.Popen(command, cwd=auto_project.directory, stderr=subprocess.PIPE) for _ in range(2)]
        for done in both:
            _, stderr = done.communicate(timeout=120)
            assert done.returncode == 0, stderr.decode()
        assert _registered(auto_project) == [going] and going.is_dir() and not left.exists()
        records = {r.issue: r for r in auto_project.runs.records()}
        assert records[live_key].outcome == "running"
        assert records[killed_key].outcome == "cancelled" and not records[killed_key].worktree_kept
        assert f"beflow/{killed_key}" not in auto_project.branches()  # it had committed nothing: no branch

        below = psutil.Process(live.pid).children(recursive=True)
        live.send_signal(signal.SIGKILL)
        live.wait()
        wait_for(lambda: not any(_alive(p) for p in below), 10, "the live run's agent outlived beflow")
        assert beflow_run(auto_project, "runs", "list").code == 0
        assert _registered(auto_project) == [] and not going.exists()
        assert len(git(auto_project.directory, "worktree", "list").splitlines()) == 1  # the main checkout alone
    finally:
        for beflow in (live, killed):
            if beflow.poll() is None:
                beflow.kill()
                beflow.wait()
