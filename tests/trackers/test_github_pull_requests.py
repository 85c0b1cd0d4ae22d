"""After a run on a GitHub issue: the branch is pushed to ``origin`` and a pull request opened — then updated, not
duplicated, by a retry — and the token is in no argv, remote URL, git config, file or output."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

from beflow.codehosts import open_code_host
from beflow.codehosts.github import GitHubCodeHost
from beflow.config import load_project
from beflow.git import PushAuth
from beflow.trackers import open_tracker
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
        after_run={"pull_request": True},
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


def test_pull_requests_need_a_code_host(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(after_run={"pull_request": True})
    key = auto_project.new_issue("say hi")
    refused = beflow("--auto", key)
    assert refused.exit_code == 2 and "pull requests need a code host" in refused.stderr


def credential_fill(directory: Path, auth: PushAuth, url: str) -> str:
    """What git's credential machinery answers for ``url`` with beflow's push settings (and nothing else)."""
    parsed = urlparse(url)
    options = [arg for key, value in auth.config for arg in ("-c", f"{key}={value}")]
    env = {**os.environ, **(auth.env or {}), "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": ""}
    done = subprocess.run(
        ["git", *options, "credential", "fill"],
        cwd=directory,
        env=env,
        input=f"protocol={parsed.scheme}\nhost={parsed.netloc}\npath={parsed.path.lstrip('/')}\n\n",
        capture_output=True,
        text=True,
    )
    return done.stdout


def test_git_gets_the_token_from_beflows_credential_helper_for_exactly_its_host(published: AutoProject) -> None:
    project = load_project(published.config_path)
    opened = open_code_host(project, open_tracker(project))
    assert isinstance(opened, GitHubCodeHost)
    host = web_host(opened.api.base_url)  # github.com for the public API; here the fake's
    port = urlparse(opened.api.base_url).port
    netloc = f"{host}:{port}" if port else host
    url = f"https://{netloc}/octo/hello.git"
    with opened.git_credentials(url) as auth:
        (helper,) = [Path(value.lstrip("!").strip("'")) for key, value in auth.config if value]
        assert TOKEN not in helper.read_text()  # the script holds no secret
        assert all(TOKEN not in value for _, value in auth.config)  # nor git's settings (argv of a `git -c`)
        answer = credential_fill(published.directory, auth, url)
        assert "username=x-access-token\n" in answer and f"password={TOKEN}\n" in answer
        # The same helper, asked for another host (a redirect, a rewritten URL), another port or plain http: nothing.
        for other in (
            "https://elsewhere.example.com/octo/hello.git",
            f"https://{host}:1/octo/hello.git",
            f"http://{netloc}/octo/hello.git",
        ):
            assert TOKEN not in credential_fill(published.directory, auth, other)
    assert not helper.exists()  # gone after the push
    with opened.git_credentials("https://elsewhere.example.com/octo/hello.git") as other:
        assert other.env is None and other.config == ()  # another host never sees it
    with opened.git_credentials(f"git@{host}:octo/hello.git") as ssh:
        assert ssh.env is None


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
