"""A fleet on the GitHub tracker (the fake GitHub): ready issues become branches on ``origin`` and pull requests,
each exactly once, whichever worker runs them."""

from __future__ import annotations

import contextlib
import signal
import subprocess

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from beflow.trackers import Status
from tests.fleet.conftest import Fleet, ask
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import git
from tests.support.waiting import eventually


def test_two_workers_turn_ready_github_issues_into_branches_and_pull_requests_once(
    fleet: Fleet, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)  # (this test's own look at the tracker)
    project = fleet.project
    origin = project.directory.parent / "origin.git"
    git(project.directory.parent, "clone", "-q", "--bare", str(project.directory), str(origin))
    git(project.directory, "remote", "add", "origin", str(origin))
    project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url}, after_run={"pull_request": True}
    )
    numbers = [
        github.add_issue(f"Note {n}", labels=["beflow", "beflow:ready"], body=f"acp-test: write note-{n}.txt fleet")
        for n in range(3)
    ]
    env = {"GITHUB_TOKEN": TOKEN}
    workers = [fleet.worker(name, env=env) for name in ("w1", "w2")]
    watch = fleet.beflow("watch", "--json", env=env)
    try:
        proposed_once(fleet, github, numbers, watch)
    finally:
        for process in (watch, *workers):
            process.send_signal(signal.SIGTERM)
            process.wait(60)

        async def ended(client: Client) -> None:  # (their ids name octo/hello: no later test may meet them)
            for n in numbers:
                with contextlib.suppress(RPCError):
                    await client.get_workflow_handle(fleet.workflow(str(n))).terminate("the test is over")

        ask(fleet.address, ended)


def proposed_once(fleet: Fleet, github: FakeGitHub, numbers: list[int], watch: subprocess.Popen[str]) -> None:
    project, origin = fleet.project, fleet.project.directory.parent / "origin.git"

    def proposed() -> bool:
        heads = sorted(pull["head"]["ref"] for pull in github.pulls.values())
        return heads == [f"beflow/{n}" for n in numbers] and all(fleet.in_review(str(n)) for n in numbers)

    eventually(proposed, "a pull request for each issue, each workflow waiting in review", timeout=180, alive=watch)
    for n, number in enumerate(numbers):
        (record,) = project.records(str(number))
        assert record.outcome == "succeeded" and record.pull_request
        pushed = git(origin, "rev-parse", f"refs/heads/beflow/{number}").strip()
        assert pushed == record.commit
        assert git(origin, "show", f"{pushed}:note-{n}.txt") == "fleet"
        assert project.issue(str(number)).status == Status.REVIEW
    assert len(github.pulls) == 3  # one each, whoever ran it
    assert {fleet.state(str(n))["worker"] for n in numbers} <= {"w1", "w2"}
