"""Two ``beflow watch`` processes on one GitHub repository, and GitHub holding the first one's lease renewal for
25 s: the first run stops before its lease ends, the second takes the issue over, and the issue is published once
(real processes: two watchers, the pinned acpx, the test agent, the fake GitHub)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from beflow.records.store import RunStore
from tests.support.github import TOKEN, FakeGitHub, wait_until
from tests.support.projects import UNSANDBOXED, config_file

pytestmark = pytest.mark.slow

LEASE = 6.0


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def clone(tmp_path: Path, origin: Path, name: str, github: FakeGitHub, acpx: Path, agent: str) -> Path:
    path = tmp_path / name
    git(tmp_path, "clone", "-q", str(origin), str(path))
    config = {
        "agent": {"command": agent},
        "acpx": [str(acpx)],
        "timeout": 120,
        "sandbox": UNSANDBOXED,
        "tracker": {"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": LEASE},
        "watch": {"interval": 0.3, "concurrency": 1, "backoff": 0.5},
        "after_run": {"pull_request": True},
    }
    config_file(path).write_text(json.dumps(config))
    return path


def start_watch(path: Path, home: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BEFLOW_HOME": str(home), "GITHUB_TOKEN": TOKEN}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "beflow", "--config", str(config_file(path)), "watch", "--json"],
            cwd=path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def test_a_hanging_lease_renewal_never_lets_two_machines_publish_one_issue(
    tmp_path: Path, github: FakeGitHub, acpx_bin: Path, test_agent_command: str, repo: Path
) -> None:
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(origin))
    marks = tmp_path / "marks"
    github.add_issue("Slow", labels=["beflow", "beflow:ready"],
                     body=f"acp-test: mark {marks}\nacp-test: sleep 8\nacp-test: write notes.txt done")  # fmt: skip
    a = clone(tmp_path, origin, "a", github, acpx_bin, test_agent_command)
    b = clone(tmp_path, origin, "b", github, acpx_bin, test_agent_command)
    watchers = [start_watch(a, tmp_path / "home-a", tmp_path / "a.log")]
    try:
        wait_until(marks.exists, "watcher a to start the issue", timeout=60)
        github.delay("PATCH", "/repos/octo/hello/git/refs/beflow/claims/1", 25)  # a's next renewal hangs
        watchers.append(start_watch(b, tmp_path / "home-b", tmp_path / "b.log"))

        def settled() -> bool:
            done = [r for home in (a, b) for r in RunStore(home).records() if r.outcome != "running"]
            first = [r for r in RunStore(a).records() if r.outcome != "running"]
            return (
                "beflow:review" in github.issue_labels(1)
                and bool(first)
                and any(r.outcome == "succeeded" for r in done)
            )

        # (Without the bound, a's first run goes on until its renewal returns, then publishes and finishes: it is
        # waited for all the same.)
        wait_until(settled, "a's first run to end and the issue to be published", timeout=150)
    finally:
        for process in watchers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for name in ("a", "b"):
            log = tmp_path / f"{name}.log"
            print(name, log.read_text(errors="replace")[-3000:] if log.exists() else "")

    records = sorted((r for home in (a, b) for r in RunStore(home).records()), key=lambda r: r.started_at)
    cancelled = records[0]  # a's first run: stopped before its lease ran out, published nothing
    assert cancelled.outcome == "cancelled" and "claim" in (cancelled.stop_reason or ""), cancelled.stop_reason
    assert cancelled.pull_request is None
    (published,) = [r for r in records if r.outcome == "succeeded"]  # the issue ran to the end once, by a new claim
    pulls = "/repos/octo/hello/pulls"
    publishes = github.requests("POST", pulls) + github.requests("PATCH", f"{pulls}/")
    assert len(publishes) == 1 and len(github.pulls) == 1
    (pull,) = github.pulls.values()
    assert published.pull_request == pull["html_url"]
    # The first run wrote nothing on the issue once its lease was in doubt: the last word is the second run's.
    assert not any(cancelled.id in c["body"] and "cancelled" in c["body"] for c in github.comments_of(1))
