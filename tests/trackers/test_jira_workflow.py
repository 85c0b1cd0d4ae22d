"""The Jira workflow checked before any run, from the workflow itself (``POST /workflows`` for each issue type of the
project), not from an issue that happens to be in some status: every configured transition it lacks is named, by
``doctor`` and by the watch's start check; an account that cannot read workflows is told which transitions stayed
unverified and how to fix that, and the project's statuses and a ready issue's transitions are checked instead."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from beflow.config import JiraTrackerSettings, load_project
from beflow.doctor import check_access
from beflow.errors import ConfigError
from beflow.run import batch
from beflow.trackers.base import ChecksSetup
from beflow.trackers.jira import JiraTracker, JiraWorkflowError
from beflow.trackers.jira_api import Api
from beflow.watch.holds import Holds
from tests.support.jira import EMAIL, TOKEN, FakeJira
from tests.support.jira import jira as jira
from tests.support.projects import AutoProject


def make(fake: FakeJira, **settings: Any) -> JiraTracker:
    model = JiraTrackerSettings.model_validate({"kind": "jira", "site": fake.url, "project": "WID", **settings})
    return JiraTracker(model, Api(fake.url, EMAIL, TOKEN), settle=0.0)


def finding(tracker: JiraTracker) -> Any:
    return {f.name: f for f in tracker.access_checks()}["jira transitions"]


def test_every_configured_transition_the_workflow_lacks_is_named_before_any_issue_exists(jira: FakeJira) -> None:
    del jira.transitions["Done"]
    tracker = make(jira, transitions={"in_progress": "In Progress", "review": "Ready for review", "done": "Done"})
    found = finding(tracker)
    assert not found.ok
    assert "review (Ready for review)" in found.detail and "done (Done)" in found.detail
    assert "in_progress" not in found.detail and "'Widgets workflow' (Task, Bug)" in found.detail
    assert isinstance(tracker, ChecksSetup)
    with pytest.raises(JiraWorkflowError, match=r"review \(Ready for review\), done \(Done\)") as caught:
        tracker.check_setup()
    assert "tracker.transitions" in (caught.value.fix or "")
    asked = jira.requests("POST", "/rest/api/3/workflows")
    assert [r.body["projectAndIssueTypes"] for r in asked][-2:] == [
        [{"projectId": "10000", "issueTypeId": "10001"}],
        [{"projectId": "10000", "issueTypeId": "10004"}],
    ]  # (the sub-task's workflow is not asked: beflow works on no sub-task)
    assert not jira.requests(prefix="/rest/api/3/search") and not jira.requests("POST", "/rest/api/3/issue")


def test_a_workflow_with_every_transition_passes_and_is_asked_once(jira: FakeJira) -> None:
    tracker = make(jira, transitions={"review": "in review"})  # (names compare without regard to case)
    found = finding(tracker)
    assert found.ok and not found.warning and "review (in review)" in found.detail
    jira.fail(404, prefix="/rest/api/3/project/WID/statuses")
    tracker.check_setup()  # (an answer Jira should not give: no run is held back by it, and it is asked again)
    tracker.check_setup()
    tracker.check_setup()
    assert len(jira.requests("POST", "/rest/api/3/workflows")) == 2 + 2  # doctor's, then the start check's once


def test_an_account_that_cannot_read_workflows_is_told_what_stayed_unverified(jira: FakeJira) -> None:
    jira.workflow_readable = False
    tracker = make(jira, transitions={"in_progress": "Start work", "done": "Done"})
    jira.transitions["Start work"] = "In Progress"
    found = finding(tracker)
    assert found.ok and found.warning
    assert "403" in found.detail and "not verified: in_progress (Start work)" in found.detail
    assert "statuses of the project" in found.detail and "done (Done)" in found.detail
    assert "View (read-only) workflow" in (found.fix or "") and "WID" in (found.fix or "")
    tracker.check_setup()  # (not verifiable: left to each claim, which asks the issue's transitions)
    key = jira.add_issue("Ready")
    assert "WID-1 offers in_progress (Start work)" in finding(tracker).detail
    del jira.transitions["Start work"]
    refused = finding(tracker)
    assert not refused.ok and f"{key}'s workflow offers" in refused.detail
    with pytest.raises(JiraWorkflowError):
        tracker.claim(key, "runner")


def test_the_watch_holds_dispatching_and_auto_starts_nothing_on_a_workflow_without_the_transition(
    auto_project: AutoProject, jira: FakeJira, monkeypatch: pytest.MonkeyPatch, beflow: Any
) -> None:
    monkeypatch.setenv("JIRA_EMAIL", EMAIL)
    monkeypatch.setenv("JIRA_API_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "jira", "site": jira.url, "project": "WID"})
    project = load_project(auto_project.config_path)
    key = jira.add_issue("Would run")
    del jira.transitions["In Progress"]
    said: list[tuple[str, dict[str, Any]]] = []
    holds = Holds(lambda kind, **fields: said.append((kind, fields)))
    tracker = make(jira)
    assert not holds.config_ready(project, tracker=tracker)
    assert said[0][0] == "error" and "in_progress (In Progress)" in said[0][1]["message"]
    with pytest.raises(ConfigError, match=r"lacks in_progress"):
        anyio.run(lambda: batch.run_many(project, tracker, [], opens_code_host=lambda *_: None))
    auto = beflow("--auto")
    assert auto.exit_code == 2 and "lacks in_progress (In Progress)" in auto.stderr
    [doctor] = [c for c in check_access(project) if c.name == "jira transitions"]  # (beflow doctor's line)
    assert not doctor.ok and "lacks in_progress (In Progress)" in doctor.detail
    assert jira.comments[key] == [] and jira.status(key) == "To Do"
    jira.transitions["In Progress"] = "In Progress"
    assert holds.config_ready(project, tracker=tracker)
