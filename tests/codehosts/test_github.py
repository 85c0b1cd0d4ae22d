"""The code host apart from the tracker: issues in the local tracker, their branches pushed to GitHub and proposed
as GitHub pull requests (the fake GitHub), the token in no argv, file, record or output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject, git

pytestmark = pytest.mark.slow


@pytest.fixture
def local_on_github(auto_project: AutoProject, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    """The test project with its local tracker, GitHub as its code host (its token in a variable of its own), a
    bare repository as ``origin`` and pull requests on."""
    monkeypatch.setenv("HOSTPAT", TOKEN)  # a name no drop list matches: withheld as the code host's
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    auto_project.add_origin()
    auto_project.configure(
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True, "closes_issue": True},
    )
    return auto_project


def test_a_local_issue_is_proposed_as_a_github_pull_request(
    local_on_github: AutoProject, github: FakeGitHub, beflow
) -> None:
    key = local_on_github.new_issue("write notes.txt first", title="Add notes")

    done = beflow("--auto", key)

    assert done.exit_code == 0, done.stderr
    (pull,) = github.pulls.values()
    record = local_on_github.only_record()
    origin = local_on_github.directory.parent / "origin.git"
    assert (pull["head"]["ref"], pull["base"]["ref"], pull["draft"], pull["title"]) == (
        "beflow/1",
        "main",
        True,
        "Add notes",
    )
    assert "**succeeded**" in pull["body"] and "notes.txt" in pull["body"] and f"Closes #{key}" in pull["body"]
    assert git(origin, "rev-parse", "refs/heads/beflow/1").strip() == record.commit
    assert record.pull_request == pull["html_url"]
    issue = local_on_github.issue(key)
    assert issue.status == Status.REVIEW and pull["html_url"] in issue.comments[-1].text
    assert not github.requests(prefix="/repos/octo/hello/issues")  # the issues are the local tracker's

    seen = done.stdout + done.stderr
    assert TOKEN not in seen
    roots = [local_on_github.directory, origin, Path(os.environ["BEFLOW_HOME"])]
    assert [p for root in roots for p in root.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()] == []
    assert TOKEN not in git(local_on_github.directory, "config", "--list")


def test_code_host_none_keeps_the_branch_local_and_is_refused_with_pull_requests(
    local_on_github: AutoProject, github: FakeGitHub, beflow
) -> None:
    local_on_github.configure(code_host={"kind": "none"})
    key = local_on_github.new_issue("write notes.txt first")

    refused = beflow("--auto", key)

    assert refused.exit_code == 2 and "pull requests need a code host" in refused.stderr
    assert not github.requests() and local_on_github.records(key) == []
