"""``beflow demo``: the README's first command, end to end through the real acpx."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beflow.records.store import RunStore
from beflow.trackers import Status
from tests.support.projects import git


def test_demo_runs_the_sample_issue_and_shows_the_branch_the_diff_and_the_record(
    tmp_path: Path, acpx_bin: Path, beflow, monkeypatch: pytest.MonkeyPatch, no_leftover_processes: None
) -> None:
    monkeypatch.setenv("PATH", f"{acpx_bin.parent}{os.pathsep}{os.environ['PATH']}")
    directory = tmp_path / "demo"

    result = beflow("demo", "--dir", str(directory))

    assert result.exit_code == 0, result.stdout + result.stderr
    (record,) = RunStore(directory).records()
    assert record.outcome == "succeeded" and record.mcp_servers == ["docs", "search"]
    assert "def farewell" in git(directory, "show", "beflow/1:greet.py")
    assert "def test_farewell" in git(directory, "show", "beflow/1:test_greet.py")
    assert "def farewell" not in (directory / "greet.py").read_text()  # the checkout is untouched
    out = result.stdout
    assert "Outcome: succeeded — " in out
    assert "MCP servers handed to the agent: docs, search — placeholders" in out and "never starts them" in out
    assert f"beflow's own files: worktrees, locks and crash logs go under {os.environ['BEFLOW_HOME']}" in out
    assert "After the run: removed " in out and "Managed file" not in out
    # The README's first command, sandboxed by default where bwrap starts (here): the record and the output say so.
    assert record.sandboxed
    assert 'Sandbox: on ("auto", and bwrap starts here): the agent saw its worktree, not your home' in out
    assert f"Branch: beflow/1 at {(record.commit or '')[:12]}" in out and "+def farewell" in out
    assert f"Run record: {directory / '.beflow' / 'runs' / record.id}" in out
    assert "demo-token" not in "".join(p.read_text() for p in directory.joinpath(".beflow", "runs").rglob("*.*"))
    issue_file = next(directory.joinpath(".beflow", "issues").glob("0001-*.md"))
    assert f"status: {Status.REVIEW.value}" in issue_file.read_text()


def test_demo_refuses_a_directory_that_is_not_empty(tmp_path: Path, beflow) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")

    result = beflow("demo", "--dir", str(tmp_path / "busy"))

    assert result.exit_code == 2 and "is not empty" in result.stderr
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["file"]
