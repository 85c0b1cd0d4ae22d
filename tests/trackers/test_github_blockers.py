"""GitHub's issue dependencies hold an issue back (docs/trackers.md, "Blockers"): the tracker on the fake GitHub,
in-process."""

from __future__ import annotations

from beflow.trackers import Status
from beflow.trackers.base import KnowsBlockers
from beflow.trackers.blockers import held_by
from tests.support.github import FakeGitHub
from tests.support.github import github_tracker as tracker
from tests.support.projects import AutoProject


def test_an_issue_blocked_by_an_open_issue_is_held_until_it_is_closed(gh: AutoProject, github: FakeGitHub) -> None:
    blocker = github.add_issue("the schema", labels=["beflow", "beflow:ready"])
    blocked = github.add_issue("the migration", labels=["beflow", "beflow:ready"])
    outside = github.add_issue("a person's own issue")  # not beflow's: it blocks all the same
    github.block(blocked, blocker, outside)
    github.issues[outside]["state"] = "closed"
    github.issues[outside]["state_reason"] = "completed"
    github_ = tracker(gh)
    assert isinstance(github_, KnowsBlockers)

    ready = {issue.key: issue for issue in github_.ready()}
    found = github_.blockers(ready[str(blocked)])
    assert [tuple(b) for b in found] == [
        (str(blocker), Status.READY, False),
        (str(outside), Status.DONE, False),
    ]
    assert held_by(found) == f"blocked by {blocker} (ready)"

    github.issues[blocker]["state"] = "closed"
    ready = {issue.key: issue for issue in github_.ready()}
    assert held_by(github_.blockers(ready[str(blocked)])) is None


def test_only_an_issue_the_listing_says_is_blocked_costs_a_request(gh: AutoProject, github: FakeGitHub) -> None:
    free = github.add_issue("free", labels=["beflow", "beflow:ready"])
    github_ = tracker(gh)
    (issue,) = github_.ready()
    before = len(github.requests())
    assert github_.blockers(issue) == []
    assert len(github.requests()) == before  # (the listing's summary said: blocked by none)

    blocker = github.add_issue("blocker")
    github.block(free, blocker)
    (issue,) = github_.ready()
    before = len(github.requests())
    assert [b.key for b in github_.blockers(issue)] == [str(blocker)]
    assert [r.path for r in github.requests()[before:]] == [f"/repos/octo/hello/issues/{free}/dependencies/blocked_by"]


def test_a_blocker_in_another_repository_is_named_with_it(gh: AutoProject, github: FakeGitHub) -> None:
    blocked = github.add_issue("blocked", labels=["beflow", "beflow:ready"])
    blocker = github.add_issue("elsewhere")
    github.issues[blocker]["repository_url"] = "https://api.github.com/repos/octo/other"
    github.block(blocked, blocker)
    (issue,) = tracker(gh).ready()
    assert held_by(tracker(gh).blockers(issue)) == f"blocked by octo/other#{blocker} (open)"
