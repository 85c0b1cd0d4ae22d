"""What ``beflow doctor`` asks of Jira besides the workflow: the issue type beflow files issues as
(``tracker.issue_type``), against the types the account may create in the project (createmeta)."""

from __future__ import annotations

import pytest

from beflow.config import Config, JiraTrackerSettings, load_project
from beflow.doctor import check_access
from beflow.errors import BeflowError
from beflow.trackers.jira import JiraTracker
from beflow.trackers.jira_api import Api
from tests.support.jira import EMAIL, TOKEN, FakeJira
from tests.support.jira import jira as jira
from tests.support.projects import AutoProject


def test_issues_are_filed_as_the_configured_type_which_doctor_checks(jira: FakeJira) -> None:
    settings = JiraTrackerSettings.model_validate({"kind": "jira", "site": jira.url, "project": "WID"})
    tracker = JiraTracker(settings, Api(jira.url, EMAIL, TOKEN), settle=0.0)
    assert {f.name: f for f in tracker.access_checks()}["jira issue type"].ok
    tracker.create("Default type")
    bug = JiraTracker(settings.model_copy(update={"issue_type": "Bug"}), Api(jira.url, EMAIL, TOKEN), settle=0.0)
    bug.create("A bug")
    filed = [r.body["fields"]["issuetype"] for r in jira.requests("POST", "/rest/api/3/issue")]
    assert filed == [{"name": "Task"}, {"name": "Bug"}]
    jira.creatable.discard("Bug")
    with pytest.raises(BeflowError, match="issuetype"):
        bug.create("Refused")


def test_a_type_the_project_lacks_is_named_with_the_file_entry_and_field(
    auto_project: AutoProject, jira: FakeJira, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIRA_EMAIL", EMAIL)
    monkeypatch.setenv("JIRA_API_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "jira", "site": jira.url, "project": "WID", "issue_type": "task"})
    found = {c.name: c for c in check_access(load_project(auto_project.config_path))}["jira issue type"]
    assert not found.ok
    assert f"{auto_project.config_path}:" in found.detail and "tracker.issue_type: 'task'" in found.detail
    assert "may create: Task, Bug" in found.detail and 'tracker.issue_type to "Task"' in (found.fix or "")
    assert not jira.requests("POST", "/rest/api/3/issue")  # (doctor files nothing to find out)


def test_an_issue_type_that_is_no_name_is_refused_when_the_config_loads() -> None:
    tracker = {"kind": "jira", "site": "https://acme.atlassian.net", "project": "WID"}
    with pytest.raises(ValueError, match="issue_type"):
        Config.model_validate({"tracker": {**tracker, "issue_type": "Task\nX"}})
    with pytest.raises(ValueError, match="issue_type"):
        Config.model_validate({"tracker": {**tracker, "issue_type": ""}})
