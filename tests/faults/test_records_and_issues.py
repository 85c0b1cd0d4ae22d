"""A run's record is always written and its issue always left in the right status: odd text from the agent,
hostile issue files, a Ctrl-C in the middle of a git step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.faults.conftest import beflow_run, secrets_in_history
from tests.support.projects import AutoProject
from tests.support.waiting import eventually


def test_a_lone_surrogate_in_the_agents_message_is_recorded_and_the_issue_moves_on(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    key = auto_project.new_issue("write hello.txt hi\\n", "say odd \\ud800 text")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr
    record = auto_project.only_record()  # before: saving the record crashed after the commit; it stayed `running`
    assert record.outcome == "succeeded" and record.final_message == "odd \ufffd text"
    json.loads((auto_project.run_dir(record) / "run.json").read_text(encoding="utf-8"))
    issue = auto_project.issue(key)
    assert issue.status == Status.REVIEW and "odd \ufffd text" in issue.comments[-1].text
    assert "beflow/1" in auto_project.branches()
    assert secrets_in_history(auto_project.directory) == []
    # The next run does not run it again.
    assert beflow_run(auto_project, "--auto").code == 0
    assert len(auto_project.records()) == 1


ALIAS_BOMB = """\
---
key: 9
title: bomb
status: ready
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
---
"""


def test_an_alias_bomb_or_a_huge_issue_file_is_a_named_problem_and_the_other_issues_still_run(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    key = auto_project.new_issue("write hello.txt hi\\n")
    issues = auto_project.directory / ".beflow" / "issues"
    (issues / "0009-bomb.md").write_text(ALIAS_BOMB)
    (issues / "0010-huge.md").write_text("---\nkey: 10\ntitle: huge\nstatus: ready\n---\n" + "x" * (5 << 20))

    listed = beflow_run(auto_project, "issues", "list", timeout=60)  # before: grew without end
    assert "0009-bomb.md:5: invalid YAML in the front matter: anchors and aliases" in listed.stdout + listed.stderr
    assert "0010-huge.md: the file is larger than 4 MiB" in listed.stdout + listed.stderr

    done = beflow_run(auto_project, "--auto", timeout=120)
    assert [r.issue for r in auto_project.records()] == [key]
    assert auto_project.issue(key).status == Status.REVIEW, done.stderr


# -- Ctrl-C in the middle of a git step --------------------------------------------------------------------------


def _git_hook(project: AutoProject, name: str, marker: Path) -> None:
    """A hook of the user's repository that blocks git (once): Ctrl-C then comes while git is working."""
    hook = project.directory / ".git" / "hooks" / name
    # One process from the marker to the sleep (exec): a signal sent once the marker is there always reaches it.
    hook.write_text(f'#!/bin/sh\n[ -e "{marker}" ] && exit 0\ntouch "{marker}"\nexec sleep 60\n')
    hook.chmod(0o755)


def _start(project: AutoProject, *args: str) -> subprocess.Popen[str]:
    """beflow in a process group of its own, as a terminal's foreground job."""
    return subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(project.config_path), *args],
        cwd=project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


# Only `worktree add` (before the agent) runs the repository's hooks: beflow's commit, after the agent, runs none
# (docs/safety.md, "Your repository's git"; tests/faults/test_users_git.py), so no hook can hold it any more.
@pytest.mark.parametrize("step", ["post-checkout"])
def test_ctrl_c_during_a_git_step_cancels_the_run_and_puts_the_issue_back_to_ready(
    auto_project: AutoProject, tmp_path: Path, step: str, no_leftover_processes: None
) -> None:
    marker = tmp_path / f"{step}-started"
    _git_hook(auto_project, step, marker)  # post-checkout: git worktree add
    key = auto_project.new_issue("write hello.txt hi\\n")
    process = _start(auto_project, "--auto", key)
    eventually(marker.exists, "the git hook started", alive=process)

    os.killpg(process.pid, signal.SIGINT)  # the terminal's Ctrl-C: beflow, git and the hook alike
    _, stderr = process.communicate(timeout=60)

    assert process.returncode == 130, stderr
    record = auto_project.only_record()
    assert record.outcome == "cancelled" and "SIGINT" in (record.stop_reason or "")  # before: failed
    assert auto_project.issue(key).status == Status.READY  # before: failed
    assert "beflow/1" not in auto_project.branches()
    # No lock or claim is left: the next run works, and delivers the work.
    again = beflow_run(auto_project, "--auto", key)
    assert again.code == 0, again.stderr
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "hello.txt": "hi\n"}
    assert secrets_in_history(auto_project.directory) == []


def test_a_second_signal_cuts_a_cleanup_hook_short(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    marker = tmp_path / "hook-started"
    # A before_remove hook (it runs in the cleanup, shielded from the first signal) that ignores SIGTERM.
    auto_project.configure(hooks={"before_remove": f"trap '' TERM INT; touch {marker}; sleep 60"})
    key = auto_project.new_issue("write hello.txt hi\\n")
    process = _start(auto_project, "--auto", key)
    eventually(marker.exists, "the git hook started", alive=process)
    started = time.monotonic()

    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGINT)  # another signal: two of the same could merge into one while pending
    process.communicate(timeout=60)

    assert process.returncode == 130
    assert time.monotonic() - started < 30  # not the hook's 60 s (before: the shielded hook ran to its end)
    record = auto_project.only_record()
    assert record.outcome == "succeeded"  # the work was committed before the cleanup was cut short
    log = (auto_project.run_dir(record) / "hooks" / "before_remove.log").read_text()
    assert "killed by SIGKILL" in log or "stopped by a signal" in log
    assert auto_project.issue(key).status == Status.REVIEW


def test_a_sigterm_stops_a_git_step_that_hangs(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    marker = tmp_path / "post-checkout-started"
    _git_hook(auto_project, "post-checkout", marker)  # `git worktree add` waits 60 s for it
    key = auto_project.new_issue("write hello.txt hi\\n")
    process = _start(auto_project, "--auto", key)
    eventually(marker.exists, "the git hook started", alive=process)
    started = time.monotonic()

    # `kill` from another shell reaches beflow alone; git runs in a worker thread no cancellation reaches.
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)

    assert process.returncode == 130
    assert time.monotonic() - started < 30  # not the hook's 60 s (before: a second signal was needed)
    assert auto_project.only_record().outcome == "cancelled"
    assert auto_project.issue(key).status == Status.READY
