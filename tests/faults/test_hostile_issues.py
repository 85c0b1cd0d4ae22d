"""A hostile issue on GitHub is that issue's problem: a label holding U+2028, a line break or an escape sequence
never stops ``issues list``, ``doctor``, ``--auto`` or ``watch`` (real processes against the fake GitHub)."""

from __future__ import annotations

import pytest

from tests.faults.conftest import beflow_run
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject

ENV = {"GITHUB_TOKEN": TOKEN}


@pytest.fixture
def gh(auto_project: AutoProject, github: FakeGitHub) -> AutoProject:
    auto_project.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 30})
    return auto_project


@pytest.mark.parametrize("label", ["evil\u2028label", "two\nlines", "esc\x1b[2Jhere"])
def test_one_hostile_label_stops_nothing(gh: AutoProject, github: FakeGitHub, label: str) -> None:
    github.add_issue("Hostile", labels=["beflow", "beflow:ready", label], body="acp-test: write hostile.txt no")
    github.add_issue("Good", labels=["beflow", "beflow:ready"], body="acp-test: write good.txt yes")

    listed = beflow_run(gh, "issues", "list", env=ENV)
    assert listed.code == 0, listed.stderr
    assert "Good" in listed.stdout and "octo/hello#1: issue 1 in octo/hello cannot be read" in listed.stderr
    assert "failed unexpectedly" not in listed.stdout + listed.stderr

    doctor = beflow_run(gh, "doctor", env=ENV)
    assert "octo/hello#1: issue 1 in octo/hello cannot be read: labels" in doctor.stdout + doctor.stderr
    assert "failed unexpectedly" not in doctor.stdout + doctor.stderr

    ran = beflow_run(gh, "--auto", "--json", env=ENV)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert [r.issue for r in gh.records()] == ["2"]  # the good issue ran; the hostile one was skipped
    assert "beflow:review" in github.issue_labels(2) and "beflow:ready" in github.issue_labels(1)

    github.issues[2]["labels"] = [github.label("beflow"), github.label("beflow:ready")]  # ready again
    watched = beflow_run(gh, "watch", "--once", "--json", env=ENV)
    assert watched.code == 0, watched.stdout + watched.stderr
    assert '"event": "skipped", "issue": "1"' in watched.stdout
    assert "cannot be read: labels" in watched.stdout and "failed unexpectedly" not in watched.stderr
    assert sorted(r.issue for r in gh.records()) == ["2", "2"]
