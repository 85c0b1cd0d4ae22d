"""Landing on GitLab (``after_review.merge: "approved-and-green"``), against the fake GitLab (requests and answers
checked against the description of GitLab's API): approved by members who may push and its head's latest pipeline
passed → merged at that head with its branch removed, issue done; never with a failed or running pipeline, on
beflow's own approval, a fork's merge request, or a moved head."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from beflow.codehosts.base import Lands
from beflow.codehosts.gitlab import GitLabCodeHost
from beflow.config import AfterReview, GitLabCodeHostSettings
from beflow.ops import landing
from beflow.trackers import LocalTracker, Status
from beflow.trackers.gitlab_api import Api, api_base
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab

ON = AfterReview(merge="approved-and-green", method="squash")
HEAD = "a" * 40


@pytest.fixture
def host(gitlab: FakeGitLab) -> Iterator[GitLabCodeHost]:
    api = Api(api_base(gitlab.url), TOKEN)
    settings = GitLabCodeHostSettings(kind="gitlab", project=PROJECT, url=gitlab.url)
    yield GitLabCodeHost(settings, PROJECT, api, None)
    api.close()


@pytest.fixture
def tracker(repo: Path) -> LocalTracker:
    return LocalTracker(repo / ".beflow" / "issues", repo)


def in_review(tracker: LocalTracker, gitlab: FakeGitLab) -> tuple[str, int]:
    key = tracker.create("Fix it").key
    tracker.set_status(key, Status.IN_PROGRESS)
    tracker.set_status(key, Status.REVIEW)
    mr = gitlab.open_mr(f"beflow/{key}")
    gitlab.mrs[mr]["sha"] = HEAD
    return key, mr


def test_an_approved_merge_request_whose_pipeline_passed_is_merged_at_its_head_and_its_branch_removed(
    tracker: LocalTracker, gitlab: FakeGitLab, host: GitLabCodeHost
) -> None:
    assert isinstance(host, Lands)
    key, mr = in_review(tracker, gitlab)
    gitlab.add_pipeline(HEAD, f"beflow/{key}", "failed", {})
    gitlab.add_pipeline(HEAD, f"beflow/{key}", "success", {})  # retried: the latest one counts
    gitlab.approve(mr, gitlab.user("lead", access_level=40))

    said = landing.land(tracker, host, key, ON)

    assert said is not None and "lead" in said
    assert gitlab.merged == {mr: {"squash": True}} and gitlab.removed == [f"beflow/{key}"]
    (merge,) = [s for s in gitlab.seen if s.method == "PUT" and s.path.endswith("/merge")]
    assert merge.body["sha"] == HEAD
    assert tracker.get(key).status == Status.DONE


def test_a_failed_running_or_missing_pipeline_and_approvals_that_do_not_count_keep_it_open(
    tracker: LocalTracker, gitlab: FakeGitLab, host: GitLabCodeHost
) -> None:
    key, mr = in_review(tracker, gitlab)
    branch = f"beflow/{key}"
    gitlab.approve(mr, gitlab.bot)  # beflow's own token user
    gitlab.approve(mr, gitlab.user("reporter", access_level=20))
    gitlab.approve(mr, gitlab.user("stranger"))
    gitlab.add_pipeline(HEAD, branch, "success", {})
    found = host.landing(branch)
    assert found is not None and found.approved_by == () and landing.blocker(found, ON) is not None

    gitlab.approve(mr, gitlab.user("dev", access_level=30))
    for status, why in [("running", "checks have not finished"), ("failed", "checks failed"), ("manual", "not fin")]:
        gitlab.add_pipeline(HEAD, branch, status, {})
        found = host.landing(branch)
        assert found is not None and why in (landing.blocker(found, ON) or ""), status
        assert landing.land(tracker, host, key, ON) is None
    assert gitlab.merged == {} and tracker.get(key).status == Status.REVIEW

    gitlab.mrs[mr]["sha"] = "c" * 40  # a new head: no pipeline ran on it yet
    found = host.landing(branch)
    assert found is not None and landing.blocker(found, ON) == "no check ran on its head yet"


def test_a_head_that_moved_since_it_was_read_is_not_merged(
    tracker: LocalTracker, gitlab: FakeGitLab, host: GitLabCodeHost
) -> None:
    key, mr = in_review(tracker, gitlab)
    gitlab.add_pipeline(HEAD, f"beflow/{key}", "success", {})
    gitlab.approve(mr, gitlab.user("lead", access_level=40))
    found = host.landing(f"beflow/{key}")
    assert found is not None and landing.blocker(found, ON) is None
    gitlab.mrs[mr]["sha"] = "b" * 40

    assert host.land(found, "merge") is False
    assert gitlab.merged == {} and gitlab.removed == []


def test_a_forks_merge_request_of_the_same_branch_name_is_never_landed(
    tracker: LocalTracker, gitlab: FakeGitLab, host: GitLabCodeHost
) -> None:
    key = tracker.create("Fix it").key
    mr = gitlab.fork_mr(f"beflow/{key}")
    gitlab.mrs[mr]["sha"] = HEAD
    gitlab.add_pipeline(HEAD, f"beflow/{key}", "success", {})
    gitlab.approve(mr, gitlab.user("lead", access_level=40))
    assert host.landing(f"beflow/{key}") is None
