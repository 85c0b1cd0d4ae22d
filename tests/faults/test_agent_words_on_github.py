"""What an agent says on GitHub through beflow's own server (``mcp.self``: comments, progress lines, follow-ups)
and in its final message: masked with every secret of its run, a token beflow got from ``gh auth token`` too; inert
(no mention pings, no reference links or closes an issue); and its follow-ups are open and not urgent whatever
their labels. Each run is beflow as a real process, the pinned acpx, the test agent and the fake GitHub
(docs/safety.md)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from beflow.mcp.acp import MASK
from tests.faults.conftest import beflow_run
from tests.support.github import TOKEN, FakeGitHub, acted_on
from tests.support.projects import SECRET_ENV, SECRET_HEADER, AutoProject

pytestmark = pytest.mark.slow

#: Closing keywords, references and mentions, as an issue's planted instructions would have the agent say them.
SAID = "Fixes #1, closes octo/hello#1, see GH-1; cc @octocat @org/security-team"


def directive(*lines: str) -> str:
    return "\n".join(f"acp-test: {line}" for line in lines)


def call(tool: str, arguments: dict[str, object]) -> str:
    return f"mcp-call beflow {tool} {json.dumps(arguments)}"


def active(text: str) -> list[str]:
    """What GitHub would act on in ``text`` outside code: closing keywords and mentions, then issue references."""
    prose = re.sub(r"^(`{3,})[^\n]*\n.*?^\1`*[ \t]*$", "", text, flags=re.S | re.M)  # fenced blocks
    prose = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", "", prose)  # inline code
    return acted_on(text) + re.findall(r"(?<![\w`])(?:[\w.-]+/[\w.-]+)?#\d+|\bGH-\d+", prose)


@pytest.fixture
def on_github(auto_project: AutoProject, github: FakeGitHub) -> AutoProject:
    auto_project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url}, mcp={"enabled": True, "self": True}
    )
    return auto_project


def fake_gh(directory: Path) -> dict[str, str]:
    """A ``gh`` on PATH that answers ``gh auth token`` with the token, and no token in the environment: beflow's
    tracker takes it from ``gh``, so it is in no variable."""
    directory.mkdir()
    gh = directory / "gh"
    gh.write_text(f'#!/bin/sh\nif [ "$1 $2" = "auth token" ]; then echo {TOKEN}; exit 0; fi\nexit 1\n')
    gh.chmod(0o755)
    return {"GITHUB_TOKEN": "", "PATH": f"{directory}{os.pathsep}{os.environ['PATH']}"}


def test_secrets_in_an_agents_words_are_masked_on_github_the_token_from_gh_too(
    on_github: AutoProject, github: FakeGitHub, tmp_path: Path, no_leftover_processes: None
) -> None:
    said = f"token {TOKEN}, tools key {SECRET_ENV}, docs {SECRET_HEADER}"
    github.add_issue(
        "Fix the crash",
        labels=["beflow", "beflow:ready"],
        body=directive(
            call("issue_comment", {"text": f"comment: {said}"}),
            call("run_progress", {"text": f"progress: {said}"}),
            call("issue_new", {"title": f"Follow up on {TOKEN}", "body": f"follow-up: {said}"}),
            "write notes.txt hello",
        ),
    )

    done = beflow_run(on_github, "--auto", "1", "--json", env=fake_gh(tmp_path / "bin"))

    assert done.code == 0, done.stdout + done.stderr
    record = on_github.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    masked = f"token {MASK}, tools key {MASK}, docs {MASK}"
    assert [note.text for note in record.progress] == [f"progress: {masked}"]
    comments = [c["body"] for c in github.comments_of(1)]
    assert [c for c in comments if c.startswith(f"comment: {masked}\n")], comments
    (follow_up,) = [n for n in github.issues if n != 1]
    assert github.issues[follow_up]["title"] == f"Follow up on {MASK}"
    assert (github.issues[follow_up]["body"] or "").startswith(f"follow-up: {masked}")
    everything = [c["body"] for n in github.issues for c in github.comments_of(n)]
    for secret in (TOKEN, SECRET_ENV, SECRET_HEADER):
        assert [text for text in everything if secret in text] == []
        assert [n for n in github.issues if n != 1 and secret in json.dumps(github.issues[n])] == []
        assert secret not in done.stdout + done.stderr
    assert on_github.secrets_in_records() == []
    assert TOKEN not in "".join(p.read_text("utf-8", "replace") for p in on_github.run_dir(record).rglob("*.json*"))


def test_the_code_hosts_token_from_gh_is_masked_in_an_agents_words_with_the_local_tracker(
    auto_project: AutoProject, github: FakeGitHub, tmp_path: Path, no_leftover_processes: None
) -> None:
    # The issues are local; GitHub is the code host alone, its token from `gh auth token` (in no variable). An agent
    # running as the user can ask `gh` too: what it then says through beflow's server is masked all the same.
    auto_project.add_origin()
    auto_project.configure(
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url},
        after_run={"pull_request": True},
        mcp={"enabled": True, "self": True},
    )
    said = f"the token is {TOKEN}"
    key = auto_project.new_issue(
        call("issue_comment", {"text": f"comment: {said}"}),
        call("run_progress", {"text": f"progress: {said}"}),
        call("issue_new", {"title": f"Follow up on {TOKEN}", "body": f"follow-up: {said}"}),
        "write notes.txt hello",
    )

    done = beflow_run(auto_project, "--auto", key, "--json", env=fake_gh(tmp_path / "bin"))

    assert done.code == 0, done.stdout + done.stderr
    record = auto_project.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    (pull,) = github.pulls.values()  # the code host took the token from `gh`
    assert [note.text for note in record.progress] == [f"progress: the token is {MASK}"]
    comments = [c.text for c in auto_project.issue(key).comments]
    assert [c for c in comments if c.startswith(f"comment: the token is {MASK}")], comments
    (follow_up,) = [issue for issue in auto_project.tracker.listing().issues if issue.key != key]
    assert follow_up.title == f"Follow up on {MASK}" and TOKEN not in follow_up.body
    runs = auto_project.directory / ".beflow" / "runs"
    assert [p for p in runs.rglob("*") if p.is_file() and TOKEN in p.read_text("utf-8", "replace")] == []
    assert TOKEN not in done.stdout + done.stderr and TOKEN not in pull["body"]


def test_an_agents_words_act_on_nothing_on_github_and_its_follow_up_is_open_and_not_urgent(
    on_github: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    on_github.add_origin()
    on_github.configure(after_run={"pull_request": True, "closes_issue": True})
    github.add_issue("Other", labels=["beflow"])  # 1: what the agent's words would close, link or notify about
    github.add_issue(
        "Add notes",
        labels=["beflow", "beflow:ready"],
        body=directive(
            call("issue_comment", {"text": f"comment: {SAID}"}),
            call(
                "issue_new",
                {"title": f"Later: {SAID}", "body": SAID, "labels": ["beflow:ready", "priority:0"], "priority": 0},
            ),
            "write notes.txt first",
            f"say {SAID}",
        ),
    )

    done = beflow_run(on_github, "--auto", "2", env={"GITHUB_TOKEN": TOKEN})

    assert done.code == 0, done.stdout + done.stderr
    record = on_github.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    # The final message, quoted in the pull request and the run's comment: only beflow's own line acts.
    (pull,) = github.pulls.values()
    assert SAID in pull["body"]
    assert active(pull["body"]) == ["Closes #2", "#2"]
    # The agent's own comment and its follow-up: every word there, nothing that acts.
    agents = [c["body"] for c in github.comments_of(2) if c["body"].startswith("comment: ")]
    assert len(agents) == 1 and active(agents[0]) == [], agents
    assert agents[0].replace("\u2060", "").startswith(f"comment: {SAID}\n")  # as said, but for invisible joiners
    (follow_up,) = [n for n in github.issues if n not in (1, 2) and n not in github.pulls]
    issue = github.issues[follow_up]
    assert active(issue["title"]) == [] and active(issue["body"] or "") == []
    assert issue["title"].replace("\u2060", "") == f"Later: {SAID}"
    # Filed open and not urgent, whatever its labels said: a person decides both.
    assert sorted(github.issue_labels(follow_up)) == ["beflow"]
    # beflow's own comments (the outcome, the link to the follow-up) quote the agent: they act on nothing either.
    everything = [c["body"] for n in github.issues for c in github.comments_of(n)]
    assert len(everything) == 3 and [active(body) for body in everything] == [[], [], []], everything
    assert github.comments_of(1) == []  # nothing the agent said reached issue 1
