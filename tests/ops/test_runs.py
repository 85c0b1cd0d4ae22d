"""The run operations (``run.list``, ``run.show``, ``run.logs``) that the CLI and the MCP server share."""

from __future__ import annotations

import pytest

import beflow.ops.runs  # noqa: F401 - registers the run operations
from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import NotFoundError
from beflow.ops.operations import REGISTRY, Context
from beflow.records.record import RunRecord
from tests.support.projects import AutoProject


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
