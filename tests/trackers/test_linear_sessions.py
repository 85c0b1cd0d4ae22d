"""A run's agent session on the fake Linear: opened by beflow's app user alone, its activities as the schema has them,
the pull request among its links, and a person's stop signal found among the activities since the last look, at one
request a look while nothing is new."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from beflow.config import LinearTrackerSettings
from beflow.trackers.base import HostsAgentSessions
from beflow.trackers.linear import LinearTracker
from beflow.trackers.linear_api import Api
from beflow.trackers.linear_sessions import STOP_PAGE
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


def test_only_an_apps_token_opens_a_session_and_its_activities_end_with_the_pull_request(linear: FakeLinear) -> None:
    issue = linear.add_issue("Session", labels=["beflow"])
    with tracker_of(linear, API_KEY) as person:
        assert isinstance(person, HostsAgentSessions) and person.agent_session("ENG-1") is None
    with tracker_of(linear, APP_TOKEN) as tracker:
        session = tracker.agent_session("ENG-1")
        assert session is not None
        session.thought("beflow is working on this")
        session.action("Working", "Write a.txt", ephemeral=True)
        session.action("Progress", "half way")
        session.respond("Done.", "https://github.com/acme/widgets/pull/7")
    [raw] = issue["agentSessions"]
    assert raw["appUser"]["id"] == linear.app["id"] and raw["status"] == "complete"
    contents = [a["content"] for a in raw["activities"]]
    assert [(c["type"], c.get("body") or c.get("parameter")) for c in contents] == [
        ("thought", "beflow is working on this"),
        ("action", "half way"),  # (the ephemeral tool call, replaced by the next activity)
        ("response", "Done."),
    ]
    assert raw["externalLinks"] == [{"label": "Pull request", "url": "https://github.com/acme/widgets/pull/7"}]
    assert linear.violations == []


def test_a_stop_signal_is_found_among_the_activities_since_the_last_look(linear: FakeLinear) -> None:
    linear.add_issue("Stop me", labels=["beflow"])
    with tracker_of(linear, APP_TOKEN) as tracker:
        session = tracker.agent_session("ENG-1")
        assert session is not None
        raw = linear.sessions[session.id]  # type: ignore[attr-defined]
        before = len(linear.seen)
        assert not session.stop_asked()
        linear.prompt(raw, "Please also update the docs")  # a follow-up, not a stop
        assert not session.stop_asked()
        assert [s.operation for s in linear.seen[before:]] == ["BeflowAgentSession"] * 2  # one request a look
        linear.prompt(raw, "Stop", stop=True)
        for n in range(STOP_PAGE + 3):  # buried under more than a page of newer activities
            session.action("Progress", f"step {n}")
        assert session.stop_asked()
        assert not session.stop_asked()  # (heard once: the next look starts after it)
    assert linear.violations == []


def test_the_session_a_delegation_opened_is_taken_up_and_a_later_run_opens_its_own(linear: FakeLinear) -> None:
    issue = linear.add_issue("Delegated")
    waiting = linear.delegate(issue)
    linear.delegate(linear.add_issue("Delegated to another"), linear.user("Other agent", app=True))
    with tracker_of(linear, APP_TOKEN) as tracker:
        first = tracker.agent_session("ENG-1")
        assert first is not None and first.id == waiting["id"]  # type: ignore[attr-defined]
        first.thought("beflow is working on this")
        first.respond("Done.")
        second = tracker.agent_session("ENG-1")  # (the first one is complete: a new run, a new session)
        assert second is not None and second.id != waiting["id"]  # type: ignore[attr-defined]
    assert len(issue["agentSessions"]) == 2 and linear.violations == []


def test_a_session_a_person_wrote_in_after_its_run_ended_is_where_the_next_run_goes_on(linear: FakeLinear) -> None:
    """A follow-up in a finished session (feedback for a review round): the round's run answers in that session,
    not in a new one beside it."""
    issue = linear.add_issue("Delegated")
    raw = linear.delegate(issue)
    with tracker_of(linear, APP_TOKEN) as tracker:
        first = tracker.agent_session("ENG-1")
        assert first is not None
        first.thought("beflow is working on this")
        linear.prompt(raw, "Stop", stop=True)
        assert first.stop_asked()
        first.respond("Stopped.")
        linear.prompt(raw, "Please also cover the empty case")
        again = tracker.agent_session("ENG-1")
        assert again is not None and again.id == raw["id"]  # type: ignore[attr-defined]
        assert not again.stop_asked()  # (the first run's stop is not this one's)
        again.thought("beflow is working on this")
        again.respond("Done again.")
        third = tracker.agent_session("ENG-1")  # (answered: the next run opens its own)
        assert third is not None and third.id != raw["id"]  # type: ignore[attr-defined]
    assert len(issue["agentSessions"]) == 2 and linear.violations == []
