"""A fleet on the GitHub tracker (the fake GitHub): ready issues become branches on ``origin`` and pull requests,
each exactly once, whichever worker runs them; a review on one of them is signalled to its workflow, which runs
the round and answers in the review's thread."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from beflow.trackers import Status
from tests.fleet.conftest import Fleet, ask
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import git
from tests.support.waiting import eventually


def test_two_workers_turn_ready_github_issues_into_pull_requests_once_and_a_review_into_a_round(
    fleet: Fleet, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)  # (this test's own look at the tracker)
    project = fleet.project
    project.add_origin()
    project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url},
        after_run={"pull_request": True},
        feedback={"settle": 0.5},
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
        reviewed(fleet, github, numbers[0], watch)
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


def reviewed(fleet: Fleet, github: FakeGitHub, number: int, watch: subprocess.Popen[str]) -> None:
    key = str(number)
    (pull,) = [n for n, p in github.pulls.items() if p["head"]["ref"] == f"beflow/{key}"]
    review = github.submit_review(pull, comments=[{"path": "note-0.txt", "line": 1, "body": "acp-test: write b.txt b"}])

    def round_done() -> bool:
        finished = [r for r in fleet.project.records(key) if r.finished]
        return len(finished) == 2 and fleet.in_review(key) and fleet.state(key)["round"] == 1

    eventually(round_done, "the review's round run by the workflow", timeout=120, alive=watch)
    latest = max(fleet.project.records(key), key=lambda r: r.started_at)
    assert latest.round == 1 and latest.outcome == "succeeded"
    origin = fleet.project.directory.parent / "origin.git"
    assert git(origin, "rev-parse", f"refs/heads/beflow/{key}").strip() == latest.commit  # pushed on top
    assert git(origin, "show", f"{latest.commit}:b.txt") == "b"
    thread = [c for c in github.review_comments_of(pull) if c["pull_request_review_id"] == review["id"]]
    replies = [c for c in github.review_comments_of(pull) if c.get("in_reply_to_id") == thread[0]["id"]]
    assert len(replies) == 1 and latest.commit is not None and latest.commit[:12] in replies[0]["body"]
    assert len(github.pulls) == 3  # the same pull request, updated


def test_a_worker_frozen_mid_run_publishes_nothing_once_the_fleet_gave_its_run_to_another(
    fleet: Fleet, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two machines (two checkouts of one origin): the first worker freezes (as if cut off from Temporal), the
    workflow gives the run to the second, which publishes; thawed, the first finds the run is no longer its own and
    writes nothing — the fleet's claim is the one authority, proven before every write."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    project = fleet.project
    origin = project.add_origin()
    project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url}, after_run={"pull_request": True}
    )
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(origin), str(other))
    (other / ".beflow").mkdir(exist_ok=True)
    (other / ".beflow" / "config.json").write_text(project.config_path.read_text())
    mark = tmp_path / "first-run"
    number = github.add_issue(
        "Frozen",
        labels=["beflow", "beflow:ready"],
        body=f"acp-test: run test -e {mark} && exit 0; touch {mark}; sleep 8\nacp-test: write result.txt x",
    )
    env = {"GITHUB_TOKEN": TOKEN}
    first = fleet.worker("w1", env=env)
    second: subprocess.Popen[str] | None = None
    try:
        assert fleet.beflow("watch", "--once", env=env).wait(60) == 0
        eventually(mark.exists, "the first worker's agent at work", alive=first)
        first.send_signal(signal.SIGSTOP)  # frozen: no heartbeat, no cleanup
        second = fleet.start_process("worker", "--id", "w2", "--json", cwd=other, env=env)
        eventually(lambda: len(github.pulls) == 1, "the second worker's pull request", timeout=90, alive=second)
        pushed = git(origin, "rev-parse", f"refs/heads/beflow/{number}").strip()
        first.send_signal(signal.SIGCONT)
        eventually(
            lambda: [r.finished for r in project.records(str(number))] == [True], "the first run ended", alive=first
        )
        (frozen,) = project.records(str(number))
        assert frozen.outcome in ("cancelled", "failed") and frozen.pull_request is None, frozen.stop_reason
        assert git(origin, "rev-parse", f"refs/heads/beflow/{number}").strip() == pushed  # pushed once
        assert len(github.pulls) == 1
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
                process.wait(60)

        async def ended(client: Client) -> None:
            with contextlib.suppress(RPCError):
                await client.get_workflow_handle(fleet.workflow(str(number))).terminate("the test is over")

        ask(fleet.address, ended)
