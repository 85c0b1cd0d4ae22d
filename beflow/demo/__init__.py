"""``beflow demo``: a sample repository, the local tracker with one issue, and a real run through acpx.

The sample is a tiny Python project; its one issue asks for a ``farewell`` function. The demo agent
(:mod:`beflow.demo.agent`) is a real ACP agent that acpx drives like any other, so the run goes through every
step a real one does: claim, worktree, MCP injection and restore, acpx, commit, record, tracker update.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# The run machinery is loaded by the functions that use it: the demo agent (``python -m beflow.demo.agent``,
# started by acpx for every demo run) imports this package first, and needs none of it.
if TYPE_CHECKING:
    from beflow.config import Project
    from beflow.events import EventSink
    from beflow.records.record import RunRecord

GREET = '''"""Greetings."""


def greet(name: str) -> str:
    """Say hello to ``name``."""
    return f"Hello, {name}!"
'''

ISSUE_BODY = """We greet people but never say goodbye.

Add a `farewell(name)` function next to `greet` in `greet.py` that returns `Goodbye, <name>!`, with a test.
"""

MCP_SERVERS = {
    "mcpServers": {
        # Handed to the agent by name; the demo agent lists what it received. Values stay masked in output.
        "docs": {
            "type": "http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer ${DEMO_DOCS_TOKEN:-demo-token}"},
        },
        "search": {"command": "npx", "args": ["-y", "example-search-mcp"], "env": {"SEARCH_KEY": "demo-key"}},
    }
}


def agent_command() -> str:
    """The demo agent's command line for ``agent.command``: this interpreter, whose beflow has it. It works in any
    repository (without ``greet.py`` it writes notes on the issue): a run with no model and no account."""
    return shlex.join([sys.executable, "-m", "beflow.demo.agent"])


@dataclass(frozen=True)
class Demo:
    project: Project
    issue_key: str


def create(directory: Path) -> Demo:
    """A sample repository in ``directory`` (which must not exist or be empty), ready for ``beflow --auto``."""
    from beflow.app import open_tracker
    from beflow.config import CONFIG_PATH, load_project
    from beflow.errors import UsageError
    from beflow.repository import git
    from beflow.system.files import atomic_write
    from beflow.trackers import LocalTracker

    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise UsageError(f"{directory} is not empty", fix="Pass --dir with a new directory.")
    git.run(directory, "init", "--quiet", "--initial-branch=main")
    atomic_write(directory / "greet.py", GREET)
    atomic_write(directory / "README.md", "# greet\n\nA tiny sample project for the beflow demo.\n")
    atomic_write(directory / ".gitignore", ".acpxrc.json\n__pycache__/\n")
    config = {
        "agent": {"command": agent_command()},
        "timeout": 120,
        "mcp": {"enabled": True},
    }
    atomic_write(directory / CONFIG_PATH, json.dumps(config, indent=2) + "\n")
    atomic_write(directory / ".mcp.json", json.dumps(MCP_SERVERS, indent=2) + "\n")
    git.run(directory, "add", "--", "greet.py", "README.md", ".gitignore", str(CONFIG_PATH), ".mcp.json")
    demo = {"GIT_AUTHOR_NAME": "beflow demo", "GIT_AUTHOR_EMAIL": "demo@beflow.invalid"}
    demo |= {"GIT_COMMITTER_NAME": "beflow demo", "GIT_COMMITTER_EMAIL": "demo@beflow.invalid"}
    git.run(directory, "commit", "--quiet", "--no-verify", "-m", "A tiny greeting module", env=demo)
    project = load_project(directory / CONFIG_PATH)
    tracker = open_tracker(project)
    assert isinstance(tracker, LocalTracker)
    issue = tracker.create(title="Say goodbye too", body=ISSUE_BODY, labels=["demo"], priority=1)
    return Demo(project=project, issue_key=issue.key)


def fetch_acpx(project: Project) -> float | None:
    """When acpx comes through npx (none configured or on PATH): have npx fetch it — and the pinned Node.js, where
    this machine's is older — once, outside the sandbox, so that npx's cache holds it for the run. A sandboxed
    run's writes to ``~/.npm`` are its own and go with it: without this, every run on a new machine installed acpx
    again. The seconds it took, or ``None`` when there was nothing to fetch or it failed (the run then says why)."""
    from beflow.errors import BeflowError, Interrupted
    from beflow.system import proc

    argv = project.config.acpx_argv()
    if argv[0] != "npx":
        return None
    try:
        result = proc.run_sync([*argv, "--version"], timeout=600.0)
    except Interrupted:
        raise
    except BeflowError:
        return None
    return result.duration if result.ok else None


async def run(demo: Demo, events: EventSink | None = None) -> RunRecord:
    """Run the demo's issue exactly as ``beflow --auto`` would."""
    from beflow.app import open_code_host, open_tracker
    from beflow.run.batch import run_many

    tracker = open_tracker(demo.project)
    (record,) = await run_many(demo.project, tracker, [demo.issue_key], opens_code_host=open_code_host, events=events)
    return record
