"""Fixtures for the MCP tests: real processes that manage an ``.acpxrc.json``, and the seed's cascade."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.projects import config_file

HOLDER = Path(__file__).resolve().parent / "holder.py"
REPO_ROOT = Path(__file__).resolve().parent.parent.parent


class Holder:
    """One ``holder.py`` process; ``events`` are the JSON lines it printed so far."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []

    def next_event(self, timeout: float = 20.0) -> dict[str, Any]:
        assert self.process.stdout is not None
        # readline blocks; the process prints promptly or dies (EOF), and the test run has its own timeout.
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout)
            raise AssertionError(f"holder exited ({self.process.returncode}): {self.process.stderr.read()}")
        event = json.loads(line)
        self.events.append(event)
        return event

    def wait_for(self, name: str) -> dict[str, Any]:
        while True:
            event = self.next_event()
            if event["event"] == name:
                return event

    def finish(self, timeout: float = 20.0) -> int:
        try:
            out, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            masks = signal_masks(self.process.pid)
            self.process.send_signal(signal.SIGUSR1)  # its stacks, then the end
            try:
                _, err = self.process.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                _, err = self.process.communicate()
            raise AssertionError(f"holder still running after {timeout} s ({masks}):\n{err}") from None
        self.events.extend(json.loads(line) for line in out.splitlines() if line.strip())
        return self.process.returncode


def signal_masks(pid: int) -> str:
    """The blocked, ignored and caught signal masks of a process, as /proc shows them."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return ", ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def spawn_holder(directory: Path, *args: str) -> Holder:
    """Start ``holder.py DIR ARGS`` (a real process: its locks, signals and crashes are real)."""
    process = subprocess.Popen(
        [sys.executable, str(HOLDER), str(directory), *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    return Holder(process)


@pytest.fixture
def holder() -> Iterator[Any]:
    """``holder(directory, *args)`` starts a holder process; any still running at the end is killed."""
    started: list[Holder] = []

    def start(directory: Path, *args: str) -> Holder:
        started.append(spawn_holder(directory, *args))
        return started[-1]

    yield start
    for held in started:
        if held.process.poll() is None:
            held.process.kill()
        held.process.communicate()


SEED_MCP_JSON = """\
{
  "mcpServers": {
    "codegraph": {
      "type": "stdio",
      "command": "bunx",
      "args": ["codegraph", "serve", "--mcp"],
      "env": { "CG_INDEX": "/path/to/index.db" },
    },
    "docs": {
      "type": "http",
      "url": "https://mcp.example.com/sse",
      "headers": { "Authorization": "Bearer TOKEN" },
    },
  },
}
"""

#: The seed's two translations, exactly as it prints them.
SEED_CODEGRAPH = """\
{
  "name": "codegraph",
  "command": "bunx",
  "args": ["codegraph", "serve", "--mcp"],
  "env": [{ "name": "CG_INDEX", "value": "/path/to/index.db" }]
}
"""
SEED_DOCS = """\
{
  "type": "http",
  "name": "docs",
  "url": "https://mcp.example.com/sse",
  "headers": [{ "name": "Authorization", "value": "Bearer TOKEN" }]
}
"""


@pytest.fixture
def project_dir(repo: Path) -> Path:
    """A git repository with a config.json that turns injection on."""
    config_file(repo).write_text('{ "mcp": { "enabled": true } }\n')
    return repo


def write_mcp(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
