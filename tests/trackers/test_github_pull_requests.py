"""After a run on a GitHub issue: the branch is pushed to ``origin`` and a pull request opened — then updated, not
duplicated, by a retry — and the token is in no argv, remote URL, git config, file or output."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

from beflow.app import open_code_host, open_tracker
from beflow.codehosts.github import GitHubCodeHost
from beflow.config import load_project
from beflow.repository.remote import PushAuth
from beflow.trackers.github import web_host
from tests.support.github import TOKEN, FakeGitHub, acted_on
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow


def git(cwd: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env, input=stdin
    ).stdout


@pytest.fixture
def published(auto_project: AutoProject, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    """The test project on the fake GitHub, with a bare repository as ``origin`` and pull requests on."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    auto_project.add_origin()
    auto_project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url},
        after_run={"pull_request": True, "closes_issue": True},
    )
    return auto_project


def test_a_run_opens_a_pull_request_and_a_retry_updates_it(published: AutoProject, github: FakeGitHub, beflow) -> None:
    github.add_issue("Add notes", labels=["beflow", "beflow:ready"], body="acp-test: write notes.txt first")
    first = beflow("--auto", "1")
    assert first.exit_code == 0, first.stderr

    (pull,) = github.pulls.values()
    record = published.only_record()
    origin = published.directory.parent / "origin.git"
    assert (pull["head"]["ref"], pull["base"]["ref"], pull["draft"]) == ("beflow/1", "main", True)
    assert pull["title"] == "Add notes"
    assert "**succeeded**" in pull["body"] and "notes.txt" in pull["body"] and "Closes #1" in pull["body"]
    assert git(origin, "rev-parse", "refs/heads/beflow/1").strip() == record.commit
    assert record.pull_request == pull["html_url"]
    assert "beflow:review" in github.issue_labels(1)
    (progress,) = github.comments_of(1)  # one comment per run, edited in place: started, then how it ended
    assert progress["body"].endswith("<!-- beflow:progress -->") and "**succeeded**" in progress["body"]
    assert pull["html_url"] in progress["body"]  # the issue links the pull request
    assert github.requests("PATCH", "/repos/octo/hello/issues/comments/")

    assert beflow("issues", "set-status", "1", "ready", "--note", "Also a second file").exit_code == 0
    github.issues[1]["body"] = "acp-test: write second.txt more"
    again = beflow("--auto", "1")
    assert again.exit_code == 0, again.stderr

    assert len(github.pulls) == 1  # the same pull request, updated
    assert len(github.requests("PATCH", "/repos/octo/hello/pulls/")) == 1
    latest = published.records("1")[0]
    assert git(origin, "rev-parse", "refs/heads/beflow/1").strip() == latest.commit != record.commit
    assert "second.txt" in next(iter(github.pulls.values()))["body"]

    seen = first.stdout + first.stderr + again.stdout + again.stderr
    assert TOKEN not in seen
    roots = [published.directory, origin, Path(os.environ["BEFLOW_HOME"])]
    leaks = [p for root in roots for p in root.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaks == []
    assert TOKEN not in git(published.directory, "config", "--list")


def test_a_pull_request_links_its_issue_without_closing_it_unless_asked(
    published: AutoProject, github: FakeGitHub, beflow
) -> None:
    published.configure(after_run={"pull_request": True})  # closes_issue left out: false
    github.add_issue("Add notes", labels=["beflow", "beflow:ready"], body="acp-test: write notes.txt first")

    done = beflow("--auto", "1")

    assert done.exit_code == 0, done.stderr
    (pull,) = github.pulls.values()
    assert "Closes" not in pull["body"] and acted_on(pull["body"]) == []
    assert pull["body"].rstrip().endswith(f"Issue: {github.issues[1]['html_url']}")


def test_pull_requests_need_a_code_host(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(after_run={"pull_request": True})
    key = auto_project.new_issue("say hi")
    refused = beflow("--auto", key)
    assert refused.exit_code == 2 and "pull requests need a code host" in refused.stderr


def test_git_gets_the_token_for_exactly_the_hosts_https_url(published: AutoProject) -> None:
    """The push's credential is for the code host's own host and port over https, and for nothing else; beflow's
    helper gives it git only there (tests/repository/test_git_credential.py, tests/faults/test_push_credential.py)."""
    project = load_project(published.config_path)
    opened = open_code_host(project, open_tracker(project))
    assert isinstance(opened, GitHubCodeHost)
    host = web_host(opened.api.base_url)  # github.com for the public API; here the fake's
    port = urlparse(opened.api.base_url).port
    netloc = f"{host}:{port}" if port else host
    auth = opened.git_credentials(f"https://{netloc}/octo/hello.git")
    assert auth == PushAuth(TOKEN, netloc, "https")
    assert TOKEN not in repr(auth)  # (a traceback, a log)
    assert opened.git_credentials(f"https://x-access-token:other@{netloc}/octo/hello.git") == auth
    for other in (
        "https://elsewhere.example.com/octo/hello.git",
        f"http://{netloc}/octo/hello.git",
        f"git@{host}:octo/hello.git",
        f"ssh://git@{host}/octo/hello.git",
        str(published.directory),
        None,
    ):
        assert opened.git_credentials(other) is None, other


def test_the_agents_closing_keywords_and_mentions_act_on_nothing(
    published: AutoProject, github: FakeGitHub, beflow
) -> None:
    github.add_issue("Other", labels=["beflow"])  # 1: what "Fixes #1" would close
    said = "Fixes #1, closes org/repo#3 @org/security-team @user"
    github.add_issue(
        "Add notes", labels=["beflow", "beflow:ready"], body=f"acp-test: write notes.txt first\nacp-test: say {said}"
    )
    done = beflow("--auto", "2")
    assert done.exit_code == 0, done.stderr
    (pull,) = github.pulls.values()
    assert said in pull["body"]  # the words, quoted
    assert acted_on(pull["body"]) == ["Closes #2"]  # only beflow's own line acts
    assert all(acted_on(c["body"]) == [] for n in (1, 2) for c in github.comments_of(n))
