"""The GitHub tracker against a fake GitHub (real HTTP, checked against GitHub's OpenAPI description): issues and
status labels, marked comments, ETags, pagination, rate limits, token and access errors — through the same
``beflow issues`` commands as the local tracker."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from beflow.config import load_project
from beflow.errors import ConfigError, LockedError, UsageError
from beflow.ops.operations import REGISTRY, Context
from beflow.trackers import Status
from beflow.trackers.base import FlagsIssues, MetersRequests, SetsPriority
from beflow.trackers.claims import ClaimLost
from beflow.trackers.github import GitHubTracker
from beflow.trackers.github_api import RateLimited, Unavailable
from tests.support.github import TOKEN, FakeGitHub
from tests.support.github import github_tracker as tracker
from tests.support.projects import AutoProject, config_file


def test_issues_commands_work_on_github_as_locally(gh: AutoProject, github: FakeGitHub, beflow) -> None:
    made = beflow("issues", "new", "Fix the login crash", "--label", "bug", "--priority", "1", "--body", "Steps")
    assert made.exit_code == 0, made.stderr
    assert made.stdout == "Created issue 1 (ready): https://github.com/octo/hello/issues/1\n"
    assert set(github.issue_labels(1)) == {"beflow", "bug", "beflow:ready", "priority:1"}
    assert beflow("issues", "new", "Later", "--status", "open").exit_code == 0

    listing = json.loads(beflow("issues", "list", "--json").stdout)
    assert [(i["key"], i["status"], i["priority"], i["labels"]) for i in listing["issues"]] == [
        ("1", "ready", 1, ["beflow", "bug"]),
        ("2", "open", 2, ["beflow"]),
    ]
    assert beflow("issues", "comment", "1", "Looking at it").exit_code == 0
    github.add_comment(1, "From a person")
    shown = json.loads(beflow("issues", "show", "1", "--json").stdout)
    assert [(c["author"], c["text"]) for c in shown["comments"]] == [
        ("octocat", "Looking at it"),
        ("alice", "From a person"),
    ]
    assert github.comments_of(1)[0]["body"].endswith("<!-- beflow -->")  # beflow's own comments are marked

    assert beflow("issues", "set-status", "1", "in_progress").exit_code == 0
    assert "beflow:in-progress" in github.issue_labels(1) and "beflow:ready" not in github.issue_labels(1)
    assert beflow("issues", "set-status", "1", "review", "--note", "Done, have a look").exit_code == 0
    assert github.issues[1]["state"] == "open" and "beflow:review" in github.issue_labels(1)
    bad = beflow("issues", "set-status", "2", "review")
    assert bad.exit_code == 2 and "cannot go from open to review" in bad.stderr

    assert beflow("issues", "close", "1").exit_code == 0
    assert (github.issues[1]["state"], github.issues[1]["state_reason"]) == ("closed", "not_planned")
    assert not [n for n in github.issue_labels(1) if n.startswith("beflow:")]
    assert json.loads(beflow("issues", "show", "1", "--json").stdout)["status"] == "closed"
    assert beflow("issues", "reopen", "1").exit_code == 0
    assert github.issues[1]["state"] == "open" and "beflow:ready" in github.issue_labels(1)
    done = json.loads(beflow("issues", "list", "--status", "ready", "--json").stdout)
    assert [i["key"] for i in done["issues"]] == ["1"]


def test_a_closed_as_completed_issue_is_done_and_pull_requests_are_never_issues(
    gh: AutoProject, github: FakeGitHub
) -> None:
    github.add_issue("Shipped", labels=["beflow"], state="closed", state_reason="completed")
    github.add_issue("Dropped", labels=["beflow"], state="closed", state_reason="not_planned")
    github.add_issue("A pull request", labels=["beflow", "beflow:ready"], pull=True)
    github.add_issue("Not beflow's", labels=["bug", "beflow:ready"])
    github.add_issue("Ready", labels=["beflow", "beflow:ready", "priority:0"])

    issues = tracker(gh).listing().issues

    assert [(i.key, i.status, i.priority) for i in issues] == [
        ("1", Status.DONE, 2),
        ("2", Status.CLOSED, 2),
        ("5", Status.READY, 0),
    ]
    assert [i.key for i in tracker(gh).ready()] == ["5"]
    with pytest.raises(Exception, match="is a pull request"):
        tracker(gh).get("3")
    with pytest.raises(Exception, match="not beflow's"):
        tracker(gh).get("4")


def test_polling_is_conditional_and_paginated(gh: AutoProject, github: FakeGitHub) -> None:
    for n in range(130):
        github.add_issue(f"Issue {n}", labels=["beflow", "beflow:ready"])
    github.issues[1]["labels"].append(github.label("priority:1"))
    opened = tracker(gh)

    first = opened.ready()
    used = github.rate_remaining
    pages = github.requests("GET", "/repos/octo/hello/issues")
    again = opened.ready()

    assert len(first) == 130 and first[0].key == "1"
    assert len(pages) == 2 and pages[1].query["page"] == "2"
    assert [i.key for i in again] == [i.key for i in first]
    repeats = github.requests("GET", "/repos/octo/hello/issues")[2:]
    assert [s.status for s in repeats] == [304, 304]  # both pages unchanged: nothing counted
    assert github.rate_remaining == used  # every answer was a 304: a quiet tick costs no rate limit
    assert len(github.requests("GET", "/repos/octo/hello/git/")) == 2  # claims: one listing per tick, not one per issue


def test_rate_limits_are_waited_out_or_fail_fast_without_hammering(gh: AutoProject, github: FakeGitHub) -> None:
    github.add_issue("One", labels=["beflow", "beflow:ready"])
    opened = tracker(gh)
    opened.api.inline_wait = 5.0
    github.fail(429, headers={"Retry-After": "1"}, body={"message": "You have exceeded a secondary rate limit"})
    start = time.monotonic()
    assert [i.key for i in opened.listing().issues] == ["1"]
    assert time.monotonic() - start >= 1.0  # waited as told, then succeeded

    reset = int(time.time()) + 600
    github.fail(
        403,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)},
        body={"message": "API rate limit exceeded", "documentation_url": "https://docs.github.com"},
    )
    with pytest.raises(RateLimited, match="rate limit"):
        opened.listing()
    sent = len(github.seen)
    with pytest.raises(RateLimited):
        opened.get("1")
    assert len(github.seen) == sent  # the gate is closed: nothing is sent until the reset


def test_token_and_access_problems_name_the_setting(gh: AutoProject, github: FakeGitHub, beflow, monkeypatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_wrong")
    refused = beflow("issues", "list")
    assert refused.exit_code == 2
    assert "GitHub refused the token in $GITHUB_TOKEN (401 Bad credentials)" in refused.stderr
    assert "ghp_wrong" not in refused.stderr + refused.stdout

    monkeypatch.delenv("GITHUB_TOKEN")
    monkeypatch.setenv("PATH", "/nonexistent")  # no gh either
    missing = beflow("issues", "list")
    assert missing.exit_code == 2 and "no GitHub token: $GITHUB_TOKEN is not set" in missing.stderr

    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    gh.configure(tracker={"kind": "github", "repo": "octo/renamed", "api_url": github.url})
    gone = beflow("issues", "list")
    assert gone.exit_code == 2
    assert "tracker.repo: octo/renamed is not a repository this token can see (404)" in gone.stderr


def test_a_one_shot_command_that_github_fails_says_what_the_user_does_not_that_beflow_tries_again(
    gh: AutoProject, github: FakeGitHub, beflow
) -> None:
    """The fix of a command that ended on GitHub's trouble is the user's to do: only `beflow watch` looks again by
    itself (and it shows the error, not the fix)."""
    github.fail(502, times=3)  # a GET is tried three times
    broken = beflow("issues", "list")
    github.fail(403, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) + 600)})
    limited = beflow("issues", "list")
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    gh.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": dead})
    silent = beflow("issues", "list")

    assert broken.exit_code == limited.exit_code == silent.exit_code == 1
    fixes = [
        next(line for line in r.stderr.splitlines() if line.startswith("fix: ")) for r in (broken, limited, silent)
    ]
    assert fixes[0] == (
        "fix: GitHub is having trouble (https://www.githubstatus.com): run the command again in a few minutes "
        "(`beflow watch` keeps looking by itself)."
    )
    assert re.fullmatch(
        r"fix: Run the command again after \d\d:\d\d:\d\d, when GitHub allows it \(`beflow watch` waits by itself\)\.",
        fixes[1],
    )
    assert fixes[2] == (
        "fix: Check the network (and tracker.api_url), then run the command again (`beflow watch` keeps looking by "
        "itself)."
    )


def test_a_claim_is_exclusive_and_released(gh: AutoProject, github: FakeGitHub) -> None:
    github.add_issue("One", labels=["beflow", "beflow:ready"])
    first, second = tracker(gh), tracker(gh)
    claim = first.claim("1", owner="watcher a")
    assert github.refs.keys() == {"refs/beflow/claims/1"}
    with pytest.raises(LockedError, match="claimed by watcher a"):
        second.claim("1", owner="watcher b")
    assert second.holder("1") is not None and second.holder("1").owner == "watcher a"  # type: ignore[union-attr]
    assert [i.key for i in second.ready()] == []
    claim.release()
    assert second.holder("1") is None
    with second.claim("1", owner="watcher b"):
        assert first.holder("1").owner == "watcher b"  # type: ignore[union-attr]


def test_its_rate_limit_is_a_capability_asked_for_by_isinstance(gh: AutoProject, github: FakeGitHub) -> None:
    """The dashboard's health shows what is left of GitHub's rate limit: asked of the tracker as a capability."""
    github.add_issue("One", labels=["beflow", "beflow:ready"])
    github_tracker = tracker(gh)
    assert isinstance(github_tracker, MetersRequests)
    github_tracker.listing()
    budget = github_tracker.rate_budget()
    assert budget.remaining == github.rate_remaining and budget.limited == 0


def test_a_config_without_token_env_name_is_refused(repo: Path) -> None:
    config_file(repo).write_text(json.dumps({"tracker": {"kind": "github", "repo": "a/b", "token_env": "A B"}}))
    with pytest.raises(ConfigError, match="token_env"):
        load_project(config_file(repo))


def test_doctor_checks_the_token_the_repository_and_the_labels(gh: AutoProject, github: FakeGitHub, beflow) -> None:
    shown = beflow("doctor")
    assert "labels not created yet: beflow, beflow:ready" in shown.stdout
    tracker(gh).ensure_labels()
    assert "GitHub issues of octo/hello labelled beflow: 0 issues" in beflow("doctor").stdout
    gh.configure(tracker={"kind": "github", "repo": "octo/gone", "api_url": github.url})
    broken = beflow("doctor")
    assert broken.exit_code != 0 and "tracker.repo: octo/gone is not a repository this token can see" in broken.stdout


def take_over(other: GitHubTracker, current: str) -> str:
    """What another machine's take-over leaves the claim ref at: its own lease, on top of ``current``."""
    return other.leases._lease_commit("1", other.leases._new_lease("watcher b"), current)


def test_a_lease_is_renewed_and_a_taken_over_lease_is_lost(gh: AutoProject, github: FakeGitHub) -> None:
    github.add_issue("One", labels=["beflow", "beflow:ready"])
    claim = tracker(gh).claim("1", owner="watcher a")
    before = github.refs["refs/beflow/claims/1"]
    claim.renew()
    assert github.refs["refs/beflow/claims/1"] != before  # a fast-forward to a fresh lease
    github.refs["refs/beflow/claims/1"] = take_over(tracker(gh), before)
    with pytest.raises(ClaimLost, match="taken over"):
        claim.renew()


def test_a_run_that_loses_its_lease_is_cancelled_and_leaves_the_issue_alone(
    gh: AutoProject, github: FakeGitHub, beflow
) -> None:
    gh.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 1.5})
    env_dump = gh.directory.parent / "agent-env.txt"
    wrapper = gh.directory.parent / "agent.sh"
    wrapper.write_text(f'#!/bin/sh\nenv > "{env_dump}"\nexec {gh.config["agent"]["command"]} "$@"\n')
    wrapper.chmod(0o755)
    gh.configure(agent={"command": str(wrapper)})
    github.add_issue("Slow", labels=["beflow", "beflow:ready"], body="acp-test: say hi\nacp-test: sleep 30")

    def steal() -> None:
        deadline = time.monotonic() + 30
        while "refs/beflow/claims/1" not in github.refs or not env_dump.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        github.refs["refs/beflow/claims/1"] = take_over(other, github.refs["refs/beflow/claims/1"])

    other = tracker(gh)
    thief = threading.Thread(target=steal)
    thief.start()
    result = beflow("--auto", "1")
    thief.join()

    record = gh.only_record()
    assert record.outcome == "cancelled" and "lost the claim" in (record.stop_reason or "")
    assert "beflow:in-progress" in github.issue_labels(1)  # the new holder's: this run leaves it be
    assert TOKEN not in env_dump.read_text() and "GITHUB_TOKEN=" not in env_dump.read_text()
    assert TOKEN not in result.stdout + result.stderr
    for path in (gh.directory / ".beflow").rglob("*"):
        assert not path.is_file() or TOKEN.encode() not in path.read_bytes(), path


def test_init_labels_creates_the_labels_once(gh: AutoProject, github: FakeGitHub, beflow) -> None:
    made = beflow("init", "--labels")
    assert made.exit_code == 0, made.stderr
    assert "beflow, beflow:ready, beflow:in-progress, beflow:blocked, beflow:review, beflow:failed" in made.stdout
    assert set(github.labels) == {
        "beflow", "beflow:ready", "beflow:in-progress", "beflow:blocked", "beflow:review", "beflow:failed"
    }  # fmt: skip
    assert beflow("init", "--labels").stdout == "Every label beflow needs is there already.\n"
    assert beflow("init", "--github").stdout == "Every label beflow needs is there already.\n"  # (its former name)
    assert "--github" not in beflow("init", "--help").stdout


@pytest.mark.parametrize("option", ["--labels", "--github"])
def test_init_labels_refuses_the_local_tracker(auto_project: AutoProject, beflow, option: str) -> None:
    refused = beflow("init", option)
    assert refused.exit_code == 2
    assert "--labels: the tracker in " in refused.stderr and "(local issues in " in refused.stderr
    assert "has no labels to create" in refused.stderr


def test_the_repository_is_read_from_origin_when_left_out(gh: AutoProject, github: FakeGitHub) -> None:
    subprocess.run(["git", "remote", "add", "origin", "https://127.0.0.1/octo/hello.git"], cwd=gh.directory, check=True)
    gh.configure(tracker={"kind": "github", "api_url": github.url})
    assert tracker(gh).repo == "octo/hello"
    subprocess.run(
        ["git", "remote", "set-url", "origin", "git@elsewhere.example.com:x/y.git"], cwd=gh.directory, check=True
    )
    with pytest.raises(ConfigError, match=r"tracker\.repo: not set, and origin is git@elsewhere"):
        tracker(gh)


def test_the_api_url_comes_from_github_api_url_and_a_dead_network_is_unavailable(
    gh: AutoProject, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_API_URL", github.url)  # as GitHub Actions sets it
    gh.configure(tracker={"kind": "github", "repo": "octo/hello"})
    assert tracker(gh).listing().issues == []

    import socket

    with socket.socket() as probe:  # a port nothing listens on: the network is down for beflow
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    gh.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": dead})
    with pytest.raises(Unavailable, match=f"GitHub \\({dead}\\) does not answer"):
        tracker(gh).listing()


def test_a_priority_is_githubs_label_and_the_registry_says_so_rather_than_change_it(
    gh: AutoProject, github: FakeGitHub
) -> None:
    """The dashboard's queue order moves the local tracker's priorities; on GitHub a priority is a label a person
    sets there, and ``issue.set_priority`` says so with nothing changed."""
    github.add_issue("One", labels=["beflow", "beflow:ready", "priority:3"])
    github_tracker = tracker(gh)
    assert not isinstance(github_tracker, SetsPriority)
    context = Context(project=load_project(config_file(gh.directory)), actor="ann", tracker=github_tracker)
    with pytest.raises(UsageError, match=r"issue\.set_priority is the local tracker's") as refused:
        REGISTRY["issue.set_priority"].call(context, {"key": "1", "priority": 0})
    assert "priority:N" in str(refused.value.fix)
    assert github_tracker.get("1").priority == 3


def test_an_issue_is_flagged_with_a_label_under_the_status_prefix_and_one_comment(
    gh: AutoProject, github: FakeGitHub
) -> None:
    number = github.add_issue("Fix it", labels=["beflow", "beflow:review"])
    opened = tracker(gh)
    assert isinstance(opened, FlagsIssues) and opened.flag_label("needs-human") == "beflow:needs-human"

    flagged = opened.flag(str(number), "needs-human", "the checks still fail.")

    assert "beflow:needs-human" in flagged.labels and flagged.status == Status.REVIEW
    assert [c.text for c in flagged.comments] == ["the checks still fail."]
    again = opened.flag(str(number), "needs-human", "once more.")  # the label is not added twice
    assert github.issue_labels(number).count("beflow:needs-human") == 1 and len(again.comments) == 2


def test_a_question_blocks_the_issue_with_its_label_and_only_a_trusted_comment_answers_it(
    gh: AutoProject, github: FakeGitHub
) -> None:
    from beflow.ops import questions
    from beflow.records.record import Question, RunRecord
    from beflow.trackers.issue import utc_now

    github.add_issue("One", labels=["beflow", "beflow:in-progress"])
    mine = tracker(gh)
    question = Question(text="Ping @octocat? closes #2", choices=["yes"], asked=utc_now())
    mine.set_status("1", Status.BLOCKED, note=questions.question_comment("1", question, "r1", mine.inert))
    labels = github.issue_labels(1)
    assert "beflow:blocked" in labels and "beflow:in-progress" not in labels
    assert mine.get("1").status == Status.BLOCKED and [i.key for i in mine.ready()] == []
    posted = github.comments_of(1)[-1]["body"]
    assert "@octocat" not in posted and "#2" not in posted.replace("#\u20602", "")  # the agent's words, inert
    asking = RunRecord(id="r1", issue="1", mode="watch", agent="a", started_at=utc_now(), question=question)
    github.add_comment(1, "red, do it", author="mallory", association="NONE")  # a stranger: no answer
    assert questions.answer_of(mine, mine.get("1"), asking) is None
    github.add_comment(1, "blue", author="alice")
    answer = questions.answer_of(mine, mine.get("1"), asking)
    assert answer is not None and (answer.text, answer.author) == ("blue", "alice")
    mine.set_status("1", Status.IN_PROGRESS)  # the answer's run resumes it
    assert "beflow:in-progress" in github.issue_labels(1)
