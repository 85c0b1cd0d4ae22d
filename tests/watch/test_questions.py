"""A watch's blocked issues (docs/questions.md): a question blocks the issue, a trusted answer resumes the agent's
session, an unanswered one fails the issue after ``limits.wait``. In-process against the local tracker and run
records written here; one end-to-end test through the real acpx and the test agent."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import anyio

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.ops.questions import ANSWER_MARK, QUESTION_MARK
from beflow.records.record import Question, RunRecord
from beflow.records.store import RunStore
from beflow.run.request import RunRequest
from beflow.trackers import Status
from beflow.trackers.local import LocalTracker
from beflow.watch.questions import WaitingQuestions
from tests.support.projects import AutoProject, config_file
from tests.watch.test_dispatcher import Clock, Watch, fast, watching


def _config(config: dict[str, object]) -> None:
    config_file(Path.cwd()).write_text(json.dumps(config))


def _asked(repo: Path, tracker: LocalTracker, *, attempt: int = 2) -> tuple[str, RunRecord]:
    """An issue whose run asked a question (as a run leaves it: blocked, its question a comment by beflow)."""
    key = tracker.create("pick a colour").key
    tracker.set_status(key, Status.IN_PROGRESS)
    asked_at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    question = Question(text="Red or blue?", choices=["red", "blue"], asked=asked_at)
    record = RunRecord(
        id=f"20260101-000000-{key}-abcd",
        issue=key,
        mode="watch",
        agent="test",
        attempt=attempt,
        started_at=asked_at - dt.timedelta(seconds=5),
        question=question,
    )
    record.close("asked", "the agent asked a question")
    store = RunStore(repo)
    store.create(record, "prompt")
    store.save(record)
    tracker.set_status(key, Status.BLOCKED, note=f"{QUESTION_MARK.format(run=record.id)}\nRed or blue?")
    return key, record


def _waiting(clock: Clock | None = None) -> tuple[WaitingQuestions, list[tuple[str, str | None, dict[str, object]]]]:
    emitted: list[tuple[str, str | None, dict[str, object]]] = []
    waiting = WaitingQuestions(clock or time.time, lambda kind, key=None, **data: emitted.append((kind, key, data)))
    return waiting, emitted


def test_an_answered_question_is_queued_and_its_run_resumes_as_the_same_attempt(repo: Path) -> None:
    _config({"watch": {"max_attempts": 2}})
    project = load_project()
    tracker = open_tracker(project)
    assert isinstance(tracker, LocalTracker)
    key, asking = _asked(repo, tracker)
    waiting, _ = _waiting()
    assert waiting.survey(project, tracker, running=()) == []  # (beflow's own question is no answer)

    tracker.comment(key, "Blue, please. <!-- hidden words -->", author="ada")
    (queued,) = waiting.survey(project, tracker, running=())
    assert queued.key == key and tracker.ready() == []  # a blocked issue is no candidate of the queue
    request = RunRequest(key=key, mode="watch", attempt=1)
    assert waiting.shape(request, project)
    assert request.answer is not None and request.answer.text == "Blue, please."  # as a reader of the page sees it
    assert (request.answer.author, request.answer.run) == ("ada", asking.id)
    assert request.question == asking.question
    assert (request.attempt, request.final) == (2, True)  # the asking run's attempt: a question spends none
    assert not waiting.shape(RunRequest(key=key), project)  # (once)


def test_an_issue_blocked_by_hand_or_running_is_left_alone(repo: Path) -> None:
    _config({})
    project = load_project()
    tracker = open_tracker(project)
    assert isinstance(tracker, LocalTracker)
    by_hand = tracker.create("blocked by a person").key
    tracker.set_status(by_hand, Status.IN_PROGRESS)
    tracker.set_status(by_hand, Status.BLOCKED)
    tracker.comment(by_hand, "an answer to nothing", author="ada")
    key, _ = _asked(repo, tracker)
    tracker.comment(key, "blue", author="ada")
    waiting, emitted = _waiting()
    assert waiting.survey(project, tracker, running=(key,)) == []
    assert emitted == [] and tracker.get(by_hand).status == Status.BLOCKED


def test_a_question_unanswered_within_limits_wait_fails_its_issue_saying_so(repo: Path) -> None:
    _config({"limits": {"wait": 60}})
    project = load_project()
    tracker = open_tracker(project)
    assert isinstance(tracker, LocalTracker)
    key, asking = _asked(repo, tracker)
    clock = Clock()
    waiting, emitted = _waiting(clock)
    assert waiting.survey(project, tracker, running=()) == [] and emitted == []
    assert tracker.get(key).status == Status.BLOCKED

    clock.advance(61)
    assert waiting.survey(project, tracker, running=()) == []
    issue = tracker.get(key)
    assert issue.status == Status.FAILED
    assert f"Nobody answered the question of run `{asking.id}` within 60 s" in issue.comments[-1].text
    assert emitted == [("failed", key, {"reason": "its agent's question was not answered within limits.wait"})]


def test_an_answer_given_through_beflow_counts_though_it_carries_beflows_marks(repo: Path) -> None:
    _config({})
    project = load_project()
    tracker = open_tracker(project)
    assert isinstance(tracker, LocalTracker)
    key, _ = _asked(repo, tracker)
    tracker.comment(key, "<!-- beflow:rework -->\nnot an answer", author="ada")  # a mark of beflow's: none
    tracker.comment(key, f"red\n\n{ANSWER_MARK}", author="grace")  # (as issue.answer writes it)
    waiting, _ = _waiting()
    assert [i.key for i in waiting.survey(project, tracker, running=())] == [key]
    request = RunRequest(key=key)
    waiting.shape(request, project)
    assert request.answer is not None and (request.answer.text, request.answer.author) == ("red", "grace")


# -- end to end ------------------------------------------------------------------------------------------------------


def test_a_question_blocks_the_issue_and_the_answer_resumes_the_same_session_to_the_end(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    auto_project.configure(mcp={"self": True}, watch=fast(max_attempts=1))
    ask = {"question": "Red or blue? @octocat, closes #1", "choices": ["red", "blue"]}
    key = auto_project.new_issue("write first.txt before the question", f"mcp-call beflow issue_ask {json.dumps(ask)}")
    seen: dict[str, object] = {}

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: auto_project.issue(key).status == Status.BLOCKED)
            await watch.until(lambda: bool(watch.of("finished", key)))  # (its lane given back: then said)
            seen["running"] = [r.key for r in watch.dispatcher.snapshot().running]
            seen["queue"] = [i.key for i in watch.dispatcher.snapshot().queue]
            auto_project.tracker.comment(key, "blue\n\nacp-test: write answer.txt blue", author="ada")
            await watch.until(lambda: auto_project.issue(key).status == Status.REVIEW)
        return watch

    watch = anyio.run(scenario)

    assert seen == {"running": [], "queue": []}  # while the question waits, no turn is live and nothing queued
    resumed, asked = auto_project.records(key)
    assert asked.outcome == "asked" and asked.question is not None
    assert asked.question.text == ask["question"] and asked.question.choices == ["red", "blue"]
    assert "A\tfirst.txt" in asked.changed_files and asked.commit is not None  # the work so far, on the branch
    assert resumed.outcome == "succeeded" and resumed.answer is not None and resumed.answer.run == asked.id
    assert resumed.attempt == asked.attempt == 1  # no attempt spent (max_attempts 1: a retry would have failed)
    assert resumed.resumed_session == asked.session is not None  # the same agent session, in a new turn
    assert resumed.branch == asked.branch and "A\tanswer.txt" in resumed.changed_files
    transcript = (auto_project.run_dir(resumed) / "transcript.jsonl").read_text()
    assert "session/resume" in transcript and "Red or blue?" in transcript  # told its question and the answer
    assert "write first.txt" not in (auto_project.run_dir(resumed) / "answer.md").read_text()  # not the issue again
    questions = [c for c in auto_project.issue(key).comments if "beflow:question" in c.text]
    assert len(questions) == 1 and "> Red or blue?" in questions[0].text and "1. red" in questions[0].text
    assert [e.data.outcome for e in watch.of("finished", key)] == ["asked", "succeeded"]
    assert auto_project.secrets_in_records() == []


def test_a_question_whose_run_was_killed_before_it_told_the_tracker_is_put_as_the_run_would_have(repo: Path) -> None:
    from beflow.run.issue_status import requeue_orphans, settle_orphans

    _config({})
    project = load_project()
    tracker = open_tracker(project)
    key = tracker.create("pick a colour").key
    tracker.set_status(key, Status.IN_PROGRESS)  # (no live claim: its beflow was killed after the record)
    record = RunRecord(
        id=f"20260101-000000-{key}-abcd", issue=key, mode="watch", agent="a", started_at=dt.datetime.now(dt.UTC)
    )
    record.question = Question(text="Red or blue?", asked=dt.datetime.now(dt.UTC))
    record.close("asked", "the agent asked a question")
    RunStore(repo).create(record, "prompt")
    RunStore(repo).save(record)
    assert settle_orphans(tracker, RunStore(repo)) == [key] and requeue_orphans(tracker) == []
    issue = tracker.get(key)
    assert issue.status == Status.BLOCKED  # not requeued: a fresh run would drop the question
    assert (
        QUESTION_MARK.format(run=record.id) in issue.comments[-1].text and "> Red or blue?" in issue.comments[-1].text
    )
