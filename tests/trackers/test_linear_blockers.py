"""Linear's ``blocks`` relations hold an issue back (docs/trackers.md, "Blockers"): the tracker on the fake Linear,
every query executed against Linear's pinned schema, in-process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from beflow.config import LinearTrackerSettings
from beflow.trackers.base import KnowsBlockers
from beflow.trackers.blockers import held_by
from beflow.trackers.issue import Status
from beflow.trackers.linear import LinearTracker
from beflow.trackers.linear_api import Api
from tests.support.linear import API_KEY, FakeLinear
from tests.support.linear import linear as linear


@pytest.fixture
def tracker(linear: FakeLinear) -> Iterator[LinearTracker]:
    api = Api(linear.url, API_KEY, inline_wait=0.5)
    settings: Any = {"kind": "linear", "team": "ENG", "api_url": linear.url}
    yield LinearTracker(LinearTrackerSettings.model_validate(settings), api)
    api.close()


def test_an_issue_a_blocks_relation_points_at_is_held_until_the_blocker_is_completed(
    linear: FakeLinear, tracker: LinearTracker
) -> None:
    blocker = linear.add_issue("the schema", labels=["beflow"])
    blocked = linear.add_issue("the migration", labels=["beflow"])
    related = linear.add_issue("only related", labels=["beflow"])
    linear.block(blocked, blocker)
    related["inverseRelations"].append({**blocker["relations"][0], "type": "related", "relatedIssue": related})
    assert isinstance(tracker, KnowsBlockers)

    ready = {issue.key: issue for issue in tracker.ready()}
    before = len(linear.seen)
    found = tracker.blockers(ready[blocked["identifier"]])
    assert [seen.operation for seen in linear.seen[before:]] == ["BeflowBlockers"]
    assert [tuple(b) for b in found] == [(blocker["identifier"], Status.OPEN, False)]
    assert held_by(found) == f"blocked by {blocker['identifier']} (open)"
    assert tracker.blockers(ready[related["identifier"]]) == []  # (a relation that is not `blocks` holds nothing)
    assert tracker.blockers(ready[blocker["identifier"]]) == []  # (it blocks; nothing blocks it)

    blocker["state"] = linear.state("Done")
    assert held_by(tracker.blockers(ready[blocked["identifier"]])) is None
    assert linear.violations == []
