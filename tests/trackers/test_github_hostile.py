"""Issues on GitHub that beflow must not take as they are: a hostile label is that issue's problem (named, skipped),
and an agent's follow-up is filed open and not urgent whatever labels it asks for."""

from __future__ import annotations

import pytest

import beflow.ops.issues  # noqa: F401 - registers the operations
from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import BeflowError
from beflow.ops.operations import REGISTRY, Context
from beflow.trackers import Status
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject

HOSTILE = ["evil\u2028label", "two\nlines", "esc\x1b]52;c;aGk=\x07", "x" * 51]


def test_a_hostile_label_is_named_and_its_issue_skipped_in_every_listing(
    gh: AutoProject, github: FakeGitHub, beflow
) -> None:
    github.add_issue("Good", labels=["beflow", "beflow:ready"])
    for label in HOSTILE:
        github.add_issue("Hostile", labels=["beflow", "beflow:ready", label])
    github.add_issue("Also good", labels=["beflow", "beflow:in-progress"])
    tracker = gh.tracker

    listing = tracker.listing()
    assert [i.key for i in listing.issues] == ["1", str(len(HOSTILE) + 2)]
    assert [p.render().split(":")[0] for p in listing.problems] == [f"octo/hello#{n}" for n in range(2, 6)]
    assert all(label not in p.message for p in listing.problems for label in HOSTILE)
    assert [i.key for i in tracker.ready()] == ["1"]
    with pytest.raises(BeflowError, match="issue 2 in octo/hello cannot be read: labels"):
        tracker.get("2")

    shown = beflow("issues", "list")
    assert shown.exit_code == 0 and "Good" in shown.stdout and "Also good" in shown.stdout
    assert "octo/hello#2: issue 2 in octo/hello cannot be read: labels" in shown.stderr
    doctor = beflow("doctor")
    assert "octo/hello#5" in doctor.stdout + doctor.stderr


def test_an_agents_follow_up_on_github_is_open_and_not_urgent_whatever_its_labels(
    gh: AutoProject, github: FakeGitHub
) -> None:
    github.add_issue("Bound", labels=["beflow", "beflow:in-progress"])
    agent = Context(
        project=load_project(gh.config_path), opens_tracker=open_tracker, actor="agent (run r1)", bound_issue="1"
    )
    labels = ["bug", "beflow:ready", "Beflow:Ready", " beflow:ready ", "BEFLOW:IN-PROGRESS", "priority:0", "Priority:1"]
    made = REGISTRY["issue.new"].call(agent, {"title": "Queue me", "labels": labels, "priority": 0})
    assert made.status == Status.OPEN and made.priority == 2
    assert sorted(github.issue_labels(int(made.key))) == ["beflow", "bug"]
    assert made.key not in [i.key for i in gh.tracker.ready()]


def test_an_agents_status_note_on_github_acts_on_nothing_and_holds_no_secret(
    gh: AutoProject, github: FakeGitHub
) -> None:
    from beflow.mcp.acp import MASK
    from tests.support.github import acted_on

    github.add_issue("Other", labels=["beflow"])
    github.add_issue("Bound", labels=["beflow", "beflow:in-progress"])
    agent = Context(
        project=load_project(gh.config_path), opens_tracker=open_tracker, actor="agent (run r1)", bound_issue="2"
    )
    REGISTRY["issue.set_status"].call(agent, {"key": "2", "status": "review", "note": f"Fixes #1 @user {TOKEN}"})
    (note,) = [c["body"] for c in github.comments_of(2) if "Fixes" in c["body"]]
    assert acted_on(note) == [] and "#1" not in note and TOKEN not in note and MASK in note
