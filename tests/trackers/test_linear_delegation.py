"""Issues handed to beflow in Linear: an issue delegated to beflow's app user (or assigned to the token's user) is
beflow's whatever its labels, and ready while nobody started it; a claim won makes beflow its delegate (an app's token)
or its assignee (a person's key), written only after the claim."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from beflow.config import LinearTrackerSettings
from beflow.errors import NotFoundError
from beflow.trackers.issue import Status
from beflow.trackers.linear import LinearTracker
from beflow.trackers.linear_api import Api
from tests.support.linear import API_KEY, APP_TOKEN, FakeLinear
from tests.support.linear import linear as linear


@contextmanager
def tracker_of(fake: FakeLinear, token: str) -> Iterator[LinearTracker]:
    settings = LinearTrackerSettings.model_validate({"kind": "linear", "team": "ENG", "api_url": fake.url})
    api = Api(fake.url, token, inline_wait=0.5)
    try:
        yield LinearTracker(settings, api)
    finally:
        api.close()


def test_an_issue_delegated_to_beflows_app_is_ready_without_the_label_even_in_the_backlog(linear: FakeLinear) -> None:
    linear.add_issue("Labelled", labels=["beflow"])
    linear.delegate(linear.add_issue("Delegated, in the backlog", state="Backlog"))
    linear.delegate(linear.add_issue("Delegated, in Todo"))
    linear.delegate(linear.add_issue("Delegated, started", state="In Progress"))
    linear.delegate(linear.add_issue("Delegated to another agent"), linear.user("Other agent", app=True))
    linear.add_issue("Neither")
    with tracker_of(linear, APP_TOKEN) as tracker:
        assert [i.key for i in tracker.ready()] == ["ENG-1", "ENG-2", "ENG-3"]
        assert tracker.get("ENG-4").status == Status.IN_PROGRESS
        with pytest.raises(NotFoundError, match="not beflow's"):
            tracker.get("ENG-5")
    with tracker_of(linear, API_KEY) as person:  # delegated to the app is not a person's key's
        assert [i.key for i in person.ready()] == ["ENG-1"]


def test_an_issue_merely_assigned_to_the_tokens_user_is_not_beflows(linear: FakeLinear) -> None:
    # With a person's key, the token's user is that person: every issue of theirs would be beflow's.
    mine = linear.add_issue("Assigned to the key's user")
    mine["assignee"] = linear.person
    labelled = linear.add_issue("Labelled", labels=["beflow"])
    labelled["assignee"] = linear.person
    with tracker_of(linear, API_KEY) as tracker:
        assert [i.key for i in tracker.ready()] == ["ENG-2"]
        with pytest.raises(NotFoundError, match="not beflow's"):
            tracker.get("ENG-1")


@pytest.mark.parametrize(("token", "field"), [(APP_TOKEN, "delegate"), (API_KEY, "assignee")])
def test_a_claim_won_makes_beflow_the_issues_delegate_or_assignee_after_the_claim(
    linear: FakeLinear, token: str, field: str
) -> None:
    issue = linear.add_issue("Claim me", labels=["beflow"])
    issue["assignee"] = linear.person if field == "delegate" else None
    with tracker_of(linear, token) as tracker:
        me = linear.app if token == APP_TOKEN else linear.person
        tracker.ready()
        before = len(linear.seen)
        claim = tracker.claim("ENG-1", "watcher")
        assert issue[field] is None  # a claim alone changes nobody's issue
        tracker.set_status("ENG-1", Status.IN_PROGRESS)
        assert issue[field]["id"] == me["id"] and issue["state"]["type"] == "started"
        if field == "delegate":
            assert issue["assignee"]["id"] == linear.person["id"]  # the person stays its assignee
        writes = [s for s in linear.seen[before:] if s.query.lstrip().startswith("mutation")]
        updates = [s for s in writes if s.operation == "BeflowIssueUpdate"]
        assert writes[0].operation == "BeflowCommentCreate" and writes.index(updates[0]) > 0  # the claim, first
        assert updates[0].variables["input"][f"{field}Id"] == me["id"]
        assert [s.variables["input"].get(f"{field}Id") for s in updates[1:]] == [None] * (len(updates) - 1)
        claim.release()
