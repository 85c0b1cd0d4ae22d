"""Stalls against what can go wrong around them, beflow as a real process: an agent whose silent tool ignores every
polite signal, beflow stopped or killed while a stall is pending."""

from __future__ import annotations

import json
import signal
import time

from tests.conftest import processes_under
from tests.faults.conftest import beflow_run
from tests.support.projects import AutoProject
from tests.support.waiting import eventually


def test_a_stalled_agent_whose_tool_ignores_signals_is_still_stopped_and_nothing_is_left_running(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    # (5 s: on a loaded machine acpx and the agent may take seconds to start, and nothing before they do is life)
    auto_project.configure(limits={"stall": 5})
    key = auto_project.new_issue("write started.txt x", "run trap '' TERM INT HUP; sleep 60 & wait; sleep 60")
    started = time.monotonic()

    done = beflow_run(auto_project, "--auto", key, timeout=60)

    assert done.code == 1, done.stderr
    record = auto_project.only_record()
    assert record.outcome == "stalled" and record.last_activity is not None and "Run trap" in record.last_activity
    assert time.monotonic() - started < 40  # the stall and the grace period, not the tool's minutes
    assert processes_under(auto_project.directory.parent) == []
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "started.txt": "x"}


def test_a_signal_while_a_stall_is_pending_cancels_the_run_as_a_signal_does(
    auto_project: AutoProject, beflow_process, no_leftover_processes: None
) -> None:
    auto_project.configure(limits={"stall": 30})
    key = auto_project.new_issue("write started.txt x", "sleep 60")
    process = beflow_process("--config", str(auto_project.config_path), "--auto", key, cwd=auto_project.directory)
    eventually((auto_project.worktrees_dir / key / "started.txt").exists, "the agent started", 30, alive=process)

    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)

    assert process.returncode == 130
    record = auto_project.only_record()
    assert record.outcome == "cancelled" and "SIGTERM" in (record.stop_reason or "")
    assert record.silent_for is None
    assert auto_project.issue(key).status.value == "ready"


def test_beflow_killed_mid_stall_leaves_a_record_the_next_command_closes_and_no_agent_behind(
    auto_project: AutoProject, beflow_process, no_leftover_processes: None
) -> None:
    auto_project.configure(limits={"stall": 30})
    key = auto_project.new_issue("write started.txt x", "sleep 60")
    process = beflow_process("--config", str(auto_project.config_path), "--auto", key, cwd=auto_project.directory)
    eventually((auto_project.worktrees_dir / key / "started.txt").exists, "the agent started", 30, alive=process)

    process.kill()
    process.wait(timeout=10)
    eventually(lambda: not processes_under(auto_project.directory.parent), "acpx and the agent stopped", 15)

    listed = beflow_run(auto_project, "runs", "list", "--json")
    (stale,) = json.loads(listed.stdout)
    assert stale["outcome"] == "cancelled" and "killed" in stale["stop_reason"]
    assert stale["silent_for"] is None and stale["usage"] is None
