"""A project set up for real runs: the test ACP agent, the pinned acpx, MCP injection on, and helpers to read
what a run left behind (its record, the tracker, the branch)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.records.record import RunRecord, RunStore
from beflow.trackers import Issue, Status, Tracker

#: Secret values in the project's `.mcp.json`: they reach the agent, and never a run record.
SECRET_ENV = "env-secret-5f1c9a07"
SECRET_HEADER = "header-secret-8b2d4e31"

MCP_JSON = {
    "mcpServers": {
        "tools": {"command": "tools-mcp", "args": ["--stdio"], "env": {"TOOLS_KEY": SECRET_ENV}},
        "docs": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": SECRET_HEADER}},
    }
}


#: What every test's config says of the sandbox unless the test is about it: off. The default (``"auto"``) would
#: sandbox runs on a machine where bwrap works; tests/faults/test_sandbox_default.py is about that default.
UNSANDBOXED = {"enabled": False}


def config_file(directory: Path) -> Path:
    """The project config beflow discovers in ``directory`` (``.beflow/config.json``); its folder is created."""
    path = directory / ".beflow" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@dataclass
class AutoProject:
    """A temp git repository configured for ``beflow --auto`` with the test agent."""

    directory: Path
    config: dict[str, Any]

    def configure(self, **changes: Any) -> None:
        """Change keys of ``.beflow/config.json`` (a value of None removes the key)."""
        self.config.update(changes)
        self.config = {k: v for k, v in self.config.items() if v is not None}
        self.config_path.write_text(json.dumps(self.config, indent=2) + "\n")

    @property
    def config_path(self) -> Path:
        return config_file(self.directory)

    @property
    def tracker(self) -> Tracker:
        return open_tracker(load_project(self.config_path))

    def new_issue(self, *directives: str, title: str = "task", priority: int = 2, status: Status = Status.READY) -> str:
        """An issue whose body is the test agent's directives; its key."""
        body = "\n".join(f"acp-test: {d}" for d in directives)
        return self.tracker.create(title=title, body=body, priority=priority, status=status).key

    def issue(self, key: str) -> Issue:
        return self.tracker.get(key)

    @property
    def runs(self) -> RunStore:
        return RunStore(self.directory)

    def records(self, key: str | None = None) -> list[RunRecord]:
        """Finished records, newest first (optionally of one issue)."""
        return [r for r in self.runs.records() if key is None or r.issue == key]

    def only_record(self) -> RunRecord:
        (record,) = self.records()
        return record

    def run_dir(self, record: RunRecord) -> Path:
        return self.runs.directory(record.id)

    @property
    def worktrees_dir(self) -> Path:
        return load_project(self.config_path).worktrees_dir

    def branch_files(self, branch: str) -> dict[str, str]:
        """Every file on ``branch`` and its content."""
        entries = [line.split("\t", 1) for line in git(self.directory, "ls-tree", "-r", branch).splitlines()]
        names = [name for info, name in entries if info.split()[1] == "blob"]  # not nested repositories
        return {name: git(self.directory, "show", f"{branch}:{name}") for name in names}

    def branches(self) -> list[str]:
        return git(self.directory, "branch", "--format=%(refname:short)").split()

    def registered_worktrees(self) -> list[str]:
        lines = git(self.directory, "worktree", "list", "--porcelain").splitlines()
        return [line.removeprefix("worktree ") for line in lines if line.startswith("worktree ")][1:]

    def add_origin(self) -> Path:
        """A bare clone of the project beside it, as its ``origin`` remote (where runs push); its path."""
        origin = self.directory.parent / "origin.git"
        git(self.directory.parent, "clone", "-q", "--bare", str(self.directory), str(origin))
        git(self.directory, "remote", "add", "origin", str(origin))
        return origin

    def secrets_in_records(self) -> list[str]:
        """Files under ``.beflow/runs/`` holding a secret value of ``.mcp.json``."""
        found = []
        for path in (self.directory / ".beflow" / "runs").rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                found += [f"{path}: {s}" for s in (SECRET_ENV, SECRET_HEADER) if s.encode() in data]
        return found


@pytest.fixture
def auto_project(repo: Path, acpx_bin: Path, test_agent_command: str) -> AutoProject:
    """``repo`` with a .beflow/config.json for the test agent through the pinned acpx, and a `.mcp.json` to inject."""
    (repo / ".mcp.json").write_text(json.dumps(MCP_JSON, indent=2) + "\n")
    project = AutoProject(repo, {})
    project.configure(
        agent={"command": test_agent_command},
        acpx=[str(acpx_bin)],
        timeout=60,
        mcp={"enabled": True},
        sandbox=UNSANDBOXED,
    )
    return project


@pytest.fixture
def finished_run(auto_project: AutoProject, beflow) -> RunRecord:  # type: ignore[no-untyped-def]
    """One real run that succeeded: the agent said something, asked a permission, wrote a file, named its servers."""
    key = auto_project.new_issue("say looking around", "ask notes.txt hello", "mcp", title="Take notes")
    result = beflow("--auto", key)
    assert result.exit_code == 0, result.stderr
    return auto_project.only_record()
