"""The session every mode composes: its record from the first moment, the tracker's last word, the events."""

from __future__ import annotations

from pathlib import Path

import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.events import RunEvent
from beflow.records.record import RunStore
from beflow.run.lifecycle import RunRequest, Session
from beflow.run.policy import status_after
from beflow.trackers import Status, Tracker


@pytest.fixture
def tracker(repo: Path) -> Tracker:
    return open_tracker(load_project())


def session(tracker: Tracker, events: list[RunEvent], status: Status = Status.READY, mode: str = "auto") -> Session:
    issue = tracker.create("a task", status=status)
    request = RunRequest(key=issue.key, mode=mode)  # type: ignore[arg-type]
    return Session(load_project(), tracker, issue, request, events.append, branch=None)


def test_a_session_records_the_run_and_tells_the_tracker_from_start_to_finish(tracker: Tracker, repo: Path) -> None:
    events: list[RunEvent] = []
    run = session(tracker, events, status=Status.OPEN)

    run.start("the prompt")
    assert tracker.get(run.record.issue).status == Status.IN_PROGRESS
    assert (RunStore(repo).directory(run.run_id) / "prompt.md").read_text() == "the prompt"

    record = run.finish("succeeded", "the agent finished (end_turn)", status_after, changed=1)

    assert RunStore(repo).get(run.run_id) == record and record.finished
    issue = tracker.get(record.issue)
    assert issue.status == Status.REVIEW
    assert issue.comments[-1].text.startswith(f"beflow run `{record.id}`: **succeeded**")
    assert [(e.type, e.data.fields()) for e in events] == [
        ("finished", {"outcome": "succeeded", "reason": "the agent finished (end_turn)", "changed": 1})
    ]


def test_a_session_can_leave_its_issue_open_again(tracker: Tracker) -> None:
    run = session(tracker, [], status=Status.OPEN)
    run.start("p")
    run.finish("failed", "acpx exit 1", lambda outcome: Status.OPEN)
    assert tracker.get(run.record.issue).status == Status.OPEN  # through ready: in_progress cannot go there directly


def test_an_issue_moved_by_hand_during_the_run_keeps_its_status(tracker: Tracker) -> None:
    events: list[RunEvent] = []
    run = session(tracker, events)
    run.start("p")
    tracker.set_status(run.record.issue, Status.CLOSED, author="someone")

    run.finish("succeeded", "done", status_after)

    assert tracker.get(run.record.issue).status == Status.CLOSED  # theirs is the last word
    assert [e.type for e in events] == ["finished"]


def test_a_watch_run_that_fails_for_good_says_why_beflow_gives_up(tracker: Tracker) -> None:
    run = session(tracker, [], mode="watch")
    run.record.permanent = True
    run.start("p")
    run.finish("failed", "MCP servers: ${TOKEN} is not set", lambda outcome: Status.FAILED)
    comment = tracker.get(run.record.issue).comments[-1].text
    assert comment.endswith("beflow gives up on this issue: it cannot succeed as configured.")


def test_an_issue_that_cannot_be_read_any_more_is_a_notice_not_a_failure(tracker: Tracker) -> None:
    events: list[RunEvent] = []
    run = session(tracker, events)
    run.start("p")
    issue = tracker.get(run.record.issue)
    assert issue.path is not None
    issue.path.write_text("---\nbroken: [\n")

    record = run.finish("succeeded", "done", status_after)

    assert record.outcome == "succeeded"
    assert [e.type for e in events] == ["notice", "finished"]
    assert "the issue could not be updated" in events[0].data.message


# -- one guarded session: every way out of a run's body ends in exactly one finish ---------------------------------


class Broken(Exception):
    pass


@pytest.mark.parametrize(
    ("body", "finished", "raises"),
    [
        ("says", [("succeeded", "the agent finished")], None),
        ("beflow error", [("failed", "the prompt did not render")], None),
        ("cancelled", [("cancelled", "the issue is now closed")], "cancelled"),
        ("bug", [("failed", "beflow failed unexpectedly: Broken: oops")], Broken),
        ("bug while interrupted", [("failed", "Broken: oops")], None),
    ],
)
def test_every_way_out_of_a_guarded_session_finishes_it_once(
    tracker: Tracker, body: str, finished: list[tuple[str, str]], raises: object
) -> None:
    import anyio

    from beflow.errors import BeflowError

    run = session(tracker, [])
    calls: list[tuple[str, str]] = []

    async def finish(outcome: str, reason: str):  # type: ignore[no-untyped-def]
        calls.append((outcome, reason))
        return run.record

    async def interrupted() -> bool:
        return body == "bug while interrupted"

    async def scenario() -> None:
        with anyio.CancelScope() as scope:
            async with run.guarded(
                finish, cancelled_because=lambda: "the issue is now closed", interrupted=interrupted
            ) as ending:  # type: ignore[arg-type]
                if body == "says":
                    ending.set("succeeded", "the agent finished")
                elif body == "beflow error":
                    raise BeflowError("the prompt did not render")
                elif body == "cancelled":
                    scope.cancel()
                    await anyio.sleep(1)
                else:
                    raise Broken("oops")
            assert ending.finished is run.record
        assert scope.cancelled_caught == (body == "cancelled")

    if raises is Broken:
        with pytest.raises(Broken):
            anyio.run(scenario)
    else:
        anyio.run(scenario)
    assert calls == finished


def test_a_huge_final_message_is_quoted_short_enough_for_github(tracker: Tracker) -> None:
    from beflow.run.lifecycle import FINAL_MESSAGE_SHOWN, summary

    run = session(tracker, [])
    run.record.final_message = "x" * 300_000
    text = summary(run.record)
    assert len(text) < FINAL_MESSAGE_SHOWN + 1000 < 65_536
    assert f"beflow runs show {run.record.id}" in text
