"""A round of an issue whose labels name an agent the config does not list (docs/config.md#agents): refused and said
once — one comment, one ``error`` event — however many ticks its feedback waits; said again when its labels change.
In process: a watch on the local tracker with a review given on the page; no agent ever starts."""

from __future__ import annotations

import datetime as dt

import anyio

from beflow.errors import BeflowError
from beflow.records.record import RunRecord
from beflow.records.reviews import PageReviews
from beflow.records.store import RunStore
from beflow.run.agent_choice import REFUSED, AgentRefused
from beflow.trackers import Issue, Status
from beflow.watch.refusals import Refusals
from tests.run.test_agent_choice import issue
from tests.support.projects import AutoProject, git
from tests.watch.test_dispatcher import Clock, fast, watching

STARTED = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_a_refused_round_is_said_once_over_many_ticks_and_again_when_its_labels_change(
    auto_project: AutoProject,
) -> None:
    auto_project.configure(watch=fast(), feedback={"settle": 1}, agents={"allowed": []})
    tracker = auto_project.tracker
    key = tracker.create("Fix it", labels=["agent:gemini"], status=Status.READY).key
    tracker.set_status(key, Status.IN_PROGRESS)
    tracker.set_status(key, Status.REVIEW)
    RunStore(auto_project.directory).create(
        RunRecord(
            id="20260101-100000-1", issue=key, mode="auto", agent="codex", outcome="succeeded", started_at=STARTED
        ),
        "prompt",
    )
    head = git(auto_project.directory, "rev-parse", "HEAD").strip()
    PageReviews(auto_project.directory).add(key, author="alice", body="rename it", commit=head, path=None, line=None)

    async def scenario() -> list[int]:
        clock = Clock()
        clock.advance(100)  # (the review settled)
        async with watching(auto_project, clock) as watch:
            await watch.until(lambda: bool(watch.of("error", key)))
            await watch.ticks(4)
            seen = [len(watch.of("error", key)), len(watch.of("dispatched", key))]
            for path in (auto_project.directory / ".beflow" / "issues").glob("*.md"):  # (a person relabels it)
                # (whole at once, as an editor saves: a half-written file would be an error of its own)
                edited = path.with_name(f".{path.name}.edited")
                edited.write_text(path.read_text().replace("agent:gemini", "agent:claude"))
                edited.replace(path)
            await watch.until(lambda: any("'claude'" in str(e.data) for e in watch.of("error", key)))
            return seen

    errors, dispatched = anyio.run(scenario)
    assert (errors, dispatched) == (1, 1)  # (not dispatched again: each dispatch claims the issue)
    said = [c.text for c in auto_project.issue(key).comments if c.text.startswith(REFUSED)]
    assert len(said) == 2 and "'gemini'" in said[0] and "'claude'" in said[1]
    assert auto_project.issue(key).status == Status.REVIEW


def test_a_ready_issue_refused_again_is_a_new_request_and_said_again() -> None:
    emitted: list[str] = []
    refusals = Refusals(lambda kind, key, **data: emitted.append(f"{kind} {key} {data['message']}"))
    refused = AgentRefused("agent 'x' is not listed", labels=("agent:x",))
    in_review = issue("agent:x").model_copy(update={"status": Status.REVIEW})

    refusals.failed("7", refused)
    refusals.failed("7", refused)
    refusals.failed("7", BeflowError("the disk is full"))  # any other failure: said each time
    assert emitted == ["error 7 agent 'x' is not listed", "error 7 the disk is full"]
    assert refusals.sift([in_review]) == []
    ready: Issue = issue("agent:x")
    assert refusals.sift([ready]) == [ready]
    refusals.failed("7", refused)
    assert len(emitted) == 3
