"""The first hour of a new user, scripted: a project of their own (with an application ``config.json`` at its root),
``beflow init``, ``beflow doctor``, an issue, ``beflow --auto`` with the default agent not logged in, then logging
in and running it again. At every step the user sees the real cause and what to do, on the terminal and on the
issue.

The default agent ``codex`` is played by the tests' ACP agent (acpx's own config maps the name to it), which
answers ``session/new`` with ACP's auth-required error while ``ACP_TEST_AUTH=required``: what codex does for a
user who never ran ``codex login``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.support.projects import git

pytestmark = pytest.mark.slow

APPLICATION_CONFIG = '{\n  "database": {"url": "postgres://localhost/shop"},\n  "port": 8080\n}\n'


@pytest.fixture
def someones_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small application with its own ``config.json``, committed, as a user clones it."""
    project = tmp_path / "shop"
    (project / "src").mkdir(parents=True)
    (project / "config.json").write_text(APPLICATION_CONFIG)
    (project / "src" / "shop.py").write_text("def total(prices):\n    return sum(prices)\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", ".")
    git(project, "commit", "-q", "-m", "the shop")
    monkeypatch.chdir(project)
    return project


def test_the_first_hour(
    someones_project: Path,
    beflow,
    acpx_bin: Path,
    codex_is_the_test_agent: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_leftover_processes: None,
) -> None:
    project = someones_project
    monkeypatch.setenv("PATH", f"{acpx_bin.parent}{os.pathsep}{os.environ['PATH']}")  # installed as the README says
    monkeypatch.setenv("ACP_TEST_AUTH", "required")  # codex is installed, but its user never logged in

    # init: beflow's config goes where it collides with nothing; the application's file is left alone.
    init = beflow("init")
    assert init.exit_code == 0, init.stderr
    assert f"Wrote {project / '.beflow' / 'config.json'}" in init.stdout
    assert (project / "config.json").read_text() == APPLICATION_CONFIG
    # The sandbox pinned off, as in every test not about it: its default ("auto") would sandbox the runs here, and
    # doctor would reach for codex's API host, which this machine may not reach (tests/faults/test_sandbox_default.py).
    written = project / ".beflow" / "config.json"
    written.write_text(written.read_text().replace('{ "enabled": "auto",', '{ "enabled": false,'))

    # doctor, from a subdirectory: everything is fine but the login, which it finds by starting the agent.
    monkeypatch.chdir(project / "src")
    doctor = beflow("doctor")
    assert doctor.exit_code == 1
    assert f"✓ config: {project / '.beflow' / 'config.json'}" in doctor.stdout
    assert "config.json looks like beflow's" not in doctor.stdout  # the application's file is not beflow's
    assert doctor.stdout.splitlines()[-3:-1] == [
        "✗ agent: codex is not logged in: Authentication required",
        "    fix: Log in with `codex login` (as the user beflow runs as), then run `beflow doctor` again.",
    ]
    assert doctor.stdout.splitlines()[-1].startswith("✓ sandbox: off (sandbox.enabled is false)")

    # An issue, and a run anyway (as a user who skimmed doctor's output would).
    monkeypatch.chdir(project)
    assert (
        beflow("issues", "new", "Totals ignore discounts", "--body", "acp-test: write DISCOUNTS.md 10%").exit_code == 0
    )
    auto = beflow("--auto")

    cause = "the agent codex is not logged in: Authentication required (its answer to session/new)"
    fix = "Fix: log in with `codex login` (as the user beflow runs as), then run it again (`beflow --auto 1`)"
    assert auto.exit_code == 1
    assert f"■ issue 1: failed — {cause}. {fix}" in auto.stderr
    assert "no error output" not in auto.stderr
    issue = beflow("issues", "show", "1", "--json")
    shown = json.loads(issue.stdout)
    assert shown["status"] == Status.FAILED.value
    assert f"**failed** — {cause}. {fix}" in shown["comments"][-1]["text"]
    # Nothing was left behind: no branch identical to main, no worktree, no empty folder.
    assert git(project, "branch", "--format=%(refname:short)").split() == ["main"]
    assert not any((Path(os.environ["BEFLOW_HOME"]) / "worktrees").glob("*"))

    # The user logs in, doctor agrees, and the issue runs.
    monkeypatch.delenv("ACP_TEST_AUTH")
    doctor = beflow("doctor")
    assert doctor.exit_code == 0, doctor.stdout
    assert doctor.stdout.splitlines()[-2].startswith("✓ agent: codex started and opened a session in ")
    assert beflow("issues", "set-status", "1", "ready", "--note", "Logged in.").exit_code == 0
    rerun = beflow("--auto", "1")
    assert rerun.exit_code == 0, rerun.stderr
    assert "■ issue 1: succeeded — the agent finished (end_turn)" in rerun.stderr
    assert git(project, "show", "beflow/1:DISCOUNTS.md") == "10%"
    assert git(project, "show", "beflow/1:config.json") == APPLICATION_CONFIG
