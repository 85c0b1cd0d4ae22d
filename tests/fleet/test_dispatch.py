"""A fleet's dispatcher looks at the tracker as a watch does (in-process, no Temporal service: each tick's look is
the dispatcher's own survey, called from the test): it lands an approved and green pull request, holds issues for
their blockers, starts the workflow of a blocked issue a person answered (and fails one nobody answered within
``limits.wait``), and tells a workflow of reviews given on beflow's page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from beflow.codehosts.base import Opened
from beflow.codehosts.github import GitHubCodeHost
from beflow.config import Config, GitHubCodeHostSettings, Project
from beflow.events import WatchEvent
from beflow.fleet.dispatch import FleetDispatcher
from beflow.records.reviews import PageReviews
from beflow.trackers import LocalTracker, Status
from beflow.trackers.github_api import Api
from tests.support.github import TOKEN, FakeGitHub
from tests.watch.test_dispatcher import Clock
from tests.watch.test_questions import _asked

HEAD = "a" * 40
ENGINE = {"kind": "temporal", "address": "127.0.0.1:7233", "task_queue": "beflow"}


@pytest.fixture
def tracker(repo: Path) -> LocalTracker:
    return LocalTracker(repo / ".beflow" / "issues", repo)


@pytest.fixture
def host(github: FakeGitHub) -> Iterator[GitHubCodeHost]:
    api = Api(github.url, TOKEN)
    settings = GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url=github.url)
    yield GitHubCodeHost(settings, "octo/hello", api, None)
    api.close()


def dispatcher(
    repo: Path, tracker: LocalTracker, host: GitHubCodeHost | None = None, **config: Any
) -> tuple[FleetDispatcher, list[WatchEvent]]:
    project = Project(config=Config.model_validate({"engine": ENGINE, **config}), config_path=None, directory=repo)
    events: list[WatchEvent] = []
    return FleetDispatcher(project, Opened(tracker, host), events.append), events


def said(events: list[WatchEvent], kind: str) -> list[str | None]:
    return [event.issue for event in events if event.type == kind]


def in_review(tracker: LocalTracker, github: FakeGitHub | None = None) -> str:
    key = tracker.create("Fix it").key
    tracker.set_status(key, Status.IN_PROGRESS)
    tracker.set_status(key, Status.REVIEW)
    if github is not None:
        number = github.open_pull(f"beflow/{key}", draft=False)
        github.set_head(number, HEAD)
        github.refs[f"refs/heads/beflow/{key}"] = HEAD
    return key


def test_the_dispatcher_lands_an_approved_and_green_pull_request_unless_feedback_waits_for_a_round(
    repo: Path, tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.codehosts import github_feedback

    monkeypatch.setattr(github_feedback, "FRESH", 0.0)
    ready, asked = in_review(tracker, github), in_review(tracker, github)
    github.add_check_run(HEAD, "tests", conclusion="success")
    for number in github.pulls:
        github.submit_review(number, "", state="APPROVED", author="alice")
    asking = next(n for n, pull in github.pulls.items() if pull["head"]["ref"] == f"beflow/{asked}")
    github.add_comment(asking, "@beflow please also update the changelog", author="bob", association="MEMBER")
    fleet, events = dispatcher(repo, tracker, host, after_review={"merge": "approved-and-green"})

    survey = fleet._survey()

    assert said(events, "landed") == [ready] and tracker.get(ready).status == Status.DONE
    assert list(github.merged.values()) == ["merge"]  # (after_review.method's default)
    # The mention is the workflow's next round: told, not landed over.
    assert list(survey.feedback) == [asked] and tracker.get(asked).status == Status.REVIEW
    fleet._survey()
    assert said(events, "landed") == [ready]  # (done: looked at no more)


def test_the_dispatcher_holds_an_issue_for_its_blocker_and_starts_it_once_the_blocker_is_done(
    repo: Path, tracker: LocalTracker
) -> None:
    first, second = tracker.create("the schema").key, tracker.create("the migration").key
    path = tracker.get(second).path
    assert path is not None
    text = path.read_text()
    path.write_text(re.sub(r"^priority: .*$", rf"\g<0>\nblocked_by: [{first}]", text, count=1, flags=re.M))
    fleet, events = dispatcher(repo, tracker)

    assert [i.key for i in fleet._survey().ready] == [first]
    assert [(e.issue, e.data.fields()) for e in events if e.type == "held"] == [
        (second, {"reason": f"blocked by {first} (ready)"})
    ]
    tracker.set_status(first, Status.IN_PROGRESS)
    tracker.set_status(first, Status.DONE)
    assert [i.key for i in fleet._survey().ready] == [second]


def test_a_blocked_issue_a_person_answered_starts_its_workflow_as_the_asking_attempt_and_an_unanswered_one_fails(
    repo: Path, tracker: LocalTracker
) -> None:
    fleet, events = dispatcher(repo, tracker, limits={"wait": 60})
    clock = Clock()
    fleet.questions.clock = clock
    answered, asked = _asked(repo, tracker)
    waiting, _ = _asked(repo, tracker)
    assert fleet._survey().answered == []  # (beflow's own question is no answer)

    tracker.comment(answered, "Blue, please.", author="ada")
    assert [(issue.key, attempt) for issue, attempt in fleet._survey().answered] == [(answered, asked.attempt)]
    assert tracker.get(waiting).status == Status.BLOCKED

    clock.advance(61)
    tracker.comment(waiting, "<!-- beflow:rework -->\nnot an answer", author="ada")
    fleet._survey()
    assert tracker.get(waiting).status == Status.FAILED and said(events, "failed") == [waiting]


def test_a_review_given_on_beflows_page_is_told_to_the_issues_workflow(repo: Path, tracker: LocalTracker) -> None:
    key = in_review(tracker)
    fleet, _ = dispatcher(repo, tracker, feedback={"settle": 30})
    assert fleet._survey().feedback == {}

    comment = PageReviews(repo).add(key, author="ada", body="rename it", commit=HEAD, path="a.py", line=3)

    told = fleet._survey().feedback[key]
    assert told.ids == [comment.id] and told.due == pytest.approx(comment.created.timestamp() + 30)
