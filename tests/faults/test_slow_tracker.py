"""A tracker that answers slowly never holds up the event loop: while GitHub holds a run's progress update for
20 s, another run's events keep coming as the agent works, and one Ctrl-C (SIGINT) stops beflow at once."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject

#: What beflow's progress updates say (the final outcome, edited into the same comment, does not).
PROGRESS_TEXT = "is working on this issue"
AUTO = ("--auto", "--concurrency", "2", "--json")


def test_a_held_progress_update_holds_up_no_other_run_nor_ctrl_c(
    auto_project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    auto_project.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 60})
    labels = ["beflow", "beflow:ready"]
    # A: quiet for longer than the progress comment's minimum interval, then busy: its update goes out, and is held.
    github.add_issue("A", labels=[*labels, "priority:0"], body="acp-test: say a0\nacp-test: sleep 16\n"
                     + "".join(f"acp-test: say a{n}\nacp-test: sleep 0.5\n" for n in range(1, 80)))  # fmt: skip
    # B: busy throughout, a message every 0.2 s.
    github.add_issue("B", labels=[*labels, "priority:1"],
                     body="".join(f"acp-test: say b{n}\nacp-test: sleep 0.2\n" for n in range(200)))  # fmt: skip
    github.delay("PATCH", "", 20, times=None, body=PROGRESS_TEXT)

    events: list[dict[str, Any]] = []
    beflow = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), *AUTO],
        cwd=auto_project.directory,
        env={**os.environ, "GITHUB_TOKEN": TOKEN},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def read() -> None:
        assert beflow.stdout is not None
        for line in beflow.stdout:
            events.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not github.held and time.monotonic() < deadline:
            time.sleep(0.1)
        assert github.held, "no progress update was sent"
        held_at = github.held[0]
        while time.time() < held_at + 4:  # four seconds into the hold
            time.sleep(0.1)

        def activity_of(key: str) -> list[float]:
            return [float(e["time"]) for e in list(events) if e.get("event") == "activity" and e.get("issue") == key]

        during = [t for t in activity_of("2") if t >= held_at]
        assert len(during) >= 10, f"B's events stopped while A's update was held: {activity_of('2')[-5:]}"
        gaps = [later - earlier for earlier, later in itertools.pairwise(during)]
        # The agent speaks every ~0.2 s; generously, no event of B comes more than a second after the one before.
        assert max(gaps) < 1.0, gaps

        below = psutil.Process(beflow.pid).children(recursive=True)
        agents = [p for p in below if p.cmdline()[1:2] and p.cmdline()[1].endswith("acp_agent.py")]
        assert len(agents) == 2
        interrupted = time.monotonic()
        beflow.send_signal(signal.SIGINT)
        # At once, both runs are cancelled and their agents stopped: nothing waits for the held request.
        while any(_alive(agent) for agent in agents) and time.monotonic() - interrupted < 10:
            time.sleep(0.05)
        assert not any(_alive(agent) for agent in agents)
        assert time.monotonic() - interrupted < 6
        # The runs' outcomes are then written to GitHub, whose client sends one write at a time: after the held one,
        # which the test lets go now rather than wait out.
        assert beflow.poll() is None
        github.released.set()
        assert beflow.wait(timeout=60) == 130
    finally:
        if beflow.poll() is None:
            beflow.kill()
            beflow.wait()
    reader.join(timeout=5)
    finished = {e["issue"]: e["outcome"] for e in events if e.get("event") == "finished"}
    assert finished == {"1": "cancelled", "2": "cancelled"}


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
