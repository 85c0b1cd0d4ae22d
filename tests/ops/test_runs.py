"""The run operations (``run.list``, ``run.show``, ``run.logs``) that the CLI and the MCP server share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import beflow.ops.runs  # noqa: F401 - registers the run operations
from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import NotBoundError, NotFoundError, OutOfScopeError
from beflow.ops.operations import REGISTRY, Context
from beflow.records.record import ProgressNote, RunRecord, new_run_id
from beflow.records.store import RunStore
from beflow.trackers.issue import utc_now
from tests.support.projects import AutoProject, config_file


def call(name: str, bound_issue: str | None = None, **arguments: object):  # type: ignore[no-untyped-def]
    return REGISTRY[name].call(
        Context(project=load_project(), opens_tracker=open_tracker, bound_issue=bound_issue), arguments
    )


def test_list_and_show_give_the_record(finished_run: RunRecord) -> None:
    assert [r.id for r in call("run.list").runs] == [finished_run.id]
    assert call("run.list", issue="2").runs == []
    assert call("run.show", id="latest") == finished_run
    assert call("run.show", id=finished_run.id[:15]) == finished_run


def test_logs_are_the_transcript_made_readable_with_server_names_only(finished_run: RunRecord) -> None:
    logs = call("run.logs", id=finished_run.id)

    texts = [(line.kind, line.text) for line in logs.lines]
    assert texts[0][0] == "session" and texts[0][1].endswith("MCP servers: docs, tools")
    assert ("agent", "looking around") in texts
    assert any(kind == "permission" and "notes.txt" in text for kind, text in texts)
    assert any(kind == "permission" and text.startswith("answered: allow") for kind, text in texts)
    assert texts[-1] == ("end", "stop reason: end_turn")
    assert logs.record == finished_run


def test_an_agent_bound_to_an_issue_sees_only_its_runs(finished_run: RunRecord, auto_project: AutoProject) -> None:
    assert call("run.list", bound_issue="1").runs == [finished_run]
    assert call("run.list", bound_issue="2").runs == []
    with pytest.raises(NotFoundError, match="of issue 2"):
        call("run.show", bound_issue="2", id=finished_run.id)


def test_an_unknown_run_says_which_ones_are_close(finished_run: RunRecord) -> None:
    with pytest.raises(NotFoundError, match=f"did you mean {finished_run.id}"):
        call("run.show", id=finished_run.id[:-1] + "x")


def usage_line(used: int, cost: float) -> str:
    """A ``usage_update`` as acpx relays it."""
    update = {
        "sessionUpdate": "usage_update",
        "used": used,
        "size": 200000,
        "cost": {"amount": cost, "currency": "USD"},
    }
    params = {"sessionId": "s1", "update": update}
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}, separators=(",", ":"))


def test_another_session_sees_a_run_in_flight_with_its_progress_and_usage_so_far(repo: Path) -> None:
    config_file(repo).write_text("{}\n")
    open_tracker(load_project()).create("Fix the login crash")
    runs = RunStore(repo)
    record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="a", started_at=utc_now())
    runs.create(record, "the prompt")  # running, by this (living) process
    runs.add_progress(record.id, ProgressNote(time=utc_now(), text="tests pass; docs next", actor="agent"))
    lines = [usage_line(1200, 0.25), usage_line(5000, 0.5)]
    runs.write(record.id, "transcript.jsonl", "\n".join(lines) + "\n" + usage_line(9000, 0.75)[:40])

    for status in (call("run.status", issue="1"), call("run.status"), call("run.status", bound_issue="1")):
        (summary,) = status.earlier
        assert (summary.id, summary.outcome) == (record.id, "running")
        assert summary.progress == "tests pass; docs next"
        assert summary.usage is not None and (summary.usage.cost, summary.usage.currency) == (0.5, "USD")
        assert summary.usage.context_used == 5000


def test_the_status_of_an_issue_that_does_not_exist_is_not_found(repo: Path) -> None:
    config_file(repo).write_text("{}\n")
    open_tracker(load_project()).create("Fix the login crash")
    assert call("run.status", issue="1").earlier == []  # (an issue without runs: none, rightly)
    with pytest.raises(NotFoundError):
        call("run.status", issue="999")


def test_only_best_of_ns_reviewer_chooses_and_only_a_candidate_it_was_given(repo: Path) -> None:
    config_file(repo).write_text("{}\n")
    open_tracker(load_project()).create("Fix the login crash")
    runs = RunStore(repo)
    reviewer = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="a", started_at=utc_now(), reviewing=[1, 3])
    plain = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="a", started_at=utc_now())
    for record in (reviewer, plain):
        runs.create(record, "the prompt")

    def choose(run: str | None, candidate: int, reason: str = "smaller and tested"):  # type: ignore[no-untyped-def]
        context = Context(project=load_project(), opens_tracker=open_tracker, bound_issue="1", bound_run=run)
        return REGISTRY["candidate.choose"].call(context, {"candidate": candidate, "reason": reason})

    with pytest.raises(NotBoundError):
        choose(None, 1)
    with pytest.raises(OutOfScopeError, match="not best of N's reviewer"):
        choose(plain.id, 1)
    with pytest.raises(OutOfScopeError, match="candidate 2 is not one you may choose") as refused:
        choose(reviewer.id, 2)
    assert refused.value.fix == "Choose one of 1, 3: the candidates that passed the checks."
    assert runs.read_choice(reviewer.id) is None and runs.read_choice(plain.id) is None

    assert choose(reviewer.id, 3).candidate == 3
    assert choose(reviewer.id, 1, "on second thought, 1").candidate == 1  # a later answer replaces it
    answer = runs.read_choice(reviewer.id)
    assert answer is not None and (answer.candidate, answer.reason) == (1, "on second thought, 1")


def test_a_reviewers_answer_that_is_not_beflows_file_is_no_answer(repo: Path) -> None:
    runs = RunStore(repo)
    record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="a", started_at=utc_now(), reviewing=[1])
    runs.create(record, "p")
    (repo / "elsewhere.json").write_text('{"candidate": 1, "reason": "planted"}')

    runs.file(record.id, "choice.json").symlink_to(repo / "elsewhere.json")
    assert runs.read_choice(record.id) is None
    runs.file(record.id, "choice.json").unlink()
    runs.file(record.id, "choice.json").write_text('{"candidate": 0, "reason": "none"}')
    assert runs.read_choice(record.id) is None
