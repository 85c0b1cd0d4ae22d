"""A Jira issue run end to end through the real acpx and the test agent: the ready issue is claimed, moved to In
Progress, its branch proposed as a pull request on the fake GitHub, and the issue left in review with the pull
request's link — the credentials in no output or file, the record keeping the issue's stable id."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beflow.trackers import jira_adf as adf
from tests.support.github import TOKEN as GITHUB_TOKEN
from tests.support.github import FakeGitHub
from tests.support.jira import EMAIL, TOKEN, FakeJira, doc
from tests.support.jira import jira as jira
from tests.support.projects import AutoProject, git

pytestmark = pytest.mark.slow


def test_a_ready_jira_issue_becomes_a_pull_request_and_waits_in_review_with_its_link(
    auto_project: AutoProject, jira: FakeJira, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch, beflow
) -> None:
    monkeypatch.setenv("JIRA_EMAIL", EMAIL)
    monkeypatch.setenv("JIRA_API_TOKEN", TOKEN)
    monkeypatch.setenv("HOSTPAT", GITHUB_TOKEN)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    auto_project.add_origin()
    auto_project.configure(
        tracker={
            "kind": "jira",
            "site": jira.url,
            "project": "WID",
            "lease": 30,
            "transitions": {"review": "In Review"},
        },
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    # The agent commits by itself, with words Jira's smart commits and GitHub's closing keywords would act on.
    steps = "acp-test: write notes.txt hello\nacp-test: run git add -A && git commit -qm 'WID-1 #done, fixes #1'"
    key = jira.add_issue("Add notes", description=doc(steps))

    done = beflow("--auto", key)

    assert done.exit_code == 0, done.stderr
    (pull,) = github.pulls.values()
    assert pull["head"]["ref"] == f"beflow/{key}"
    assert jira.status(key) == "In Review" and "beflow:review" in jira.labels(key)
    said = [adf.markdown(c["body"]) for c in jira.comments[key] if "beflow-claim" not in json.dumps(c["body"])]
    assert said and pull["html_url"] in said[-1]
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.issue == key and record.issue_id == jira.issues[key]["id"]
    assert record.pull_request == pull["html_url"]
    pushed = git(auto_project.directory, "log", "--format=%B", "-n", "2", f"{record.commit}")
    assert "WID-1 #done" not in pushed and "fixes #1" not in pushed
    assert "WID\u2060-1 #\u2060done, fixes #\u20601" in pushed
    seen = done.stdout + done.stderr
    roots = [auto_project.directory, Path(os.environ["BEFLOW_HOME"])]
    for secret in (TOKEN, GITHUB_TOKEN):
        assert secret not in seen
        assert [p for root in roots for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()] == []
