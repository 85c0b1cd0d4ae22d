"""Landing on GitHub (``after_review.merge: "approved-and-green"``), against the fake GitHub (requests and answers
checked against GitHub's description): approved by trusted people and green → merged at the head that was read,
branch deleted, issue done; never with a failing or pending check, on beflow's own approval, or a moved head."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from beflow.codehosts.base import Lands
from beflow.codehosts.github import GitHubCodeHost
from beflow.config import AfterReview, GitHubCodeHostSettings
from beflow.ops import landing
from beflow.trackers import LocalTracker, Status
from beflow.trackers.github_api import Api
from tests.support.github import TOKEN, FakeGitHub

ON = AfterReview(merge="approved-and-green", method="squash")
HEAD = "a" * 40


@pytest.fixture
def host(github: FakeGitHub) -> Iterator[GitHubCodeHost]:
    api = Api(github.url, TOKEN)
    settings = GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url=github.url)
    yield GitHubCodeHost(settings, "octo/hello", api, None)
    api.close()


@pytest.fixture
def tracker(repo: Path) -> LocalTracker:
    return LocalTracker(repo / ".beflow" / "issues", repo)


def in_review(tracker: LocalTracker, github: FakeGitHub, *, draft: bool = False) -> tuple[str, int]:
    key = tracker.create("Fix it").key
    tracker.set_status(key, Status.IN_PROGRESS)
    tracker.set_status(key, Status.REVIEW)
    number = github.open_pull(f"beflow/{key}", draft=draft)
    github.set_head(number, HEAD)
    github.refs[f"refs/heads/beflow/{key}"] = HEAD
    return key, number


def test_an_approved_and_green_pull_request_is_merged_at_its_head_its_branch_deleted_and_the_issue_done(
    tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost
) -> None:
    assert isinstance(host, Lands)
    key, number = in_review(tracker, github)
    github.add_check_run(HEAD, "tests", conclusion="success")
    github.add_status(HEAD, "lint", state="success")
    github.submit_review(number, "Good.", state="APPROVED", author="alice")

    said = landing.land(tracker, host, key, ON)

    assert said is not None and said.startswith(landing.LANDED) and "alice" in said
    assert github.merged == {number: "squash"}
    (merge,) = github.requests("PUT", f"/repos/octo/hello/pulls/{number}/merge")
    assert merge.body == {"sha": HEAD, "merge_method": "squash"}
    assert f"refs/heads/beflow/{key}" not in github.refs
    issue = tracker.get(key)
    assert issue.status == Status.DONE and issue.comments[-1].text.startswith(landing.LANDED)
    assert landing.land(tracker, host, key, ON) is None  # nothing open any more: nothing happens


@pytest.mark.parametrize(
    ("checks", "why"),
    [
        ([("tests", "failure")], "checks failed: tests"),
        ([("tests", None)], "checks have not finished: tests"),
        ([("tests", "success"), ("slow", "cancelled")], "checks failed: slow"),
    ],
)
def test_a_failing_or_pending_check_keeps_it_open(
    tracker: LocalTracker,
    github: FakeGitHub,
    host: GitHubCodeHost,
    checks: list[tuple[str, str | None]],
    why: str,
) -> None:
    key, number = in_review(tracker, github)
    for name, conclusion in checks:
        github.add_check_run(HEAD, name, conclusion=conclusion)
    github.submit_review(number, "", state="APPROVED", author="alice")

    found = host.landing(f"beflow/{key}")
    assert found is not None and landing.blocker(found, ON) == why
    assert landing.land(tracker, host, key, ON) is None
    assert github.merged == {} and not github.requests("PUT") and tracker.get(key).status == Status.REVIEW


def test_a_pending_or_failed_commit_status_keeps_it_open_too(
    tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost
) -> None:
    key, number = in_review(tracker, github)
    github.add_status(HEAD, "ci/deploy", state="pending")
    github.submit_review(number, "", state="APPROVED", author="alice")
    assert landing.land(tracker, host, key, ON) is None
    github.add_status(HEAD, "ci/deploy", state="error")
    found = host.landing(f"beflow/{key}")
    assert found is not None and landing.blocker(found, ON) == "checks failed: ci/deploy"


def test_beflows_own_approval_a_strangers_and_a_later_change_request_do_not_count(
    tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost
) -> None:
    key, number = in_review(tracker, github)
    github.add_check_run(HEAD, "tests", conclusion="success")
    me = github.tokens[TOKEN]
    github.submit_review(number, "", state="APPROVED", author=me, association="OWNER")  # beflow's own token user
    github.submit_review(number, "", state="APPROVED", author="mallory", association="NONE")
    found = host.landing(f"beflow/{key}")
    assert found is not None and found.approved_by == ()
    assert landing.land(tracker, host, key, ON) is None

    github.submit_review(number, "", state="APPROVED", author="alice")
    github.submit_review(number, "Wait.", state="CHANGES_REQUESTED", author="bob", association="MEMBER")
    found = host.landing(f"beflow/{key}")
    assert found is not None and landing.blocker(found, ON) == "changes were requested by bob"
    two = AfterReview(merge="approved-and-green", approvals=2)
    github.submit_review(number, "", state="APPROVED", author="bob", association="MEMBER")  # bob's latest word
    found = host.landing(f"beflow/{key}")
    assert found is not None and landing.blocker(found, two) is None and found.approved_by == ("alice", "bob")
    assert github.merged == {}


def test_a_head_that_moved_since_its_checks_were_read_is_not_merged(
    tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost
) -> None:
    key, number = in_review(tracker, github)
    github.add_check_run(HEAD, "tests", conclusion="success")
    github.submit_review(number, "", state="APPROVED", author="alice")
    found = host.landing(f"beflow/{key}")
    assert found is not None and landing.blocker(found, ON) is None
    github.set_head(number, "b" * 40)  # someone pushed meanwhile

    assert host.land(found, "merge") is False
    assert github.merged == {} and f"refs/heads/beflow/{key}" in github.refs
    found = host.landing(f"beflow/{key}")
    assert found is not None and landing.blocker(found, ON) == "no check ran on its head yet"
    assert landing.land(tracker, host, key, ON) is None  # its checks have not started: not merged either
    assert tracker.get(key).status == Status.REVIEW


def test_a_draft_or_an_unconfigured_project_is_never_merged(
    tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost
) -> None:
    key, number = in_review(tracker, github, draft=True)
    github.add_check_run(HEAD, "tests", conclusion="success")
    github.submit_review(number, "", state="APPROVED", author="alice")
    found = host.landing(f"beflow/{key}")
    assert found is not None and landing.blocker(found, ON) == "the pull request is a draft"
    github.pulls[number]["draft"] = False
    asked = len(github.requests())
    assert landing.land(tracker, host, key, AfterReview()) is None  # merge not asked for: no request at all
    assert len(github.requests()) == asked
    assert github.merged == {}


def test_a_watch_survey_lands_what_is_ready_and_says_so(
    tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost, repo: Path
) -> None:
    from beflow.config import Config, Project
    from beflow.watch.rounds import ReviewRounds

    key, number = in_review(tracker, github)
    waiting, _ = in_review(tracker, github)  # green, but nobody approved it
    github.add_check_run(HEAD, "tests", conclusion="success")
    github.submit_review(number, "", state="APPROVED", author="alice")
    emitted: list[tuple[str, str, dict[str, object]]] = []
    rounds = ReviewRounds(lambda: 0.0, lambda kind, key, **data: emitted.append((kind, key, data)))
    project = Project(config=Config(after_review=ON), config_path=None, directory=repo)

    assert rounds.survey(project, tracker, host, running=set(), ready=[]) == []

    assert [(kind, k) for kind, k, _ in emitted] == [("landed", key)]
    assert tracker.get(key).status == Status.DONE and tracker.get(waiting).status == Status.REVIEW
    rounds.survey(project, tracker, host, running={waiting}, ready=[])  # a running issue is left alone
    assert len(emitted) == 1 and github.merged == {number: "squash"}


def test_a_mention_nobody_answered_yet_holds_the_landing_back(
    tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.codehosts import github_feedback
    from beflow.config import Config, Project
    from beflow.records.record import RunRecord
    from beflow.records.store import RunStore
    from beflow.watch.rounds import ReviewRounds

    monkeypatch.setattr(github_feedback, "FRESH", 0.0)
    key, number = in_review(tracker, github)
    RunStore(repo).create(RunRecord(id="20240501-100000-1", issue=key, mode="auto", agent="codex",
                                    started_at=dt.datetime.now(dt.UTC), outcome="succeeded"), "prompt")  # fmt: skip
    github.add_check_run(HEAD, "tests", conclusion="success")
    github.submit_review(number, "", state="APPROVED", author="alice")
    github.add_comment(number, "@beflow please also update the changelog", author="bob", association="MEMBER")
    emitted: list[str] = []
    rounds = ReviewRounds(lambda: 0.0, lambda kind, key, **data: emitted.append(kind))
    project = Project(config=Config(after_review=ON), config_path=None, directory=repo)

    rounds.survey(project, tracker, host, running=set(), ready=[])

    assert "landed" not in emitted and github.merged == {} and tracker.get(key).status == Status.REVIEW
