"""Triggers on GitHub (docs/config.md#triggers): an assignment to the token's user, or a trusted person's mention of
the trigger, labels an open issue ready; a stranger's mention is left out and said. The tracker on the fake GitHub,
in-process."""

from __future__ import annotations

from beflow.trackers.base import HearsTriggers
from beflow.trackers.triggers import Handed
from tests.support.github import FakeGitHub
from tests.support.github import github_tracker as tracker
from tests.support.projects import AutoProject


def test_an_issue_assigned_to_beflows_user_is_labelled_ready_once(gh: AutoProject, github: FakeGitHub) -> None:
    github_ = tracker(gh)
    assert isinstance(github_, HearsTriggers)
    mine = github.add_issue("assigned to beflow")  # no label at all: the assignment is the ask
    other = github.add_issue("assigned to a person")
    assert github_.hear(None, assign=True).handed == []  # (the first look starts from now)

    github.assign(mine, "octocat")  # the token's user
    github.assign(other, "alice")
    heard = github_.hear(None, assign=True)
    assert heard.handed == [Handed(str(mine), "assign", "octocat")]
    assert set(github.issue_labels(mine)) == {"beflow", "beflow:ready"}
    assert github.issue_labels(other) == []
    assert [issue.key for issue in github_.ready()] == [str(mine)]
    assert github_.hear(None, assign=True).handed == []  # ready now: not handed over again
    assert github_.hear("@beflow", assign=False).handed == []  # (assignments are not heard unless asked)


def test_a_trusted_mention_hands_the_issue_over_and_a_strangers_is_left_out_once(
    gh: AutoProject, github: FakeGitHub
) -> None:
    github_ = tracker(gh)
    asked = github.add_issue("asked")
    strange = github.add_issue("asked by a stranger")
    early = github.add_comment(asked, "@beflow before the watch: not heard")
    early["created_at"] = early["updated_at"] = github.issues[asked]["updated_at"] = "2020-01-01T00:00:00Z"
    assert github_.hear("@beflow", assign=False).handed == []

    github.add_comment(asked, "`@beflow` in code asks for nothing", association="OWNER")
    github.add_comment(asked, "@beflow please fix this", author="alice", association="OWNER")
    github.add_comment(strange, "@beflow run rm -rf", author="mallory", association="NONE")
    heard = github_.hear("@beflow", assign=False)
    assert heard.handed == [Handed(str(asked), "mention", "alice")]
    (left,) = heard.left
    assert (left.key, left.by) == (str(strange), "mallory") and "write access" in left.why
    assert set(github.issue_labels(asked)) == {"beflow", "beflow:ready"}
    assert github.issue_labels(strange) == []
    assert [issue.key for issue in github_.ready()] == [str(asked)]

    again = github_.hear("@beflow", assign=False)
    assert again.handed == [] and again.left == []  # each comment judged once


def test_an_idle_look_is_one_conditional_request(gh: AutoProject, github: FakeGitHub) -> None:
    github_ = tracker(gh)
    github.add_issue("quiet")
    github_.hear("@beflow", assign=True)
    before = len(github.requests())
    github_.hear("@beflow", assign=True)
    github_.hear("@beflow", assign=True)
    seen = github.requests()[before:]
    assert [(r.path, r.status) for r in seen] == [("/repos/octo/hello/issues", 304)] * 2
