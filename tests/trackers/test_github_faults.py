"""GitHub failing under a running ``beflow watch``: a revoked token, server errors, a rate limit, a renamed
repository. The watch keeps running, says what is wrong in its ``--json`` events, and goes on when GitHub answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow


def test_watch_rides_out_github_faults_and_resumes(auto_project: AutoProject, github: FakeGitHub) -> None:
    auto_project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 30},
        watch={"interval": 0.3, "concurrency": 1},
    )
    env = {**os.environ, "GITHUB_TOKEN": TOKEN}
    watch = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "watch", "--json"],
        cwd=auto_project.directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    events: list[dict[str, Any]] = []

    def read() -> None:
        assert watch.stdout is not None
        for line in watch.stdout:
            if line.startswith("{"):
                events.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def said(text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in str(e.get("message", "")) for e in events):
            assert watch.poll() is None, f"the watch stopped: {events[-5:]}"
            assert time.monotonic() < deadline, f"no event saying {text!r}: {events[-5:]}"
            time.sleep(0.1)

    def fault(start: Callable[[], None], text: str, stop: Callable[[], None]) -> None:
        events.clear()
        start()
        said(text)
        stop()

    try:
        wait_until(lambda: len(github.seen) > 3, "the watch to poll")
        tokens = dict(github.tokens)
        fault(
            lambda: github.tokens.clear(),
            "GitHub refused the token in $GITHUB_TOKEN",
            lambda: github.tokens.update(tokens),
        )
        fault(
            lambda: github.fail(502, times=12, only="GET"),
            ": 502",
            lambda: wait_until(lambda: not github.faults, "5xx"),
        )
        reset = str(int(time.time()) + 8)  # longer than a wait taken in line
        headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset}
        body = {"message": "API rate limit exceeded", "documentation_url": "https://docs.github.com"}
        fault(lambda: github.fail(403, headers=headers, body=body), "asked beflow to slow down", lambda: None)
        fault(
            lambda: setattr(github, "repo", "octo/renamed"),
            "tracker.repo: octo/hello is not a repository",
            lambda: setattr(github, "repo", "octo/hello"),
        )

        github.add_issue("After the storm", labels=["beflow", "beflow:ready"], body="acp-test: write calm.txt yes")
        wait_until(lambda: any(e.get("event") == "finished" for e in events), "the run after the faults", 120)
        assert [e["outcome"] for e in events if e.get("event") == "finished"] == ["succeeded"]
        assert watch.poll() is None  # still watching
    finally:
        watch.kill()
        watch.wait()
    assert TOKEN not in json.dumps(events)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
