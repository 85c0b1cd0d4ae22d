"""A watcher SIGKILLed in the middle of a review round: the next watch takes the round over (the issue's feedback
is still unanswered: the branch has no commit saying otherwise) and answers each piece exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from beflow.trackers import Status
from tests.faults.conftest import beflow_run
from tests.faults.test_beflow_killed import _alive, wait_for
from tests.support.projects import AutoProject, git


def test_a_round_whose_watcher_was_killed_is_taken_over_and_each_piece_answered_once(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    auto_project.configure(watch={"interval": 0.2, "backoff": 0.1, "backoff_max": 1}, feedback={"settle": 0.1})
    key = auto_project.new_issue("write hello.txt hi")
    assert beflow_run(auto_project, "--auto", key).code == 0
    once = tmp_path / "round-started"
    # The first watcher's agent hangs in the round (the takeover's goes straight on).
    text = f"also handle the empty case\nacp-test: run test -e {once} || {{ touch {once}; sleep 60; }}\n"
    text += "acp-test: write empty.txt handled"
    assert beflow_run(auto_project, "issues", "comment", key, text, "--rework").code == 0

    watcher = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "watch", "--json"],
        cwd=auto_project.directory,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    below: list[psutil.Process] = []
    try:
        wait_for(once.exists, 60, "the round's agent never started")
        below = psutil.Process(watcher.pid).children(recursive=True)
    finally:
        watcher.send_signal(signal.SIGKILL)
        watcher.wait()
    assert auto_project.issue(key).status == Status.IN_PROGRESS  # (nobody could say otherwise)

    # A resumed session runs under acpx's detached queue owner (`prompt -s`), which outlives a SIGKILLed beflow
    # with its agent at work: the next beflow command, whatever it is, ends it.
    assert beflow_run(auto_project, "runs", "list").code == 0
    wait_for(lambda: not any(_alive(p) for p in below), 10, "the round's agent outlived its watcher")

    done = beflow_run(auto_project, "watch", "--once")
    assert done.code == 0, done.stderr

    rounds = [(r.round, r.outcome) for r in reversed(auto_project.records(key))]
    assert rounds == [(0, "succeeded"), (1, "cancelled"), (1, "succeeded")]
    taken_over = auto_project.records(key)[0]
    (piece,) = taken_over.feedback
    trailers = git(auto_project.directory, "log", "--format=%(trailers:key=Beflow-Feedback,valueonly)", "beflow/1")
    assert trailers.split() == [piece.id]
    assert auto_project.branch_files("beflow/1")["empty.txt"] == "handled"
    replies = [c.text for c in auto_project.issue(key).comments if c.text.startswith("beflow answered")]
    assert len(replies) == 1 and auto_project.issue(key).status == Status.REVIEW

    # Another watch, later: nothing left to answer.
    assert beflow_run(auto_project, "watch", "--once").code == 0
    assert len(auto_project.records(key)) == 3
    assert len([c for c in auto_project.issue(key).comments if c.text.startswith("beflow answered")]) == 1
