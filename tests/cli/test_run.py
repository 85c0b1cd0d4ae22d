"""``beflow --auto``: exit codes, the progress it prints, and ``--json`` events."""

from __future__ import annotations

import json

from beflow.trackers import Status
from tests.support.projects import AutoProject


def test_auto_prints_what_started_and_how_it_ended(auto_project: AutoProject, beflow) -> None:
    key = auto_project.new_issue("write a.txt x", title="First")

    result = beflow("--auto", key)

    assert result.exit_code == 0
    record = auto_project.only_record()
    assert f"▶ issue {key}: run {record.id} on beflow/1" in result.stderr
    assert f"■ issue {key}: succeeded — the agent finished (end_turn) → commit {(record.commit or '')[:12]}" in (
        result.stderr
    )
    assert "note:" not in result.stderr  # beflow's own uncommitted files (.beflow/, .mcp.json) are read from here


def test_auto_says_that_uncommitted_edits_in_the_checkout_are_not_seen_by_the_agent(
    auto_project: AutoProject, beflow
) -> None:
    key = auto_project.new_issue("write a.txt x")
    (auto_project.directory / "README.md").write_text("# edited, not committed\n")
    (auto_project.directory / "draft.py").write_text("x = 1\n")

    result = beflow("--auto", key)

    assert result.exit_code == 0
    assert (
        f"note: 2 uncommitted changes in {auto_project.directory} (README.md, draft.py) will not be seen by the "
        "agent: each run starts from worktrees.base (HEAD) in a worktree of its own. Commit them first to include "
        "them."
    ) in " ".join(result.stderr.split())
    assert auto_project.branch_files("beflow/1")["README.md"] == "# sample\n"  # the committed one


def test_auto_json_prints_one_event_per_line(auto_project: AutoProject, beflow) -> None:
    key = auto_project.new_issue("say working", "write a.txt x")

    result = beflow("--auto", key, "--json")

    assert result.exit_code == 0
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished" and "activity" in kinds
    assert {e["issue"] for e in events} == {key}
    assert events[-1]["outcome"] == "succeeded" and events[-1]["changed"] == 1
    assert result.stderr == ""


def test_auto_exits_1_when_a_run_fails(auto_project: AutoProject, beflow) -> None:
    ok = auto_project.new_issue("write a.txt x")
    bad = auto_project.new_issue("fail nope")

    result = beflow("--auto")

    assert result.exit_code == 1
    assert f"■ issue {ok}: succeeded" in result.stderr and f"■ issue {bad}: failed" in result.stderr


def test_auto_with_nothing_ready_says_so(auto_project: AutoProject, beflow) -> None:
    result = beflow("--auto")

    assert result.exit_code == 0 and "No ready issues to run" in result.stderr
    assert json.loads(beflow("--auto", "--json").stdout) == {"event": "idle", "message": "no ready issues"}


def test_auto_rejects_bad_options(auto_project: AutoProject, beflow) -> None:
    assert beflow("--auto", "--limit", "0").exit_code == 2
    assert beflow("--auto", "--concurrency", "0").exit_code == 2
    assert auto_project.records() == []


def test_auto_leaves_an_issue_waiting_for_an_open_one_for_later(auto_project: AutoProject, beflow) -> None:
    first = auto_project.new_issue("write a.txt x", status=Status.OPEN)
    second = auto_project.new_issue("write b.txt x")
    path = auto_project.issue(second).path
    assert path is not None
    path.write_text(path.read_text().replace("priority: 2", f"priority: 2\nblocked_by: [{first}]"))

    result = beflow("--auto")

    assert result.exit_code == 0 and "No ready issues to run" in result.stderr
    assert auto_project.records() == []
