"""The GitLab tracker against the fake GitLab (real HTTP, checked against the description of GitLab's API): issues
and status labels, priority from labels and weight, confidential issues, marked notes, token and project errors —
through the same ``beflow issues`` commands as the local tracker."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from beflow.errors import ConfigError, NotFoundError
from beflow.trackers import Status
from beflow.trackers.base import (
    FlagsIssues,
    MetersRequests,
    NamesUnreadable,
    ReadsOnce,
    SetsUpLabels,
    ShowsProgress,
    TakesRework,
)
from beflow.trackers.gitlab_api import RateLimited
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab import gitlab_tracker as tracker
from tests.support.projects import AutoProject


@pytest.fixture
def gl(auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    """The test project with its tracker on the fake GitLab."""
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "lease": 30})
    return auto_project


def labels_of(gitlab: FakeGitLab, iid: int) -> set[str]:
    return set(gitlab.issues[iid]["labels"])


def notes_of(gitlab: FakeGitLab, iid: int) -> list[dict]:  # type: ignore[type-arg]
    return [note for thread in gitlab.discussions.get(("Issue", iid), []) for note in thread["notes"]]


def test_issues_commands_work_on_gitlab_as_locally(gl: AutoProject, gitlab: FakeGitLab, beflow) -> None:
    made = beflow("issues", "new", "Fix the login crash", "--label", "bug", "--priority", "1", "--body", "Steps")
    assert made.exit_code == 0, made.stderr
    assert made.stdout == f"Created issue 1 (ready): https://gitlab.example.com/{PROJECT}/-/issues/1\n"
    assert labels_of(gitlab, 1) == {"beflow", "bug", "beflow:ready", "priority:1"}
    assert gitlab.issues[1]["description"] == "Steps"
    assert beflow("issues", "new", "Later", "--status", "open").exit_code == 0

    listing = json.loads(beflow("issues", "list", "--json").stdout)
    assert [(i["key"], i["status"], i["priority"], i["labels"]) for i in listing["issues"]] == [
        ("1", "ready", 1, ["beflow", "bug"]),
        ("2", "open", 2, ["beflow"]),
    ]
    assert beflow("issues", "comment", "1", "Looking at it").exit_code == 0
    gitlab.add_note("Issue", 1, "From a developer", author=gitlab.user("dana", access_level=30))
    shown = json.loads(beflow("issues", "show", "1", "--json").stdout)
    assert [(c["author"], c["text"]) for c in shown["comments"]] == [
        ("beflow-bot", "Looking at it"),
        ("dana", "From a developer"),
    ]
    assert notes_of(gitlab, 1)[0]["body"].endswith("<!-- beflow -->")  # beflow's own notes are marked

    assert beflow("issues", "set-status", "1", "in_progress").exit_code == 0
    assert "beflow:in-progress" in labels_of(gitlab, 1) and "beflow:ready" not in labels_of(gitlab, 1)
    assert beflow("issues", "set-status", "1", "review", "--note", "Done, have a look").exit_code == 0
    assert gitlab.issues[1]["state"] == "opened" and "beflow:review" in labels_of(gitlab, 1)
    bad = beflow("issues", "set-status", "2", "review")
    assert bad.exit_code == 2 and "cannot go from open to review" in bad.stderr

    assert beflow("issues", "close", "1").exit_code == 0
    assert gitlab.issues[1]["state"] == "closed"
    assert [n for n in labels_of(gitlab, 1) if n.startswith("beflow:")] == ["beflow:closed"]
    assert json.loads(beflow("issues", "show", "1", "--json").stdout)["status"] == "closed"
    assert beflow("issues", "reopen", "1").exit_code == 0
    assert gitlab.issues[1]["state"] == "opened" and "beflow:ready" in labels_of(gitlab, 1)
    assert "beflow:closed" not in labels_of(gitlab, 1)
    ready = json.loads(beflow("issues", "list", "--status", "ready", "--json").stdout)
    assert [i["key"] for i in ready["issues"]] == ["1"]


def test_a_closed_issue_is_done_unless_beflow_closed_it_and_priority_comes_from_a_label_or_the_weight(
    gl: AutoProject, gitlab: FakeGitLab
) -> None:
    gitlab.add_issue("Shipped", labels=["beflow"])["state"] = "closed"
    gitlab.add_issue("Dropped", labels=["beflow", "beflow:closed"])["state"] = "closed"
    gitlab.add_issue("Not beflow's", labels=["bug", "beflow:ready"])
    gitlab.add_issue("Heavy", labels=["beflow", "beflow:ready"])["weight"] = 5
    gitlab.add_issue("Light", labels=["beflow", "beflow:ready"])["weight"] = 0
    gitlab.add_issue("Labelled", labels=["beflow", "beflow:ready", "priority:1"])["weight"] = 0
    gitlab.add_issue("Plain", labels=["beflow", "beflow:ready"])

    opened = tracker(gl)
    issues = opened.listing().issues

    assert [(i.key, i.status, i.priority) for i in issues] == [
        ("1", Status.DONE, 2),
        ("2", Status.CLOSED, 2),
        ("4", Status.READY, 5),
        ("5", Status.READY, 0),
        ("6", Status.READY, 1),  # the label says it, whatever the weight
        ("7", Status.READY, 2),
    ]
    assert [i.key for i in opened.ready()] == ["5", "6", "7", "4"]
    with pytest.raises(NotFoundError, match="not beflow's"):
        opened.get("3")
    with pytest.raises(NotFoundError, match="GitLab issues are numbers"):
        opened.get("abc")
    with pytest.raises(NotFoundError, match="no issue 99 in acme/widgets"):
        opened.get("99")


def test_a_confidential_issue_is_skipped_and_named_unless_the_tracker_says_otherwise(
    gl: AutoProject, gitlab: FakeGitLab
) -> None:
    gitlab.add_issue("Public", labels=["beflow", "beflow:ready"])
    gitlab.add_issue("Secret", labels=["beflow", "beflow:ready"])["confidential"] = True
    opened = tracker(gl)

    assert [i.key for i in opened.ready()] == ["1"]
    assert list(opened.unreadable) == ["2"] and "confidential" in opened.unreadable["2"]
    assert opened.listing().problems == []  # a rule, not a problem of the issue
    with pytest.raises(NotFoundError, match=r"tracker\.confidential"):
        opened.get("2")

    gl.configure(tracker={**gl.config["tracker"], "confidential": True})
    assert [i.key for i in tracker(gl).ready()] == ["1", "2"]


def test_the_tracker_has_the_capabilities_of_a_forge(gl: AutoProject, gitlab: FakeGitLab) -> None:
    opened = tracker(gl)
    for capability in (ReadsOnce, ShowsProgress, SetsUpLabels, NamesUnreadable, MetersRequests):
        assert isinstance(opened, capability), capability
    # Rework is asked for in the merge request (a review discussion), as on GitHub: no rework comment on the issue.
    assert not isinstance(opened, TakesRework)
    host = gitlab.url.split("://")[1].split(":")[0]
    assert opened.identity == f"gitlab:{host}/{PROJECT}"
    assert opened.base == "/projects/acme%2Fwidgets" and opened.project == PROJECT
    assert opened.held_secrets() == [TOKEN]
    opened.listing()
    budget = opened.rate_budget()
    assert budget.remaining == gitlab.rate_remaining and budget.limited == 0


def test_labels_are_made_once_where_missing(gl: AutoProject, gitlab: FakeGitLab) -> None:
    opened = tracker(gl)
    statuses = [
        "beflow:ready",
        "beflow:in-progress",
        "beflow:blocked",
        "beflow:review",
        "beflow:failed",
        "beflow:closed",
    ]
    assert opened.missing_labels() == ["beflow", *statuses]
    assert opened.ensure_labels() == ["beflow", *statuses]
    assert gitlab.labels["beflow:ready"]["color"] == "#0e8a16"
    assert opened.missing_labels() == [] and opened.ensure_labels() == []


def test_token_and_project_problems_name_the_setting(
    gl: AutoProject, gitlab: FakeGitLab, beflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-wrong")
    refused = beflow("issues", "list")
    assert refused.exit_code == 2
    assert "GitLab refused the token in $GITLAB_TOKEN (401" in refused.stderr
    assert "glpat-wrong" not in refused.stderr + refused.stdout

    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    gl.configure(tracker={"kind": "gitlab", "project": "acme/gone", "url": gitlab.url})
    gone = beflow("issues", "list")
    assert gone.exit_code == 2
    assert "tracker.project: acme/gone is not a project this token can see (404)" in gone.stderr
    assert TOKEN not in gone.stderr + gone.stdout


def test_a_dead_gitlab_is_unavailable_and_says_so(gl: AutoProject, beflow) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    gl.configure(tracker={"kind": "gitlab", "project": PROJECT, "url": dead})
    silent = beflow("issues", "list")
    assert silent.exit_code == 1 and "does not answer" in silent.stderr


def test_the_project_is_read_from_origin_when_left_out(gl: AutoProject, gitlab: FakeGitLab) -> None:
    subprocess.run(["git", "remote", "add", "origin", f"{gitlab.url}/{PROJECT}.git"], cwd=gl.directory, check=True)
    gl.configure(tracker={"kind": "gitlab", "url": gitlab.url})
    assert tracker(gl).project == PROJECT
    subprocess.run(["git", "remote", "set-url", "origin", "git@elsewhere.example.com:x/y.git"], cwd=gl.directory)
    with pytest.raises(ConfigError, match=r"tracker\.project: not set, and origin is git@elsewhere"):
        tracker(gl)


def test_a_spent_rate_limit_is_said_and_metered_without_hammering(gl: AutoProject, gitlab: FakeGitLab) -> None:
    gitlab.add_issue("One", labels=["beflow", "beflow:ready"])
    opened = tracker(gl)
    gitlab.rate_remaining = 0  # GitLab answers 429 with Retry-After: 60
    with pytest.raises(RateLimited):
        opened.ready()
    sent = len(gitlab.seen)
    with pytest.raises(RateLimited):
        opened.listing()
    assert len(gitlab.seen) == sent  # nothing is sent until GitLab allows it
    assert opened.rate_budget().limited == 1


def test_an_issue_is_flagged_with_a_label_under_the_status_prefix_and_one_note(
    gl: AutoProject, gitlab: FakeGitLab
) -> None:
    iid = gitlab.add_issue("Fix it", labels=["beflow", "beflow:review"])["iid"]
    opened = tracker(gl)
    assert isinstance(opened, FlagsIssues) and opened.flag_label("needs-human") == "beflow:needs-human"

    flagged = opened.flag(str(iid), "needs-human", "the checks still fail.")

    assert "beflow:needs-human" in labels_of(gitlab, iid) and flagged.status == Status.REVIEW
    assert "beflow:needs-human" in flagged.labels
    assert [c.text for c in flagged.comments] == ["the checks still fail."]


def test_a_question_blocks_the_issue_with_its_label_and_only_a_members_note_answers_it(
    gl: AutoProject, gitlab: FakeGitLab
) -> None:
    from beflow.ops import questions
    from beflow.records.record import Question, RunRecord
    from beflow.trackers.issue import utc_now

    gitlab.add_issue("One", labels=["beflow", "beflow:in-progress"])
    mine = tracker(gl)
    question = Question(text="Ping @octocat? closes #2", asked=utc_now())
    mine.set_status("1", Status.BLOCKED, note=questions.question_comment("1", question, "r1", mine.inert))
    assert "beflow:blocked" in gitlab.issues[1]["labels"] and "beflow:in-progress" not in gitlab.issues[1]["labels"]
    assert mine.get("1").status == Status.BLOCKED and [i.key for i in mine.ready()] == []
    asking = RunRecord(id="r1", issue="1", mode="watch", agent="a", started_at=utc_now(), question=question)
    gitlab.add_note("Issue", 1, "red, do it", author=gitlab.user("mallory"))  # no member: no answer
    assert questions.answer_of(mine, mine.get("1"), asking) is None
    gitlab.add_note("Issue", 1, "blue", author=gitlab.user("maria", access_level=30))
    answer = questions.answer_of(mine, mine.get("1"), asking)
    assert answer is not None and (answer.text, answer.author) == ("blue", "maria")
