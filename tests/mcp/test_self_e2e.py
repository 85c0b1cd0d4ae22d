"""``mcp.self`` end to end: the real acpx hands the agent beflow's own server in ``session/new``; the agent (the tests'
ACP agent, an MCP client with the official SDK) comments on its issue and reports progress through it — and cannot
comment on any other issue."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from beflow.trackers import Status
from tests.support.projects import AutoProject


def directive(tool: str, arguments: dict[str, str]) -> str:
    return f"mcp-call beflow {tool} {json.dumps(arguments)}"


@pytest.mark.slow
def test_an_agent_comments_and_reports_progress_on_its_issue_and_on_no_other(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(mcp={"enabled": True, "self": True})
    other = auto_project.new_issue("say nothing to do", title="Someone else's issue")
    key = auto_project.new_issue(
        directive("run_progress", {"text": "reproduced the crash"}),
        directive("issue_comment", {"text": "The crash comes from parser.py: an empty line."}),
        directive("issue_comment", {"key": other, "text": "I should not be able to write this"}),
        directive("issue_show", {"key": other}),
        directive("run_progress", {"text": "fixed; tests pass"}),
        "write parser.txt fixed",
        title="Fix the crash",
    )

    result = beflow("--auto", key, "--json")

    assert result.exit_code == 0, result.stderr
    record = auto_project.only_record()
    assert record.outcome == "succeeded"
    assert "beflow" in record.mcp_servers
    # The comment is on the issue, by the agent; the other issue got nothing.
    comments = auto_project.issue(key).comments
    agent_comments = [c for c in comments if c.author == "agent"]
    assert [c.text for c in agent_comments] == ["The crash comes from parser.py: an empty line."]
    assert auto_project.issue(other).comments == []
    # The progress is in the run record (not in comments), and was streamed as events.
    assert [note.text for note in record.progress] == ["reproduced the crash", "fixed; tests pass"]
    assert not any("reproduced the crash" in c.text for c in comments if c.author != "beflow")
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["text"] for e in events if e["event"] == "progress"] == ["reproduced the crash", "fixed; tests pass"]
    # What the agent was told, and the tool calls in `beflow runs logs`.
    logs = beflow("runs", "logs", record.id)
    assert "mcp issue_comment: error out_of_scope" in logs.stdout
    assert "mcp issue_show: error out_of_scope" in logs.stdout
    assert "mcp beflow.issue_comment [other] completed" in logs.stdout
    assert "mcp beflow.run_progress [other] completed" in logs.stdout
    shown = beflow("runs", "show", record.id)
    assert "progress  fixed; tests pass" in shown.stdout
    # beflow's own server is started with the interpreter running beflow, named in the record by name only.
    transcript = (auto_project.run_dir(record) / "transcript.jsonl").read_text()
    assert json.dumps(sys.executable)[1:-1] in transcript
    assert auto_project.secrets_in_records() == []


@pytest.mark.slow
def test_watch_streams_the_progress_an_agent_reports(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(mcp={"self": True})  # beflow's own server alone: .mcp.json is not injected
    key = auto_project.new_issue(directive("run_progress", {"text": "halfway"}), "write a.txt x")

    result = beflow("watch", "--once", "--json")

    assert result.exit_code == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    (progress,) = [e for e in events if e["event"] == "progress"]
    record = auto_project.only_record()
    assert progress == {**progress, "issue": key, "run": record.id, "text": "halfway"}
    assert record.mcp_servers == ["beflow"]


@pytest.mark.slow
def test_an_attended_run_hands_the_agent_beflows_own_server_too(auto_project: AutoProject, beflow_process) -> None:
    auto_project.configure(mcp={"enabled": True, "self": True})
    key = auto_project.new_issue(
        directive("issue_comment", {"text": "Looked at it with a person watching."}),
        directive("run_progress", {"text": "done looking"}),
    )

    process = beflow_process("--attend", key, cwd=auto_project.directory)
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == 0, stderr
    record = auto_project.only_record()
    assert record.mode == "attend" and record.mcp_servers == ["beflow", "docs", "tools"]
    assert [note.text for note in record.progress] == ["done looking"]
    assert [c.text for c in auto_project.issue(key).comments if c.author == "agent"] == [
        "Looked at it with a person watching."
    ]
    assert "progress: done looking" in stderr


@pytest.mark.slow
def test_run_status_carries_what_the_run_used_so_far_and_what_earlier_runs_used(
    auto_project: AutoProject, beflow
) -> None:
    auto_project.configure(mcp={"self": True})
    key = auto_project.new_issue("write a.txt x", "usage 2500 100000 0.40 USD", directive("run_status", {}))

    def status() -> dict[str, Any]:
        said = auto_project.records(key)[0].final_message or ""
        assert said.startswith("mcp run_status: ok "), said
        answer: dict[str, Any] = json.loads(said.removeprefix("mcp run_status: ok "))
        return answer

    assert beflow("--auto", key).exit_code == 0
    first = status()
    # The run going on: what its agent reported so far, though its record gets it only at the end.
    assert first["current"]["usage"] == {**first["current"]["usage"], "context_used": 2500, "cost": 0.4}
    assert first["current"]["usage"]["currency"] == "USD" and first["earlier"] == []

    auto_project.tracker.set_status(key, Status.READY)
    assert beflow("--auto", key).exit_code == 0
    (earlier,) = status()["earlier"]
    assert earlier["usage"]["cost"] == 0.4 and earlier["usage"]["context_peak"] == 2500


#: Removes the run's channel under the agent: beflow's own server cannot start any more.
CUT = r"""
import json, os
(own,) = [s for s in json.load(open(".acpxrc.json"))["mcpServers"] if s["name"] == "beflow"]
os.unlink(own["args"][own["args"].index("--channel") + 1])
"""
FAILED = "beflow's own MCP server failed the agent"


@pytest.mark.slow
def test_an_unknown_tool_is_no_failure_of_beflows_server_and_a_server_that_cannot_start_is(
    auto_project: AutoProject, beflow, tmp_path: Path
) -> None:
    auto_project.configure(mcp={"self": True})
    key = auto_project.new_issue(directive("no_such_tool", {}), "write a.txt x", title="Fix the crash")

    asked = beflow("--auto", key, "--json")

    assert asked.exit_code == 0, asked.stderr
    record = auto_project.only_record()
    # The server answered the agent itself: it has no such tool.
    assert (record.final_message or "").endswith("mcp no_such_tool: error unknown_tool"), record.final_message
    assert FAILED not in asked.stdout + asked.stderr and FAILED not in (record.stop_reason or "")

    cut = tmp_path / "cut.py"
    cut.write_text(CUT)
    key = auto_project.new_issue(f"run {sys.executable} {cut}", directive("issue_comment", {"text": "Found it."}))

    failed = beflow("--auto", key, "--json")

    (record,) = auto_project.records(key)
    failure = f"{FAILED}: 1 of its 1 call(s) to it never reached the run (it never started)"
    notices = [json.loads(line) for line in failed.stdout.splitlines() if '"notice"' in line]
    assert any(failure in event.get("message", "") for event in notices), failed.stdout
    assert failure in (record.stop_reason or ""), record.stop_reason
