"""The acpx command line of a run, and reading acpx's ``--format json`` stream (the ACP JSON-RPC traffic)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from beflow import acpx
from beflow.config import Config


def config(**keys: object) -> Config:
    return Config.model_validate({"acpx": ["acpx"], **keys})


def test_exec_argv_for_a_registry_agent(tmp_path: Path) -> None:
    argv = acpx.exec_argv(config(agent="claude"), cwd=tmp_path, prompt="Fix it.", permissions="approve-all", timeout=90)

    assert argv == [
        *["acpx", "--cwd", str(tmp_path), "--format", "json", "--verbose", "--approve-all", "--timeout", "90"],
        *["claude", "exec", "Fix it."],
    ]
    argv = acpx.exec_argv(config(agent="claude"), cwd=tmp_path, prompt="Fix it.", permissions="deny-all", timeout=None)
    assert argv == [
        *["acpx", "--cwd", str(tmp_path), "--format", "json", "--verbose", "--deny-all"],
        *["claude", "exec", "Fix it."],
    ]


def test_exec_argv_for_a_raw_agent_command_and_a_long_prompt(tmp_path: Path) -> None:
    long_prompt = "x" * (acpx.MAX_ARGV_PROMPT + 1)
    prompt_file = tmp_path / "prompt.md"

    argv = acpx.exec_argv(
        config(agent={"command": "python3 agent.py"}, timeout=1.5),
        cwd=tmp_path,
        prompt=long_prompt,
        prompt_file=prompt_file,
        permissions="approve-reads",
        timeout=1.5,
    )

    assert argv[-6:] == ["1.5", "--agent", "python3 agent.py", "exec", "--file", str(prompt_file)]


SERVERS = [
    {"name": "tools", "command": "t", "args": [], "env": [{"name": "KEY", "value": "env-secret-value"}]},
    {"type": "http", "name": "docs", "url": "u", "headers": [{"name": "A", "value": "abc"}]},
]


def test_the_transcript_follows_messages_tools_permissions_and_errors() -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": SERVERS}},
        {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s-1"}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"prompt": [{"type": "text", "text": "Go"}]}},
        {
            "method": "session/update",
            "params": {"update": {"sessionUpdate": "agent_message_chunk", "content": {"text": "Look"}}},
        },
        {
            "method": "session/update",
            "params": {"update": {"sessionUpdate": "agent_message_chunk", "content": {"text": "ing.\n"}}},
        },
        {
            "method": "session/update",
            "params": {
                "update": {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "t1",
                    "title": "Edit a.py",
                    "kind": "edit",
                    "status": "pending",
                }
            },
        },
        {
            "id": 9,
            "method": "session/request_permission",
            "params": {"toolCall": {"title": "Edit a.py"}, "options": [{"optionId": "allow", "name": "Allow"}]},
        },
        {"id": 9, "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}},
        {
            "method": "session/update",
            "params": {"update": {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}},
        },
        {
            "method": "session/update",
            "params": {"update": {"sessionUpdate": "agent_message_chunk", "content": {"text": "Done."}}},
        },
        {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}},
    ]
    raw = [json.dumps(line) for line in lines] + ["not json", "[1, 2]"]
    transcript = acpx.Transcript()
    for line in raw:
        transcript.feed(line)

    assert transcript.session_id == "s-1" and transcript.mcp_servers == ["tools", "docs"]
    assert transcript.stop_reason == "end_turn" and transcript.error is None
    assert transcript.tool_calls["t1"] == {"title": "Edit a.py", "kind": "edit", "status": "completed"}
    assert transcript.permission_requests == [{"title": "Edit a.py"}]
    assert transcript.messages == ["Looking.", "Done."]
    assert transcript.final_message == "Done."  # the text after the last tool call

    assert [(line.kind, line.text) for line in acpx.readable(raw)] == [
        ("session", "started in /w; MCP servers: tools, docs"),
        ("prompt", "Go"),
        ("agent", "Looking."),
        ("tool", "Edit a.py [edit] pending"),
        ("permission", "Edit a.py (Allow)"),
        ("permission", "answered: allow"),
        ("tool", "Edit a.py [edit] completed"),
        ("agent", "Done."),
        ("end", "stop reason: end_turn"),
    ]


def test_an_error_answer_to_the_prompt_is_the_agents_error() -> None:
    transcript = acpx.Transcript()
    transcript.feed(json.dumps({"id": 2, "method": "session/prompt", "params": {"prompt": []}}))
    transcript.feed(json.dumps({"id": 2, "error": {"code": -32603, "message": "out of ideas"}}))

    assert transcript.error == "out of ideas" and transcript.stop_reason is None


def test_an_error_answer_to_session_new_is_kept_with_its_request_and_code() -> None:
    """What the pinned acpx streams for an agent that is not logged in: no error of its own, only the answer."""
    transcript = acpx.Transcript()
    for message in [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1, "authMethods": [{"id": "login"}]}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "Authentication required"}},
    ]:
        transcript.feed(json.dumps(message))

    assert transcript.request_error == "Authentication required"
    assert (transcript.request_error_method, transcript.request_error_code) == ("session/new", -32000)
    assert transcript.error is None and transcript.acpx_error is None and not transcript.prompted


def test_an_error_answer_to_the_agents_own_request_is_not_mistaken_for_one_to_acpxs() -> None:
    """Ids are per direction: the agent's permission request 1 is not acpx's session/new 1."""
    transcript = acpx.Transcript()
    for message in [
        {"id": 1, "method": "session/new", "params": {"cwd": "/w"}},
        {"id": 1, "result": {"sessionId": "s"}},
        {"id": 1, "method": "session/request_permission", "params": {"toolCall": {"title": "Edit"}}},
        {"id": 1, "error": {"code": -32603, "message": "prompt unavailable"}},
    ]:
        transcript.feed(json.dumps(message))

    assert transcript.request_error is None


@pytest.fixture
def real_stream(tmp_path: Path, acpx_bin: Path, test_agent_command: str) -> list[str]:
    """What the pinned acpx prints for a short session of the test agent that asks a permission."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    prompt = "acp-test: say reading\nacp-test: ask notes.txt hello\nacp-test: say all done"
    argv = [str(acpx_bin), "--cwd", str(workdir), "--format", "json", "--approve-all"]
    result = subprocess.run(
        [*argv, "--agent", test_agent_command, "exec", prompt], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_a_real_acpx_stream_reads_as_messages_tool_calls_and_permissions(real_stream: list[str]) -> None:
    transcript = acpx.Transcript()
    for line in real_stream:
        transcript.feed(line)

    assert transcript.stop_reason == "end_turn" and transcript.session_id
    assert transcript.final_message is not None and transcript.final_message.endswith("all done")
    assert transcript.permission_requests
    kinds = [line.kind for line in acpx.readable(real_stream)]
    assert kinds[:2] == ["session", "prompt"]
    assert "permission" in kinds and "agent" in kinds and kinds[-1] == "end"
