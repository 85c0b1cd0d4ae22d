"""What a fleet's worker reads itself before a run (in-process, no Temporal service: the steps a run activity takes
before its agent starts, called from the test): a review round's plan with the fix rounds its workflow counted, a
moved issue's earlier runs found by its stable id, reviews given on beflow's page, and the answer to a blocked
issue's question (none of which crosses Temporal)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from beflow.codehosts.base import Opened
from beflow.codehosts.github import GitHubCodeHost
from beflow.config import Config, GitHubCodeHostSettings, Project, load_project
from beflow.config import Feedback as FeedbackSettings
from beflow.events import RunEvent
from beflow.fleet.shapes import RunEnd, RunInput
from beflow.fleet.worker import FleetWorker, LaneHolds, RunLanes
from beflow.records.record import Consumed, RunRecord
from beflow.records.reviews import PageReviews
from beflow.records.store import RunStore
from beflow.run.request import RunRequest
from beflow.trackers import LocalTracker, Status
from beflow.trackers.github_api import Api
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject, git
from tests.watch.test_questions import _asked

ENGINE = {"kind": "temporal", "address": "127.0.0.1:7233", "task_queue": "beflow"}


@pytest.fixture
def tracker(repo: Path) -> LocalTracker:
    return LocalTracker(repo / ".beflow" / "issues", repo)


#: Failed checks are feedback (feedback.checks), fix rounds at most two.
CHECKS = {"checks": True, "settle": 0.1, "max_fix_rounds": 2}


@pytest.fixture
def host(github: FakeGitHub) -> Iterator[GitHubCodeHost]:
    api = Api(github.url, TOKEN)
    settings = GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url=github.url)
    yield GitHubCodeHost(settings, "octo/hello", api, None, feedback=FeedbackSettings.model_validate(CHECKS))
    api.close()


def worker(repo: Path, tracker: LocalTracker, host: GitHubCodeHost | None = None, **config: Any) -> FleetWorker:
    project = Project(config=Config.model_validate({"engine": ENGINE, **config}), config_path=None, directory=repo)
    return FleetWorker(project, Opened(tracker, host), lanes=1, name="w1")


def in_review(tracker: LocalTracker) -> str:
    key = tracker.create("Fix it").key
    tracker.set_status(key, Status.IN_PROGRESS)
    return tracker.set_status(key, Status.REVIEW).key


def round_of(fleet: FleetWorker, key: str, number: int, **run: Any) -> tuple[RunRequest, RunEnd | None, bool]:
    request = RunRequest(key=key, mode="watch")
    ended, flagged = fleet._round(
        request, RunInput(key=key, workflow_id=f"beflow/t/{key}", attempt=1, round=number, **run)
    )
    return request, ended, flagged


def test_failed_checks_start_fix_rounds_until_the_workflows_count_is_spent_then_the_issue_is_flagged(
    repo: Path, tracker: LocalTracker, github: FakeGitHub, host: GitHubCodeHost
) -> None:
    key = in_review(tracker)
    number = github.open_pull(f"beflow/{key}")
    github.add_check_run(github.pulls[number]["head"]["sha"], "tests", conclusion="failure")
    fleet = worker(repo, tracker, host, feedback=CHECKS)

    request, ended, flagged = round_of(fleet, key, 2, fix_rounds=1)
    assert ended is None and not flagged and [p.kind for p in request.feedback] == ["check"]

    # The rounds ran on other machines (no record here): the workflow's count is what spends them.
    request, ended, flagged = round_of(fleet, key, 3, fix_rounds=2)
    assert ended is not None and ended.action == "skipped" and ended.flagged and flagged
    assert ended.awaits_feedback  # (the issue stays in review: a person's words still start rounds)
    assert "needs-human" in tracker.get(key).labels and request.feedback == []


def test_a_round_of_a_moved_issue_knows_what_its_runs_under_the_former_key_answered(
    repo: Path, tracker: LocalTracker
) -> None:
    key = in_review(tracker)
    page = PageReviews(repo)
    answered, left = (
        page.add(key, author="ada", body="rename it", commit="a" * 40),
        page.add(key, author="ada", body="and document it", commit="a" * 40),
    )
    # The former key's round answered the first comment, on the branch it was given then.
    git(repo, "switch", "-q", "-c", "beflow/OLD-7")
    git(repo, "commit", "-q", "--allow-empty", "-m", "round 1")
    commit = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "switch", "-q", "main")
    store = RunStore(repo)
    for number, pieces in ((0, []), (1, [Consumed(id=answered.id, kind="review", author="ada")])):
        record = RunRecord(
            id=f"20260101-00000{number}-OLD-7-abcd",
            issue="OLD-7",
            issue_id="lin-7",
            mode="watch",
            agent="test",
            round=number,
            branch="beflow/OLD-7",
            commit=commit,
            feedback=pieces,
            started_at=dt.datetime.now(dt.UTC),
            outcome="succeeded",
        )
        store.create(record, "prompt")
    fleet = worker(repo, tracker)

    request, ended, _ = round_of(fleet, key, 2, issue_id="lin-7")
    assert ended is None and [p.id for p in request.feedback] == [left.id]  # the page's comment, not yet answered
    request, _, _ = round_of(fleet, key, 2)  # (without the id: the former key's round is not found)
    assert [p.id for p in request.feedback] == [answered.id, left.id]


def test_a_run_resuming_an_answered_question_reads_the_answer_and_one_without_an_answer_does_not_start(
    repo: Path, tracker: LocalTracker
) -> None:
    fleet = worker(repo, tracker, watch={"max_attempts": 2})
    key, asking = _asked(repo, tracker)
    request = RunRequest(key=key, mode="watch", attempt=1)
    ended = fleet._answer(request)
    assert ended is not None and ended.action == "skipped" and request.answer is None

    tracker.comment(key, "Blue, please.", author="ada")
    assert fleet._answer(request) is None
    assert request.answer is not None and (request.answer.text, request.answer.run) == ("Blue, please.", asking.id)
    assert (request.attempt, request.final, request.question) == (2, True, asking.question)


def test_an_answered_run_whose_worker_died_is_taken_up_with_the_same_answer(repo: Path, tracker: LocalTracker) -> None:
    fleet = worker(repo, tracker, watch={"max_attempts": 3})
    key, asking = _asked(repo, tracker)
    tracker.comment(key, "Blue, please.", author="ada")
    first = RunRequest(key=key, mode="watch")
    assert fleet._answer(first) is None and first.answer is not None
    # The answered run started (the issue in progress, its record written), then its worker was killed.
    tracker.set_status(key, Status.IN_PROGRESS)
    killed = RunRecord(
        id=f"20260101-000009-{key}-beef",
        issue=key,
        mode="watch",
        agent="test",
        attempt=asking.attempt,
        started_at=dt.datetime.now(dt.UTC),
        answer=first.answer,
    )
    killed.close("cancelled", "beflow (pid 1) was killed before the run finished")
    store = RunStore(repo)
    store.create(killed, "prompt")
    store.save(killed)

    again = RunRequest(key=key, mode="watch")
    assert fleet._answer(again, resumed=True) is None
    assert again.answer == first.answer and again.question == asking.question and again.attempt == asking.attempt
    plain = RunRequest(key=key, mode="watch")
    killed.answer = None
    store.save(killed)
    assert fleet._answer(plain, resumed=True) is None and plain.answer is None  # (no answer: a plain run)


def test_a_best_of_n_lends_its_candidates_its_workflows_lane_then_the_workers_free_ones_and_no_claim_takes_them() -> (
    None
):
    holds = LaneHolds(3)
    assert holds.take("beflow/t/1", 0.0)
    holds.running("beflow/t/1")  # (its run activity started: the lane its workflow claimed)
    lanes = RunLanes(holds, "beflow/t/1")
    inside: list[int] = []
    entered, leave = [anyio.Event() for _ in range(4)], [anyio.Event() for _ in range(4)]

    async def candidate(n: int) -> None:
        async with lanes:
            inside.append(n)
            entered[n].set()
            await leave[n].wait()
            inside.remove(n)

    async def lent() -> None:
        async with anyio.create_task_group() as tasks:
            for n in range(3):
                tasks.start_soon(candidate, n)
                await entered[n].wait()
            # Three lanes in use (the workflow's and the two others): another workflow's claim finds none, and a
            # fourth candidate waits.
            assert holds.free_now(0.0) == 0 and not holds.take("beflow/t/2", 0.0)
            tasks.start_soon(candidate, 3)
            await anyio.wait_all_tasks_blocked()
            assert sorted(inside) == [0, 1, 2]
            leave[0].set()  # (the workflow's own lane: given back, the fourth takes the lane given back)
            await entered[3].wait()
            assert sorted(inside) == [1, 2, 3] and holds.free_now(0.0) == 0
            for n in (1, 2, 3):
                leave[n].set()
        # Every lane lent is given back: the worker's two others are free for claims again; its workflow's is not.
        assert holds.free_now(0.0) == 2 and list(holds.held) == ["beflow/t/1"]

    anyio.run(lent)


#: Candidate 1 fails the judge's check, candidate 2 passes it.
PICKY = (
    "{{ issue.body }}\n{% if candidate == 1 %}acp-test: write app.txt broken\\n\n"
    "{% else %}acp-test: write app.txt ok\\n\n{% endif %}"
)


def test_a_worker_runs_an_issue_asking_for_candidates_as_best_of_n_in_its_lanes_and_judges_once(
    auto_project: AutoProject,
) -> None:
    auto_project.configure(engine=ENGINE, prompt=PICKY, attempts={"judge": {"checks": ["grep -qx ok app.txt"]}})
    project = load_project(auto_project.config_path)
    tracker = LocalTracker(auto_project.directory / ".beflow" / "issues", auto_project.directory)
    key = tracker.create(title="Make app ok", body="", labels=["attempts:2"]).key
    fleet = FleetWorker(project, Opened(tracker, None), lanes=2, name="w1")
    assert fleet.lanes.take(f"beflow/t/{key}", 0.0)
    fleet.lanes.running(f"beflow/t/{key}")  # (as its run activity holds it)
    request = RunRequest(key=key, mode="watch", only_if_ready=True, owner="beflow worker w1")
    heard: list[RunEvent] = []

    judged = anyio.run(fleet._execute, project, request, heard.append, lambda: None, f"beflow/t/{key}")

    records = {r.candidate: r for r in auto_project.records(key)}
    assert sorted(records) == [0, 1, 2] and records[0].id == judged.id
    assert [records[n].branch for n in (1, 2)] == [f"beflow-attempts/{key}/c1", f"beflow-attempts/{key}/c2"]
    assert judged.outcome == "succeeded" and [row.chosen for row in judged.candidates] == [False, True]
    assert judged.commit == records[2].commit == git(auto_project.directory, "rev-parse", f"beflow/{key}").strip()
    assert tracker.get(key).status == Status.REVIEW
    assert fleet.lanes.free_now(0.0) == 1  # (the workflow's lane is its run activity's to free)
