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


def test_demo_on_a_node_older_than_22_runs_acpx_on_the_pinned_node_that_npx_fetches(
    tmp_path: Path, acpx_bin: Path, beflow, monkeypatch: pytest.MonkeyPatch, no_leftover_processes: None
) -> None:
    """The README's command on a machine with Node 20 and no acpx: the demo asks npx for the pinned Node.js 22 beside
    the pinned acpx, and says so. npx here is a stand-in that checks what it was asked for and runs the pinned acpx
    on the suite's Node 22 (tools/node), as `npx -y -p node@… -p acpx@… acpx` does once it has them (no download in
    a test)."""
    from beflow import ACPX_VERSION, NODE_VERSION
    from tests.conftest import NODE_BIN

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real_node = NODE_BIN / "node"
    (bin_dir / "node").write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo v20.20.2; exit 0; }}\nexec {real_node} "$@"\n'
    )
    wanted = f"-y -p node@{NODE_VERSION} -p acpx@{ACPX_VERSION} acpx"
    (bin_dir / "npx").write_text(
        f'#!/bin/sh\necho "npx $*" >&2\n[ "$1 $2 $3 $4 $5 $6" = "{wanted}" ] || exit 97\nshift 6\n'
        f'PATH={NODE_BIN}:$PATH exec {acpx_bin} "$@"\n'
    )
    for name in ("node", "npx"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    result = beflow("demo", "--dir", str(tmp_path / "demo"))

    assert result.exit_code == 0, result.stdout + result.stderr
    (record,) = RunStore(tmp_path / "demo").records()
    stderr = (tmp_path / "demo" / ".beflow" / "runs" / record.id / "stderr.log").read_text()
    assert f"npx {wanted} --cwd " in stderr  # (in the sandbox, whose /tmp is its own: the run's log is what says)
    note = next(line for line in result.stdout.splitlines() if line.startswith("Node.js: "))
    assert note.startswith("Node.js: this machine's v20.20.2 is older than 22.13, which acpx and real agents need:")
    assert f"this demo's acpx runs on Node.js {NODE_VERSION}, which npx fetches beside it on first use" in note
    # Fetched once outside the sandbox, where npx's cache keeps it (a sandboxed run's writes to ~/.npm go with it).
    assert f"acpx: `npx {wanted}` (npx fetches it on first use)…\nacpx: ready in " in result.stdout
    assert "Outcome: succeeded" in result.stdout


def test_the_demo_agent_runs_on_a_repository_that_is_not_the_demos_and_writes_notes_on_the_issue(
    repo: Path, acpx_bin: Path, beflow, no_leftover_processes: None
) -> None:
    """beflow docs demo, as written: `beflow demo --agent` gives the setting; a run on any repository leaves
    NOTES/issue-<key>.md on the issue's branch, the same for the same issue."""
    import json

    from tests.support.projects import config_file

    printed = beflow("demo", "--agent")
    assert printed.exit_code == 0
    setting = json.loads(printed.stdout)
    assert setting["agent"]["command"].endswith(" -m beflow.demo.agent")
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text(json.dumps({"acpx": [str(acpx_bin)], **setting}))
    body = "Which commands make a release?\nAnd who signs it?"
    assert beflow("issues", "new", "Explain the release steps", "--body", body).exit_code == 0

    result = beflow("--auto")

    assert result.exit_code == 0, result.stderr
    (record,) = RunStore(repo).records()
    assert record.outcome == "succeeded" and record.changed_files == ["A\tNOTES/issue-1.md"]
    assert git(repo, "show", "beflow/1:NOTES/issue-1.md") == (
        "# Issue 1: Explain the release steps\n\n"
        "Notes by beflow's demo agent, which needs no model and no account: it does not solve issues. It writes\n"
        "this file so that a run on this repository goes through every step a real agent's does: the worktree,\n"
        "the MCP servers, the commit to a branch, the record and the comment on the issue.\n\n"
        "## What the issue says\n\n"
        "> Which commands make a release?\n"
        "> And who signs it?\n\n"
        "## What the run handed the agent\n\n"
        "- the repository's top level: `README.md`\n"
        "- MCP servers: none\n"
    )
    assert "I wrote NOTES/issue-1.md" in (record.final_message or "")
    assert not (repo / "NOTES").exists()  # the checkout is untouched
