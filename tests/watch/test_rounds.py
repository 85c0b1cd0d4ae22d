"""A watch's survey of review rounds when beflow's page is the only feedback source (a tracker that gives none, no
code host): beflow's own review files say which issues have a comment waiting, and only those are surveyed — not
every issue in review, asked of the tracker, on every tick."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from beflow.config import Config, Project
from beflow.config import Feedback as FeedbackSettings
from beflow.feedback import FeedbackSource
from beflow.records.record import RunRecord
from beflow.records.reviews import PageReviews
from beflow.records.store import RunStore
from beflow.trackers import Issue, LocalTracker, Status
from beflow.watch.rounds import ReviewRounds


@pytest.fixture
def tracker(repo: Path) -> LocalTracker:
    return LocalTracker(repo / ".beflow" / "issues", repo)


class Counted:
    """A tracker that gives no feedback of its own (as Jira), counting what the survey asks of it."""

    def __init__(self, tracker: LocalTracker) -> None:
        self._tracker = tracker
        self.asked: list[tuple[str, Any]] = []

    def listing(self, **kwargs: Any) -> Any:
        self.asked.append(("listing", kwargs.get("status")))
        return self._tracker.listing(**kwargs)

    def get(self, key: str) -> Issue:
        self.asked.append(("get", key))
        return self._tracker.get(key)

    def __getattr__(self, name: str) -> Any:
        if name in ("gather", "reply"):  # (not a feedback source)
            raise AttributeError(name)
        return getattr(self._tracker, name)


def in_review(tracker: LocalTracker, title: str) -> str:
    key = tracker.create(title, status=Status.READY).key
    tracker.set_status(key, Status.IN_PROGRESS)
    return tracker.set_status(key, Status.REVIEW).key


def test_with_the_page_the_only_source_only_an_issue_a_comment_waits_on_is_surveyed(
    tracker: LocalTracker, repo: Path
) -> None:
    counted = Counted(tracker)
    assert not isinstance(counted, FeedbackSource)
    keys = [in_review(tracker, f"in review {n}") for n in range(3)]
    store = RunStore(repo)
    started = dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)
    for key in keys:
        store.create(
            RunRecord(
                id=f"20240501-100000-{key}", issue=key, mode="auto", agent="a", started_at=started, outcome="succeeded"
            ),
            "prompt",
        )
    project = Project(config=Config(feedback=FeedbackSettings(settle=0.1)), config_path=None, directory=repo)
    rounds = ReviewRounds(lambda: 2e9, lambda *a, **k: None)

    # No page comment: the tracker is not asked at all, tick after tick.
    for _ in range(3):
        assert rounds.survey(project, counted, None, running=set(), ready=[]) == []  # type: ignore[arg-type]
    assert counted.asked == []

    # A comment on one issue: that issue alone is read, and its round is due.
    reviews = PageReviews(repo)
    comment = reviews.add(keys[1], author="ann", body="rename it", commit="0" * 40)
    queued = rounds.survey(project, counted, None, running=set(), ready=[])  # type: ignore[arg-type]
    assert [issue.key for issue in queued] == [keys[1]]
    assert counted.asked == [("get", keys[1])]
    assert [piece.id for piece in rounds.due[keys[1]].pieces] == [comment.id]

    # Answered: nothing waits, nothing is asked again.
    (piece,) = reviews.gather(keys[1], f"beflow/{keys[1]}").pieces
    reviews.reply(piece, "renamed")
    counted.asked.clear()
    assert rounds.survey(project, counted, None, running=set(), ready=[]) == []  # type: ignore[arg-type]
    assert counted.asked == []
