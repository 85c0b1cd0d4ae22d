"""GitHub did the write but its answer was lost (a proxy's 502 after the fact), or failed it: ``beflow --auto`` as a
real process recognises its own claim, finds its pull request and its progress comment instead of doing them twice,
and tries a failed pull request again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.conftest import beflow_run
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject

ENV = {"GITHUB_TOKEN": TOKEN}


@pytest.fixture
def published(auto_project: AutoProject, github: FakeGitHub) -> AutoProject:
    auto_project.add_origin()
    auto_project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 30},
        after_run={"pull_request": True},
    )
    return auto_project


def test_lost_answers_are_found_not_done_twice(published: AutoProject, github: FakeGitHub) -> None:
    github.add_issue("Add notes", labels=["beflow", "beflow:ready"], body="acp-test: write notes.txt first")
    github.fail(502, only="POST", prefix="/repos/octo/hello/git/refs", after=True)  # the claim
    github.fail(502, only="POST", prefix="/repos/octo/hello/issues/1/comments", after=True)  # the progress comment
    github.fail(502, only="POST", prefix="/repos/octo/hello/pulls", after=True)  # the pull request

    done = beflow_run(published, "--auto", "1", env=ENV)

    assert done.code == 0, done.stdout + done.stderr
    assert "claimed by" not in done.stdout + done.stderr
    record = published.only_record()
    (pull,) = github.pulls.values()
    assert record.outcome == "succeeded" and record.pull_request == pull["html_url"]
    (comment,) = github.comments_of(1)  # one progress comment, edited to say how the run ended
    assert "**succeeded**" in comment["body"] and pull["html_url"] in comment["body"]
    assert "beflow:review" in github.issue_labels(1)


@pytest.mark.parametrize(("status", "headers"), [(503, {}), (429, {"retry-after": "6"})])
def test_a_pull_request_that_failed_is_tried_again(
    published: AutoProject, github: FakeGitHub, status: int, headers: dict[str, str], tmp_path: Path
) -> None:
    github.add_issue("Add notes", labels=["beflow", "beflow:ready"], body="acp-test: write notes.txt first")
    github.fail(status, only="POST", prefix="/repos/octo/hello/pulls", headers=headers)

    done = beflow_run(published, "--auto", "1", env=ENV)

    assert done.code == 0, done.stdout + done.stderr
    (pull,) = github.pulls.values()
    assert published.only_record().pull_request == pull["html_url"]
    assert len(github.requests("POST", "/repos/octo/hello/pulls")) == 2
