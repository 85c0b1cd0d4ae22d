"""What would fail every run alike is refused before any issue is touched: exit 2, nothing changed."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from beflow.config import load_project
from beflow.run import preflight
from beflow.trackers import Status
from tests.conftest import git
from tests.support.projects import AutoProject, config_file


def assert_nothing_changed(project: AutoProject, key: str) -> None:
    assert project.records() == []
    assert project.issue(key).status == Status.READY
    assert project.branches() == ["main"]


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (
            lambda p: p.configure(worktrees={"base": "no-such-branch"}),
            "worktrees.base: 'no-such-branch' is not a commit",
        ),
        (lambda p: p.configure(worktrees={"dir": "wt"}), "worktrees.dir: "),
        (lambda p: p.configure(acpx=["/nonexistent/acpx"]), "acpx: '/nonexistent/acpx' is not installed"),
        (lambda p: p.configure(agent="claud"), "agent: 'claud' is not an agent acpx knows (did you mean 'claude'?)"),
        (lambda p: p.configure(agent={"command": "no-such-agent --acp"}), "agent.command: 'no-such-agent' is not"),
        (
            lambda p: (
                (p.directory / ".mcp.json").write_text('{"mcpServers": {"beflow": {"command": "x"}}}'),
                p.configure(mcp={"enabled": True, "self": True}),
            ),
            "mcp.self: the .mcp.json cascade already has a server named 'beflow'",
        ),
        (lambda p: p.configure(prompt="{{ issue.nope }}"), "issue has no field 'nope'"),
        (
            lambda p: p.configure(after_run={"pull_request": True}),
            "after_run.pull_request: pull requests need a code host",
        ),
    ],
    ids=[
        "base",
        "worktrees-inside",
        "acpx",
        "agent-name",
        "agent-command",
        "mcp-self-name-taken",
        "issue-field",
        "pull-request",
    ],
)
def test_a_configuration_every_run_would_fail_on_exits_2_and_changes_nothing(
    auto_project: AutoProject, beflow, break_it: Callable[[AutoProject], None], message: str
) -> None:
    key = auto_project.new_issue("write a.txt x")
    break_it(auto_project)

    result = beflow("--auto", key)

    assert result.exit_code == 2, result.stderr
    assert message in result.stderr
    assert_nothing_changed(auto_project, key)


@pytest.mark.parametrize("acpx", ["default", "installed"])
def test_without_node_the_missing_program_is_named_with_how_to_install_node_not_a_setting(
    auto_project: AutoProject, beflow, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, acpx_bin: Path, acpx: str
) -> None:
    """No Node.js on PATH: with the default acpx (npx, which comes with Node, is missing too) and with an acpx
    installed by npm (a script Node runs), the error names the program and how to get it, not the config file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "git")
    auto_project.configure(acpx=None if acpx == "default" else [str(acpx_bin)])
    key = auto_project.new_issue("write a.txt x")
    monkeypatch.setenv("PATH", str(bin_dir))

    result = beflow("--auto", key)

    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: node: Node.js is not installed (not found on PATH), and acpx runs on it",
        "fix: Install Node.js 22 (22.13 or later): `nvm install 22`, `fnm install 22`, your package manager or "
        "https://nodejs.org; then check with `beflow doctor`.",
    ]
    assert_nothing_changed(auto_project, key)


def test_outside_a_git_repository_nothing_runs_and_nothing_changes(tmp_path: Path, beflow, monkeypatch) -> None:
    directory = tmp_path / "not-a-repo"
    directory.mkdir()
    config_file(directory).write_text(json.dumps({"agent": "codex"}))
    monkeypatch.chdir(directory)
    git(directory, "init", "-q")  # (issues are filed only inside a git work tree)
    assert beflow("issues", "new", "task").exit_code == 0
    shutil.rmtree(directory / ".git")

    result = beflow("--auto")

    assert result.exit_code == 2
    assert "is not inside a git repository" in result.stderr
    assert not (directory / ".beflow" / "runs").exists()
    assert "ready" in beflow("issues", "list").stdout


def test_an_agent_named_in_acpx_config_is_known(auto_project: AutoProject) -> None:
    auto_project.configure(agent="my-agent")
    acpx_config = Path(os.environ["HOME"]) / ".acpx" / "config.json"
    acpx_config.parent.mkdir(parents=True)
    acpx_config.write_text(json.dumps({"agents": {"my-agent": {"command": "my-agent --acp"}}}))

    preflight.check_agent(load_project(auto_project.config_path))  # no error
