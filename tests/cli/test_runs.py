"""``beflow runs list|show|logs``: what a person reads about past runs, and ``--json`` for scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beflow.records.record import RunRecord, new_run_id, now
from beflow.records.store import RunStore
from tests.support.projects import SECRET_ENV, SECRET_HEADER, AutoProject


def test_list_shows_each_run_with_its_outcome_and_branch(finished_run: RunRecord, beflow) -> None:
    result = beflow("runs", "list")

    assert result.exit_code == 0
    header, row = result.stdout.splitlines()
    assert header.split() == ["run", "issue", "round", "mode", "outcome", "duration", "usage", "branch", "commit"]
    assert row.split()[:5] == [finished_run.id, "1", "-", "auto", "succeeded"]
    assert "beflow/1" in row and (finished_run.commit or "")[:12] in row


@pytest.mark.parametrize("key", ["12", "backend-migration-{index}"])
def test_list_on_an_80_column_pipe_cuts_nothing(repo: Path, beflow, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    store = RunStore(repo)
    for index, outcome in enumerate(("no_changes", "cancelled", "succeeded")):
        key = key.format(index=index)
        record = RunRecord(
            id=new_run_id(key), issue=key, mode="watch", agent="codex", started_at=now(), branch=f"beflow/{key}"
        )
        record.close(outcome, "done")  # type: ignore[arg-type]
        record.commit = "0123456789abcdef" if outcome == "succeeded" else None
        store.create(record, "prompt")
    monkeypatch.setenv("COLUMNS", "80")

    result = beflow("runs", "list")

    lines = result.stdout.splitlines()
    assert lines[0].split() == ["run", "issue", "round", "mode", "outcome", "duration", "usage", "branch", "commit"]
    for record in store.records():
        (row,) = [line for line in lines if line.startswith(record.id)]
        assert row.split()[1:5] == [record.issue, "-", "watch", record.outcome]
        assert row.split()[6:] == ["-", f"beflow/{record.issue}", "0123456789ab" if record.commit else "-"]


def test_list_json_is_the_records(finished_run: RunRecord, beflow) -> None:
    result = beflow("runs", "list", "--json")

    (listed,) = json.loads(result.stdout)
    assert RunRecord.model_validate(listed) == finished_run


def test_list_without_runs_says_how_to_make_one(repo: Path, beflow) -> None:
    result = beflow("runs", "list")

    assert result.exit_code == 0 and "No runs yet" in result.stdout
    assert json.loads(beflow("runs", "list", "--json").stdout) == []


def test_logs_and_show_without_runs_say_there_are_none_yet_and_how_to_start_one(repo: Path, beflow) -> None:
    for command in ("logs", "show"):
        result = beflow("runs", command, "latest")

        assert result.exit_code == 1
        assert result.stderr.splitlines() == [
            f"error: no runs yet in {repo}, so no run 'latest'",
            'fix: `beflow --auto` runs every ready issue (`beflow issues new "TITLE"` files one); `beflow watch` '
            "keeps running them.",
        ]


def test_show_summarizes_the_run(finished_run: RunRecord, beflow) -> None:
    result = beflow("runs", "show", "latest")

    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"run {finished_run.id} — issue 1: Take notes"
    assert "outcome   succeeded — the agent finished (end_turn)" in lines
    assert f"branch    beflow/1 at {finished_run.commit}" in lines
    assert "MCP       docs, tools" in lines
    assert "changed   1 file(s)" in lines and "          A notes.txt" in lines
    assert lines[-3:] == ["final message", "permission granted: wrote notes.txt", "mcp servers: docs, tools"]
    assert json.loads(beflow("runs", "show", finished_run.id, "--json").stdout)["id"] == finished_run.id


def test_logs_render_the_transcript_readably_without_secrets(finished_run: RunRecord, beflow) -> None:
    result = beflow("runs", "logs", "latest")

    assert result.exit_code == 0
    out = result.stdout
    assert f"run {finished_run.id} — issue 1 — succeeded" in out
    assert "MCP servers: docs, tools" in out
    assert "agent      looking around" in out
    assert "permission answered: allow" in out
    assert "end        stop reason: end_turn" in out
    assert SECRET_ENV not in out and SECRET_HEADER not in out
    logs = json.loads(beflow("runs", "logs", "latest", "--json").stdout)
    assert logs["record"]["id"] == finished_run.id and logs["lines"][0]["kind"] == "session"


def test_an_unknown_run_exits_1_with_close_ids(finished_run: RunRecord, beflow) -> None:
    wrong = finished_run.id[:-1] + ("0" if finished_run.id[-1] != "0" else "1")

    for command in ("show", "logs"):
        result = beflow("runs", command, wrong)
        assert result.exit_code == 1
        assert f"no run '{wrong}' (did you mean {finished_run.id}?)" in result.stderr
        assert "beflow runs list" in result.stderr


def test_logs_keep_labels_in_a_column_and_prompts_and_messages_whole(
    auto_project: AutoProject, beflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = auto_project.new_issue("say first line\\nsecond line", title="A title long enough " * 5)
    assert beflow("--auto", key).exit_code == 0
    monkeypatch.setenv("COLUMNS", "80")

    lines = beflow("runs", "logs", "latest").stdout.splitlines()

    session = next(line for line in lines if line.startswith("session "))
    assert session.startswith(f"session    started in {auto_project.worktrees_dir}")  # not "session session in"
    prompt = next(line for line in lines if line.startswith("prompt "))
    assert prompt.startswith("prompt     You are working on issue 1 ") and ".md)" in prompt  # the path is whole
    assert "more lines: the full prompt is prompt.md)" in prompt
    first = lines.index("agent      first line")
    assert lines[first + 1] == "           second line"
