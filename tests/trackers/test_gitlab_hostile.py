"""Issues on GitLab that beflow must not take as they are: a hostile label or an answer of another shape is that
issue's problem (named, skipped), a watch names each skipped issue once, and an agent's words posted to GitLab act on
nothing and hold no secret."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import beflow.ops.issues  # noqa: F401 - registers the operations
from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import BeflowError
from beflow.ops.operations import REGISTRY, Context
from beflow.trackers import Status
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab import gitlab_tracker as tracker
from tests.support.gitlab_markdown import acted_on
from tests.support.projects import AutoProject

HOSTILE = ["evil\u2028label", "two\nlines", "esc\x1b]52;c;aGk=\x07", "x" * 51]


@pytest.fixture
def gl(auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "lease": 30})
    return auto_project


def test_a_hostile_label_is_named_and_its_issue_skipped_in_every_listing(
    gl: AutoProject, gitlab: FakeGitLab, beflow
) -> None:
    gitlab.add_issue("Good", labels=["beflow", "beflow:ready"])
    for label in HOSTILE:
        gitlab.add_issue("Hostile", labels=["beflow", "beflow:ready", label])
    gitlab.add_issue("Also good", labels=["beflow", "beflow:in-progress"])
    opened = tracker(gl)

    listing = opened.listing()
    assert [i.key for i in listing.issues] == ["1", str(len(HOSTILE) + 2)]
    assert [p.render().split(":")[0] for p in listing.problems] == [f"{PROJECT}#{n}" for n in range(2, 6)]
    assert all(label not in p.message for p in listing.problems for label in HOSTILE)
    assert sorted(opened.unreadable) == ["2", "3", "4", "5"]
    assert [i.key for i in opened.ready()] == ["1"]
    with pytest.raises(BeflowError, match="issue 2 in acme/widgets cannot be read: labels"):
        opened.get("2")

    shown = beflow("issues", "list")
    assert shown.exit_code == 0 and "Good" in shown.stdout and "Also good" in shown.stdout
    assert "acme/widgets#2: issue 2 in acme/widgets cannot be read: labels" in shown.stderr


def test_an_answer_of_another_shape_is_that_issues_problem(gl: AutoProject, gitlab: FakeGitLab) -> None:
    gitlab.add_issue("Good", labels=["beflow", "beflow:ready"])
    gitlab.add_issue("Odd", labels=["beflow", "beflow:ready"])

    def odd(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**item, "title": 7} if item["iid"] == 2 else item for item in items]

    tampered = gitlab.tamper("GET", "/api/v4/projects/acme%2Fwidgets/issues", odd)
    opened = tracker(gl)
    assert [i.key for i in opened.ready()] == ["1"]
    assert "issue 2 in acme/widgets cannot be read: title" in opened.unreadable["2"]
    gitlab.tampers.remove(tampered)
    gitlab.violations.clear()  # (the fake's check caught the odd answer: that was the point)
    with gitlab.lock:
        gitlab.issues[2]["title"] = "Odd, fixed"  # its next change shows it again
        gitlab._touch("Issue", 2)
    assert [i.key for i in opened.ready()] == ["1", "2"]
    assert opened.unreadable == {}


def test_a_watch_names_each_skipped_issue_once(gl: AutoProject, gitlab: FakeGitLab) -> None:
    from tests.watch.test_dispatcher import fast, watching

    gitlab.add_issue("Secret", labels=["beflow", "beflow:open"])["confidential"] = True
    gitlab.add_issue("Hostile", labels=["beflow", "two\nlines"])
    gl.configure(watch=fast())

    async def main() -> list[tuple[str | None, str | None]]:
        async with watching(gl) as watch:
            await watch.ticks(4)
            return [(e.issue, getattr(e.data, "reason", None)) for e in watch.of("skipped")]

    skipped = anyio.run(main)
    assert [key for key, _ in skipped] == ["1", "2"]
    assert "confidential" in (skipped[0][1] or "") and "cannot be read" in (skipped[1][1] or "")


def test_an_agents_words_on_gitlab_act_on_nothing_and_hold_no_secret(gl: AutoProject, gitlab: FakeGitLab) -> None:
    from beflow.mcp.acp import MASK

    gitlab.add_issue("Other", labels=["beflow"])
    gitlab.add_issue("Bound", labels=["beflow", "beflow:in-progress"])
    agent = Context(
        project=load_project(gl.config_path), opens_tracker=open_tracker, actor="agent (run r1)", bound_issue="2"
    )
    hostile = f"Fixes #1 @alice !3 ~bug %v1 &4\n/close\n/merge\n/label ~done {TOKEN}"
    REGISTRY["issue.set_status"].call(agent, {"key": "2", "status": "review", "note": hostile})
    REGISTRY["issue.comment"].call(agent, {"key": "2", "text": hostile})
    made = REGISTRY["issue.new"].call(agent, {"title": "Follow up: Fixes #1 @alice", "body": hostile})

    notes = [n["body"] for t in gitlab.discussions[("Issue", 2)] for n in t["notes"] if "alice" in n["body"]]
    texts = [*notes, gitlab.issues[int(made.key)]["title"], gitlab.issues[int(made.key)]["description"]]
    assert len(notes) == 3  # the status note, the comment, and the note naming the follow-up
    for text in texts:
        assert acted_on(text) == [] and TOKEN not in text, text
    assert MASK in notes[0] and gitlab.issues[2]["state"] == "opened"
    assert made.status == Status.OPEN


def test_a_label_holding_a_comma_is_refused_as_gitlab_would_split_it(gl: AutoProject, gitlab: FakeGitLab) -> None:
    """An agent's follow-up labelled ``bug,beflow:ready`` passes the check for status labels as one label; GitLab
    would read it as two, and the follow-up would be queued."""
    gitlab.add_issue("Bound", labels=["beflow", "beflow:in-progress"])
    agent = Context(
        project=load_project(gl.config_path), opens_tracker=open_tracker, actor="agent (run r1)", bound_issue="1"
    )
    with pytest.raises(BeflowError, match="holds a comma"):
        REGISTRY["issue.new"].call(agent, {"title": "Queue me", "labels": ["bug,beflow:ready"]})
    assert list(gitlab.issues) == [1] and gitlab.requests("POST", "/api/v4/projects/acme%2Fwidgets/issues") == []
