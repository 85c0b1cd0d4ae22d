"""Several ``beflow watch`` processes on one GitHub repository — separate homes, separate clones of one origin — share
its issues through leases: each issue runs to the end exactly once, never twice at a time, and the issue of a
watcher killed with SIGKILL is taken over once its lease runs out."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from beflow.records.store import RunStore
from tests.support import watching
from tests.support.github import TOKEN, FakeGitHub
from tests.support.waiting import eventually
from tests.support.watching import machine_clone

pytestmark = pytest.mark.slow

LEASE = 3.0


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    eventually(condition, what, timeout, interval=0.1)


def clone(
    tmp_path: Path, origin: Path, name: str, github: FakeGitHub, acpx: Path, agent: str, concurrency: int
) -> Path:
    tracker = {"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": LEASE}
    watch = {"interval": 0.3, "concurrency": concurrency, "backoff": 0.5}
    return machine_clone(tmp_path, origin, name, acpx, agent, tracker, watch=watch)


def start_watch(path: Path, home: Path, log: Path) -> subprocess.Popen[bytes]:
    return watching.start_watch(path, home, log, {"GITHUB_TOKEN": TOKEN})


def test_two_watchers_run_ten_issues_each_once_and_take_over_a_killed_watchers_issue(
    tmp_path: Path, github: FakeGitHub, acpx_bin: Path, test_agent_command: str, repo: Path
) -> None:
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(origin))
    marks = tmp_path / "marks"
    marks.mkdir()
    github.add_issue("Long", labels=["beflow", "beflow:ready", "priority:0"],
                     body=f"acp-test: mark {marks}/1\nacp-test: sleep 120")  # fmt: skip
    for n in range(2, 11):
        github.add_issue(f"Task {n}", labels=["beflow", "beflow:ready"],
                         body=f"acp-test: mark {marks}/{n}\nacp-test: write out-{n}.txt done {n}")  # fmt: skip
    a = clone(tmp_path, origin, "a", github, acpx_bin, test_agent_command, concurrency=1)
    b = clone(tmp_path, origin, "b", github, acpx_bin, test_agent_command, concurrency=2)
    watchers = []
    try:
        first = start_watch(a, tmp_path / "home-a", tmp_path / "a.log")
        watchers.append(first)
        wait_for(lambda: (marks / "1").exists(), 60, "watcher a to start issue 1")
        second = start_watch(b, tmp_path / "home-b", tmp_path / "b.log")
        watchers.append(second)
        machine = [first.pid, *(p.pid for p in psutil.Process(first.pid).children(recursive=True))]
        for pid in machine:  # the machine dies: the watcher, acpx and the agent; no release, no cleanup
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        first.wait()
        github.issues[1]["body"] = f"acp-test: mark {marks}/1\nacp-test: write out-1.txt done 1"  # a person edits

        def all_in_review() -> bool:
            return all("beflow:review" in github.issue_labels(n) for n in range(1, 11))

        wait_for(all_in_review, 150, "every issue to reach review")
    finally:
        for process in watchers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log = (tmp_path / "b.log").read_text(errors="replace") if (tmp_path / "b.log").exists() else ""
        print(log[-4000:])

    for n in range(2, 11):  # each ran once, to the end
        lines = (marks / str(n)).read_text().split()
        assert [lines[0], lines[3]] == ["start", "end"] and len(lines) == 6, (n, lines)
    long_runs = [line.split() for line in (marks / "1").read_text().splitlines()]
    starts = [float(t) for word, t, _ in long_runs if word == "start"]
    assert len(starts) == 2 and long_runs[-1][0] == "end"  # started on a (killed), run to the end by b
    assert starts[1] >= killed_at + LEASE - 1.5  # taken over only once the lease ran out (GitHub's clock: 1 s steps)
    assert all(float(t) <= starts[1] for word, t, _ in long_runs[:-1] if word == "end")  # never two at a time

    succeeded = [r.issue for home in (a, b) for r in RunStore(home).records() if r.outcome == "succeeded"]
    assert sorted(succeeded, key=int) == [str(n) for n in range(1, 11)]
    notes = [c["body"] for c in github.comments_of(1)]
    assert any("stopped without finishing" in note for note in notes)
    assert not github.violations
