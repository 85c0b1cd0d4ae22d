"""Leases on GitHub hold against a hanging GitHub, a skewed clock and lost answers: a renewal ends before the lease
does, a run's writes first prove the lease is still its own, a lease is never honoured longer than its length from
when it was first seen, and a write whose answer was lost is found rather than done twice."""

from __future__ import annotations

import json
import time

import pytest

from beflow.codehosts.github import GitHubCodeHost, open_github
from beflow.config import load_project
from beflow.errors import BeflowError, LockedError
from beflow.trackers import Status
from beflow.trackers.claims import ClaimLost
from beflow.trackers.github import GitHubTracker
from tests.support.github import TOKEN, FakeGitHub, wait_until
from tests.support.github import github_tracker as tracker
from tests.support.projects import AutoProject

REF = "/repos/octo/hello/git/refs/beflow/claims/1"


@pytest.fixture
def gh(auto_project: AutoProject, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 3})
    github.add_issue("One", labels=["beflow", "beflow:ready"])
    return auto_project


def code_host(project: AutoProject, tracker: GitHubTracker) -> GitHubCodeHost:
    """The code host the GitHub tracker implies, sharing its client (as runs open it)."""
    loaded = load_project(project.config_path)
    settings = loaded.config.code_host_settings()
    assert settings.kind == "github"
    return open_github(loaded, settings, tracker.api)


def test_a_hanging_renewal_fails_before_the_lease_ends(gh: AutoProject, github: FakeGitHub) -> None:
    claim = tracker(gh).claim("1", owner="watcher a")
    github.delay("PATCH", REF, 25)
    started = time.monotonic()
    with pytest.raises(BeflowError):
        claim.renew()
    assert time.monotonic() - started < 3  # within the lease, not after 25 s (or 30 s × 3 attempts)
    assert (claim.seconds_left() or 0) <= 0.5


def test_a_runs_writes_first_prove_the_lease_is_its_own(gh: AutoProject, github: FakeGitHub) -> None:
    mine = tracker(gh)
    claim = mine.claim("1", owner="watcher a")
    mine.set_status("1", Status.IN_PROGRESS, note="started")
    other = tracker(gh)
    current = github.refs["refs/beflow/claims/1"]
    github.refs["refs/beflow/claims/1"] = other.leases._lease_commit("1", other.leases._new_lease("watcher b"), current)
    labels, comments = github.issue_labels(1), len(github.comments_of(1))

    with pytest.raises(ClaimLost, match="taken over by watcher b"):
        mine.set_status("1", Status.REVIEW, note="done")
    with pytest.raises(ClaimLost):
        mine.comment("1", "a late word", author="beflow")
    with pytest.raises(ClaimLost), claim.held():  # as delivery proposes a branch: within the claim
        code_host(gh, mine).propose("beflow/1", "One", "body", draft=True)
    assert github.issue_labels(1) == labels and len(github.comments_of(1)) == comments and not github.pulls
    claim.release()


def test_a_lease_from_a_clock_ten_years_ahead_ends_after_its_length(gh: AutoProject, github: FakeGitHub) -> None:
    other = tracker(gh)
    skewed = {**other.leases._new_lease("watcher b"), "expires": time.time() + 10 * 365 * 86400}
    sha = other.leases._lease_commit("1", skewed, None)
    github.refs["refs/beflow/claims/1"] = sha
    mine = tracker(gh)
    with pytest.raises(LockedError, match="claimed by watcher b"):
        mine.claim("1", owner="watcher a")
    claims: list[object] = []

    def taken() -> bool:
        try:
            claims.append(mine.claim("1", owner="watcher a"))
        except LockedError:
            return False
        return True

    wait_until(taken, "the lease to end 3 s after it was first seen", timeout=10)
    assert mine.holder("1") is not None and mine.holder("1").owner == "watcher a"  # type: ignore[union-attr]


def test_a_claim_whose_answer_was_lost_is_recognised_as_ones_own(gh: AutoProject, github: FakeGitHub) -> None:
    github.fail(502, only="POST", prefix="/repos/octo/hello/git/refs", after=True)
    mine = tracker(gh)
    claim = mine.claim("1", owner="watcher a")  # created, its answer lost: not "claimed by" itself
    assert claim.info.owner == "watcher a"
    assert json.loads(github.commits[github.refs["refs/beflow/claims/1"]]["message"].split("\n\n")[1])["owner"] == (
        "watcher a"
    )
    claim.release()
    github.fail(502, only="PATCH", prefix=REF, after=True)  # a take-over whose answer was lost: the same
    assert mine.claim("1", owner="watcher a").info.owner == "watcher a"


@pytest.mark.parametrize(
    ("status", "after", "times"), [(502, True, 1), (502, False, 1), (503, False, 2), (429, False, 1)]
)
def test_a_pull_request_post_that_failed_or_lost_its_answer_opens_one(
    gh: AutoProject, github: FakeGitHub, status: int, after: bool, times: int
) -> None:
    headers = {"retry-after": "6"} if status == 429 else {}  # longer than the client waits in line
    github.fail(status, only="POST", prefix="/repos/octo/hello/pulls", after=after, times=times, headers=headers)
    pull_request = code_host(gh, tracker(gh)).propose("beflow/1", "One", "body", draft=True)
    (pull,) = github.pulls.values()
    assert (pull_request.url, pull_request.opened) == (pull["html_url"], True)


def test_a_comment_whose_answer_was_lost_is_posted_once(gh: AutoProject, github: FakeGitHub) -> None:
    github.fail(502, only="POST", prefix="/repos/octo/hello/issues/1/comments", after=True)
    made = tracker(gh).comment("1", "Once.", author="beflow")
    assert made.text == "Once." and [c["body"].split("\n")[0] for c in github.comments_of(1)] == ["Once."]
    github.fail(502, only="POST", prefix="/repos/octo/hello/issues/1/comments", times=1)  # not done: done again
    tracker(gh).comment("1", "Twice.", author="beflow")
    assert [c["body"].split("\n")[0] for c in github.comments_of(1)] == ["Once.", "Twice."]


@pytest.mark.parametrize("what", ["labels", "comment"])
def test_an_outcome_github_never_took_is_said_on_the_terminal_and_in_the_record(
    gh: AutoProject, github: FakeGitHub, what: str
) -> None:
    from beflow.events import RunEvent
    from beflow.records.store import RunStore
    from beflow.run.lifecycle import Session
    from beflow.run.policy import status_after
    from beflow.run.request import RunRequest

    events: list[RunEvent] = []
    mine = tracker(gh)
    issue = mine.get("1")
    run = Session(load_project(gh.config_path), mine, issue, RunRequest(key="1"), events.append, branch=None)
    run.start("the prompt")
    if what == "labels":  # every try of the label change fails: the issue stays in progress
        github.fail(502, only="POST", prefix="/repos/octo/hello/issues/1/labels", times=5)
    else:  # the labels move, every try of the comment saying how it ended fails
        github.fail(502, only="PATCH", prefix="/repos/octo/hello/issues/comments/", times=5)
    record = run.finish("succeeded", "the agent finished", status_after)

    notices = [e.data.message for e in events if e.type == "notice"]
    assert record.outcome == "succeeded" and record.unreported and len(notices) == 1, notices
    assert RunStore(gh.directory).get(record.id).unreported == record.unreported
    if what == "labels":
        assert "beflow:in-progress" in github.issue_labels(1) and "next beflow run or watch tick" in notices[0]
    else:
        assert "beflow:review" in github.issue_labels(1) and f"beflow runs show {record.id}" in notices[0]


def test_a_pull_request_opened_meanwhile_is_updated(gh: AutoProject, github: FakeGitHub) -> None:
    # The POST is refused (422: one exists for the branch) because another try opened it in the meantime.
    github.fail(422, only="POST", prefix="/repos/octo/hello/pulls", after=True)
    pull_request = code_host(gh, tracker(gh)).propose("beflow/1", "One", "the run's body", draft=True)
    (pull,) = github.pulls.values()
    assert (pull_request.url, pull_request.opened, pull["body"]) == (pull["html_url"], False, "the run's body")
