"""beflow never reads or writes through a path an agent could have made (docs/safety.md): without the sandbox the
agent can write the project's run records, and its branch fills the next round's worktree. Each attack is the test
agent's own shell command (``run``) in a real ``beflow --auto``, against the user's files in a temporary home."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.conftest import beflow_run, secrets_in_history
from tests.support.projects import AutoProject, git


@pytest.fixture
def home() -> Path:
    """The user's home of the test (HOME is a temporary directory), with a shell profile."""
    path = Path(os.environ["HOME"])
    (path / ".bashrc").write_text("# the user's own\nexport PATH=$HOME/bin:$PATH\n")
    return path


def unsandboxed(project: AutoProject) -> Path:
    """The project's run records, which an agent without the sandbox can write."""
    project.configure(sandbox={"enabled": False})
    return project.directory / ".beflow" / "runs"


def test_a_dangling_symlink_the_agent_committed_in_place_of_an_included_file_is_never_written_through(
    auto_project: AutoProject, home: Path, no_leftover_processes: None
) -> None:
    unsandboxed(auto_project)
    (auto_project.directory / ".gitignore").write_text(".env\n")
    git(auto_project.directory, "add", ".gitignore")
    git(auto_project.directory, "commit", "-q", "-m", "ignore .env")
    (auto_project.directory / ".env").write_text("DATABASE_PASSWORD=user-secret-1618\n")
    auto_project.configure(worktrees={"include": [".env"]})
    planted = home / ".profile"  # dangling: the user has none (a login shell would run what is written there)
    key = auto_project.new_issue(
        f"run rm .env && ln -s {planted} .env && git add -f .env && git commit -q -m link && echo committed",
        "write hello.txt hi\\n",
    )
    first = beflow_run(auto_project, "--auto", key)
    assert first.code == 0, first.stderr
    assert git(auto_project.directory, "cat-file", "-p", "beflow/1:.env") == str(planted)  # the link is on the branch
    assert not planted.exists()

    # The next round continues the branch: its worktree holds the link where the user's .env would go.
    assert beflow_run(auto_project, "issues", "set-status", key, "ready").code == 0
    second = beflow_run(auto_project, "--auto", key)

    assert second.code == 0, second.stderr
    assert not planted.exists()  # before: the user's .env was written there, outside the worktree
    assert (auto_project.directory / ".env").read_text() == "DATABASE_PASSWORD=user-secret-1618\n"
    assert [r.outcome for r in auto_project.records()] == ["no_changes", "succeeded"]  # newest first
    assert secrets_in_history(auto_project.directory) == []
