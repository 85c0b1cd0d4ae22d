"""The Linear tracker against the fake Linear: which issues are beflow's and which are ready, in what order; statuses
as workflow states and labels; comments posted once and a progress comment edited in place; an idle watch that costs
one request a poll; words made inert; the client's token, errors, retries and rate-limit gate."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pydantic
import pytest

from beflow import app
from beflow.config import Config, LinearTrackerSettings, load_project
from beflow.errors import NotFoundError, TransitionError
from beflow.records.record import RunRecord, new_run_id, now
from beflow.records.store import RunStore
from beflow.run.request import RunRequest, branch_of, new_record
from beflow.run.summary import pull_request_summary
from beflow.trackers import linear_wire as wire
from beflow.trackers.base import ChecksAccess, ReadsOnce, ReadsPullRequests, SetsUpLabels, ShowsProgress, Tracker
from beflow.trackers.issue import Status
from beflow.trackers.linear import LinearTracker, linear_key, open_linear
from beflow.trackers.linear_api import Api, LinearAuthError, LinearError, RateLimited, Unavailable
from beflow.trackers.quoting import JOINER
from tests.support.linear import API_KEY, APP_TOKEN, OAUTH_TOKEN, FakeLinear
from tests.support.linear import linear as linear


def settings_for(fake: FakeLinear, **extra: Any) -> LinearTrackerSettings:
    return LinearTrackerSettings.model_validate({"kind": "linear", "team": "ENG", "api_url": fake.url, **extra})


@pytest.fixture
def tracker(linear: FakeLinear) -> Iterator[LinearTracker]:
    api = Api(linear.url, API_KEY, inline_wait=0.5)
    yield LinearTracker(settings_for(linear), api)
    api.close()


def requests_of(fake: FakeLinear, since: int) -> list[str | None]:
    return [seen.operation for seen in fake.seen[since:]]


# -- which issues, in what order -------------------------------------------------------------------------------------


def test_it_is_a_tracker_that_reads_once_shows_progress_and_sets_up_labels(tracker: LinearTracker) -> None:
    assert isinstance(tracker, Tracker)
    assert isinstance(tracker, ReadsOnce) and isinstance(tracker, ShowsProgress) and isinstance(tracker, SetsUpLabels)
    assert tracker.identity == "linear:ENG"


def test_ready_issues_are_the_labelled_ones_in_unstarted_states_urgent_first_no_priority_last(
    linear: FakeLinear, tracker: LinearTracker
) -> None:
    linear.add_issue("None", labels=["beflow"], priority=0)
    linear.add_issue("Low", labels=["beflow"], priority=4)
    linear.add_issue("Urgent", labels=["Beflow"], priority=1)
    linear.add_issue("High, older", labels=["beflow"], priority=2)
    linear.add_issue("High, newer", labels=["beflow"], priority=2)
    linear.add_issue("Not beflow's", labels=["bug"], priority=1)
    linear.add_issue("In the backlog", labels=["beflow"], state="Backlog", priority=1)
    linear.add_issue("Backlog, marked ready", labels=["beflow", "beflow:ready"], state="Backlog", priority=3)
    linear.add_issue("Started", labels=["beflow"], state="In Progress", priority=1)
    ready = tracker.ready()
    assert [i.title for i in ready] == ["Urgent", "High, older", "High, newer", "Backlog, marked ready", "Low", "None"]
    assert [i.key for i in ready][:2] == ["ENG-3", "ENG-4"]
    assert ready[0].priority == 1 and ready[-1].priority == 5
    assert ready[3].labels == ["beflow"]  # the status label is no label of the issue's


def test_ready_states_and_the_project_narrow_what_is_beflows(linear: FakeLinear) -> None:
    linear.add_issue("Widget, backlog", labels=["beflow"], state="Backlog", project="Widgets")
    linear.add_issue("Widget, todo", labels=["beflow"], project="Widgets")
    linear.add_issue("Gadget, backlog", labels=["beflow"], state="Backlog", project="Gadgets")
    api = Api(linear.url, API_KEY)
    tracker = LinearTracker(settings_for(linear, project="Widgets", ready_states=["backlog", "unstarted"]), api)
    assert [i.title for i in tracker.ready()] == ["Widget, backlog", "Widget, todo"]
    assert tracker.listing().issues[0].key == "ENG-1"
    with pytest.raises(NotFoundError, match="not beflow's"):
        tracker.get("ENG-3")


def test_every_status_is_read_from_the_state_type_and_the_labels(linear: FakeLinear, tracker: LinearTracker) -> None:
    for title, state, labels in [
        ("open", "Backlog", []),
        ("ready", "Todo", []),
        ("in_progress", "In Progress", []),
        ("review", "In Review", []),
        ("done", "Done", []),
        ("closed", "Canceled", []),
        ("closed", "Duplicate", []),
        ("failed", "Backlog", ["beflow:failed"]),
        ("open", "Todo", ["beflow:open"]),
    ]:
        linear.add_issue(title, labels=["beflow", *labels], state=state)
    listed = tracker.listing().issues
    assert [(i.title, i.status.value) for i in listed] == [(i.title, i.title) for i in listed]
    assert [i.key for i in tracker.listing(Status.CLOSED).issues] == ["ENG-6", "ENG-7"]
    assert [i.key for i in tracker.listing(Status.READY).issues] == ["ENG-2"]


def test_an_issue_is_read_by_its_identifier_in_any_case_with_its_comments_oldest_first(
    linear: FakeLinear, tracker: LinearTracker
) -> None:
    issue = linear.add_issue("Read me", description="The body", labels=["beflow"])
    linear.add_comment(issue, "First")
    linear.add_comment(issue, "Second")
    got = tracker.get(" eng-1 ")
    assert (got.key, got.title, got.body, got.url) == ("ENG-1", "Read me", "The body", issue["url"])
    assert [(c.author, c.text) for c in got.comments] == [("ada.lovelace", "First"), ("ada.lovelace", "Second")]
    with pytest.raises(NotFoundError, match="no issue ENG-9"):
        tracker.get("ENG-9")
    with pytest.raises(NotFoundError, match="identifiers such as ENG-123"):
        tracker.get("42")
    assert linear_key("#eng-12") == "ENG-12"


def test_an_issue_moved_to_another_team_keeps_its_branch_and_its_runs(linear: FakeLinear, repo: Path) -> None:
    raw = linear.add_issue("Moved", labels=["beflow"])
    with opened(linear) as eng:
        before = eng.get("ENG-1")
    assert before.id == raw["id"]
    project = load_project(_project_config(repo))
    request = RunRequest(key=before.key)
    first = new_record(project, before, request, run_id=new_run_id(before.key), branch=branch_of(repo, before))
    assert (first.issue_id, first.branch) == (raw["id"], "beflow/ENG-1")
    first.close("succeeded", "done")
    store = RunStore(repo)
    store.create(first, "prompt")

    linear.move(raw, linear.add_team("OPS", "Operations"))
    with opened(linear, team="OPS") as ops:
        after = ops.get("OPS-1")
    assert (after.key, after.id) == ("OPS-1", before.id)
    assert [r.id for r in store.records([after.key], ids=[after.id])] == [first.id]
    assert store.records([after.key]) == []  # by its key alone, the run under ENG-1 is not its
    assert branch_of(repo, after) == "beflow/ENG-1"
    second = new_record(project, after, request, run_id=new_run_id(after.key), branch=branch_of(repo, after))
    assert store.resumable_session(second) is None and second.branch == "beflow/ENG-1"


@contextmanager
def opened(fake: FakeLinear, **extra: Any) -> Iterator[LinearTracker]:
    api = Api(fake.url, API_KEY, inline_wait=0.5)
    try:
        yield LinearTracker(settings_for(fake, **extra), api)
    finally:
        api.close()


def _project_config(directory: Path) -> Path:
    (directory / ".beflow").mkdir(exist_ok=True)
    path = directory / ".beflow" / "config.json"
    path.write_text(json.dumps({"agent": {"command": "true"}}))
    return path


# -- writing ---------------------------------------------------------------------------------------------------------


def test_statuses_move_the_issue_through_the_teams_workflow(linear: FakeLinear, tracker: LinearTracker) -> None:
    issue = linear.add_issue("Work", labels=["beflow"])
    assert tracker.set_status("ENG-1", Status.IN_PROGRESS).status == Status.IN_PROGRESS
    assert issue["state"]["name"] == "In Progress"
    # waiting for the answer to its agent's question: still started, labelled; answered, in progress again
    assert tracker.set_status("ENG-1", Status.BLOCKED).status == Status.BLOCKED
    assert (issue["state"]["name"], [lb["name"] for lb in issue["labels"]]) == (
        "In Progress",
        ["beflow", "beflow:blocked"],
    )
    assert tracker.set_status("ENG-1", Status.IN_PROGRESS).status == Status.IN_PROGRESS
    assert [lb["name"] for lb in issue["labels"]] == ["beflow"]
    assert tracker.set_status("ENG-1", Status.REVIEW).status == Status.REVIEW
    assert issue["state"]["name"] == "In Review"
    assert tracker.set_status("ENG-1", Status.FAILED, "It broke").status == Status.FAILED
    assert (issue["state"]["name"], [lb["name"] for lb in issue["labels"]]) == ("Backlog", ["beflow", "beflow:failed"])
    assert tracker.set_status("ENG-1", Status.READY).status == Status.READY
    assert (issue["state"]["name"], [lb["name"] for lb in issue["labels"]]) == ("Todo", ["beflow"])
    assert tracker.set_status("ENG-1", Status.OPEN).status == Status.OPEN
    assert issue["state"]["name"] == "Backlog"
    with pytest.raises(TransitionError):
        tracker.set_status("ENG-1", Status.DONE)
    tracker.set_status("ENG-1", Status.CLOSED)
    assert issue["state"]["type"] == "canceled"


def test_a_team_without_a_review_state_says_review_with_a_label(linear: FakeLinear, tracker: LinearTracker) -> None:
    linear.team["states"].remove(linear.state("In Review"))
    issue = linear.add_issue("Work", labels=["beflow"], state="In Progress")
    assert tracker.set_status("ENG-1", Status.REVIEW).status == Status.REVIEW
    assert issue["state"]["name"] == "In Progress" and "beflow:review" in [lb["name"] for lb in issue["labels"]]
    assert tracker.set_status("ENG-1", Status.DONE).status == Status.DONE
    assert [lb["name"] for lb in issue["labels"]] == ["beflow"]


def test_a_run_keeps_one_progress_comment_and_says_its_end_once(linear: FakeLinear, tracker: LinearTracker) -> None:
    issue = linear.add_issue("Work", labels=["beflow"])
    tracker.set_status("ENG-1", Status.IN_PROGRESS)
    assert [c["body"] for c in issue["comments"]] == ["beflow is working on this issue."]
    assert tracker.progress("ENG-1", "Reading the code", force=True)
    assert not tracker.progress("ENG-1", "Too soon")  # (at most every PROGRESS_EVERY seconds)
    assert [c["body"] for c in issue["comments"]] == ["Reading the code"]
    tracker.set_status("ENG-1", Status.REVIEW, "Done: see the pull request")
    tracker.set_status("ENG-1", Status.DONE, "Merged")
    assert [c["body"] for c in issue["comments"]] == ["Done: see the pull request", "Merged"]
    made = tracker.comment("ENG-1", "By hand", "ada")
    assert made.text == "By hand" and len(issue["comments"]) == 3


def test_a_comment_whose_answer_was_lost_is_posted_once(linear: FakeLinear, tracker: LinearTracker) -> None:
    issue = linear.add_issue("Work", labels=["beflow"])
    linear.fail(502, field="commentCreate", after=True)
    assert tracker.comment("ENG-1", "Once", "ada").text == "Once"
    assert [c["body"] for c in issue["comments"]] == ["Once"]


def test_a_new_issue_is_filed_in_the_team_with_beflows_labels(linear: FakeLinear, tracker: LinearTracker) -> None:
    made = tracker.create("Filed", "Its body", labels=["bug"], priority=1)
    assert (made.key, made.status, made.priority, sorted(made.labels)) == ("ENG-1", Status.READY, 1, ["beflow", "bug"])
    held = tracker.create("Held back", status=Status.OPEN)
    assert (held.status, held.priority) == (Status.OPEN, 5)
    assert linear.issue("ENG-2")["state"]["name"] == "Backlog"
    assert tracker.missing_labels() == ["beflow:failed"]  # (a state says open and review in this team)
    assert tracker.ensure_labels() == ["beflow:failed"]
    assert tracker.missing_labels() == []


# -- polling ---------------------------------------------------------------------------------------------------------


def test_an_idle_watch_over_fifty_issues_costs_one_cheap_request_a_poll(
    linear: FakeLinear, tracker: LinearTracker
) -> None:
    for n in range(50):
        linear.add_issue(f"Issue {n}", labels=["beflow"], priority=n % 5)
    assert len(tracker.ready()) == 50
    for _ in range(3):
        before = len(linear.seen)
        with tracker.reading_once():
            assert len(tracker.ready()) == 50
            tracker.orphaned()
        assert requests_of(linear, before) == ["BeflowChanged"]
    linear.add_issue("A new one", labels=["beflow"], priority=1)
    linear.issue("ENG-1")["labels"] = []  # a person took the label away
    linear.issue("ENG-1")["updatedAt"] = linear.now()
    before = len(linear.seen)
    ready = tracker.ready()
    assert requests_of(linear, before) == ["BeflowChanged", "BeflowIssues", "BeflowComments"]
    assert len(ready) == 50 and "A new one" in [i.title for i in ready] and "Issue 0" not in [i.title for i in ready]
    before = len(linear.seen)
    tracker.ready()
    assert requests_of(linear, before) == ["BeflowChanged"]


# -- words -----------------------------------------------------------------------------------------------------------


def test_an_agents_words_act_on_nothing_in_linear(tracker: LinearTracker) -> None:
    words = "Fixes ENG-1, closes eng-2 and WID-7 #done; @ada see https://linear.app/acme/issue/ENG-3 and #4"
    inert = tracker.inert(words)
    assert inert.replace(JOINER, "") == words
    assert not re.search(r"\b[A-Za-z]\w*-\d", inert) and not re.search(r"[@#]\w", inert)
    assert "linear.app" not in inert


# -- the client ------------------------------------------------------------------------------------------------------


def test_the_agents_words_in_a_pull_request_carry_no_magic_word_for_linear(tracker: LinearTracker) -> None:
    assert isinstance(tracker, ReadsPullRequests)
    said = "Fixes ENG-1. Closes eng-2, resolves WID-3 #done, part of OPS-4"
    record = RunRecord(
        id="20261206-093000-ENG-1-abcd", issue="ENG-1", mode="watch", agent="acp-test", started_at=now(),
        outcome="succeeded", stop_reason=said, final_message=f"Done.\n{said}", branch="beflow/ENG-1",
    )  # fmt: skip
    body = pull_request_summary(record, tracker)
    assert "Closes eng" in body and "resolves WID" in body  # (people read the same words)
    assert re.findall(r"[A-Za-z]+-\d", body.replace("beflow/ENG-1", "").replace(record.id, "")) == []
    assert "```" in body  # the quoted message too: Linear reads a code block's words as well


def test_a_key_goes_bare_and_an_oauth_token_after_bearer(linear: FakeLinear) -> None:
    Api(linear.url, API_KEY).query(*_viewer())
    Api(linear.url, OAUTH_TOKEN).query(*_viewer())
    assert [s.auth for s in linear.seen] == ["key", "bearer"]


def test_a_refused_token_is_a_setting_to_change_and_never_shown(linear: FakeLinear) -> None:
    secret = "lin_api_notakeylinearknows000000000000"
    with pytest.raises(LinearAuthError) as caught:
        Api(linear.url, secret, token_name="MY_LINEAR").query(*_viewer())
    assert "$MY_LINEAR" in caught.value.message and secret not in caught.value.message + (caught.value.fix or "")


def test_a_storm_of_5xx_is_waited_out_for_a_query_and_not_for_a_mutation_said_unsafe(linear: FakeLinear) -> None:
    api = Api(linear.url, API_KEY)
    linear.fail(502, times=2)
    assert api.query(*_viewer())["viewer"]["name"] == "Ada Lovelace"
    issue = linear.add_issue("x")
    linear.fail(503)
    with pytest.raises(Unavailable, match="503"):
        api.mutate(_update(), {"id": issue["id"], "input": {"title": "y"}})


def test_ratelimited_closes_the_gate_until_linear_says(linear: FakeLinear) -> None:
    api = Api(linear.url, API_KEY, inline_wait=0.5)
    linear.spend(requests=0)
    with pytest.raises(RateLimited) as caught:
        api.query(*_viewer())
    assert caught.value.until > 0 and api.stats.rate_limited == 1
    linear.refill()
    before = len(linear.seen)
    with pytest.raises(RateLimited):
        api.query(*_viewer())  # the gate is closed: nothing is sent
    assert len(linear.seen) == before


def test_an_error_is_read_by_its_code(linear: FakeLinear) -> None:
    with pytest.raises(LinearError) as caught:
        Api(linear.url, API_KEY).mutate(_update(), {"id": "ENG-404", "input": {"title": "y"}})
    assert caught.value.codes == (wire.INVALID_INPUT,)


# -- settings --------------------------------------------------------------------------------------------------------


def test_the_settings_name_the_team_and_refuse_a_started_ready_state() -> None:
    settings = LinearTrackerSettings.model_validate({"kind": "linear", "team": "ENG"})
    assert (settings.token_env, settings.api_url, settings.ready_states) == (
        "LINEAR_API_KEY",
        "https://api.linear.app/graphql",
        ["unstarted"],
    )
    assert settings.secret_env() == ["LINEAR_API_KEY"] and settings.implied_code_host().kind == "none"
    with pytest.raises(pydantic.ValidationError, match="started cannot be ready"):
        LinearTrackerSettings.model_validate({"kind": "linear", "team": "ENG", "ready_states": ["started"]})
    with pytest.raises(pydantic.ValidationError, match="team"):
        Config.model_validate({"tracker": {"kind": "linear"}})


def test_the_composition_root_opens_a_linear_tracker(linear: FakeLinear, monkeypatch: pytest.MonkeyPatch) -> None:
    assert app.TRACKERS["linear"].holds_token
    monkeypatch.setenv("LINEAR_API_KEY", API_KEY)
    from beflow.config import Project

    project = Project.model_validate(
        {
            "directory": "/nonexistent",
            "config_path": None,
            "config": {"tracker": {"kind": "linear", "team": "ENG", "api_url": linear.url}},
        }
    )
    settings = project.config.tracker
    assert isinstance(settings, LinearTrackerSettings)
    opened = open_linear(project, settings)
    assert opened.held_secrets() == [API_KEY] and opened.ready() == []
    monkeypatch.delenv("LINEAR_API_KEY")
    with pytest.raises(LinearAuthError, match=r"\$LINEAR_API_KEY is not set"):
        open_linear(project, settings)


def _viewer() -> tuple[str]:
    from beflow.trackers import linear_queries as q

    return (q.VIEWER,)


def _update() -> str:
    from beflow.trackers import linear_queries as q

    return q.ISSUE_UPDATE


def test_an_issue_with_a_label_no_issue_may_carry_is_skipped_and_named(
    linear: FakeLinear, tracker: LinearTracker
) -> None:
    linear.add_issue("Hostile", labels=["beflow", "line\nbreak"])
    linear.add_issue("Fine", labels=["beflow"])
    assert [i.title for i in tracker.ready()] == ["Fine"]
    assert list(tracker.unreadable) == ["ENG-1"] and "cannot be read" in tracker.unreadable["ENG-1"]
    assert [p.message for p in tracker.listing().problems] == [tracker.unreadable["ENG-1"]]


def test_doctor_is_told_whose_token_it_is_and_the_teams_states(linear: FakeLinear, tracker: LinearTracker) -> None:
    assert isinstance(tracker, ChecksAccess)
    person, team = tracker.access_checks()
    assert person.ok and "personal API key of Ada Lovelace" in person.detail and "actor=app" in person.detail
    assert team.ok and team.detail == "ENG (Engineering): in progress: In Progress, review: In Review, ready: Todo, " \
        "done: Done, closed: Canceled"  # fmt: skip
    app_tracker = LinearTracker(settings_for(linear), Api(linear.url, APP_TOKEN))
    assert "app user beflow" in app_tracker.access_checks()[0].detail
    for state in [s for s in linear.team["states"] if s["type"] == "canceled"]:
        linear.team["states"].remove(state)
    bare = LinearTracker(settings_for(linear), Api(linear.url, API_KEY)).access_checks()[1]
    assert not bare.ok and "no state for closed" in bare.detail and bare.fix
