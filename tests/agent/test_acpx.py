"""Reading acpx's ``--format json`` stream (the ACP JSON-RPC traffic): the transcript a run follows, and the
transcript as a person reads it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from beflow.agent import acpx
from beflow.agent.acpx import ToolCallState
from tests.support import acp_schema

SERVERS = [
    {"name": "tools", "command": "t", "args": [], "env": [{"name": "KEY", "value": "env-secret-value"}]},
    {"type": "http", "name": "docs", "url": "u", "headers": [{"name": "A", "value": "abc"}]},
]


def update(**fields: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": fields}}


def chunk(text: str) -> dict[str, object]:
    return update(sessionUpdate="agent_message_chunk", content={"type": "text", "text": text})


def test_the_transcript_follows_messages_tools_permissions_and_errors() -> None:
    prompt = {"sessionId": "s-1", "prompt": [{"type": "text", "text": "Go"}]}
    asked = {
        "sessionId": "s-1",
        "toolCall": {"toolCallId": "t1", "title": "Edit a.py"},
        "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
    }
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": SERVERS}},
        {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s-1"}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt},
        chunk("Look"),
        chunk("ing.\n"),
        update(sessionUpdate="tool_call", toolCallId="t1", title="Edit a.py", kind="edit", status="pending"),
        {"jsonrpc": "2.0", "id": 9, "method": "session/request_permission", "params": asked},
        {"jsonrpc": "2.0", "id": 9, "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}},
        update(sessionUpdate="tool_call_update", toolCallId="t1", status="completed"),
        chunk("Done."),
        {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}},
    ]
    # What the reader is taught here is ACP as its SDK defines it.
    checked = [acp_schema.message(line) for line in lines]
    assert checked.count("session/update") == 5 and "PromptResponse" in checked and "session/new" in checked
    raw = [json.dumps(line) for line in lines] + ["not json", "[1, 2]"]
    transcript = acpx.Transcript()
    for line in raw:
        transcript.feed(line)

    assert transcript.session_id == "s-1" and transcript.mcp_servers == ["tools", "docs"]
    assert transcript.stop_reason == "end_turn" and transcript.error is None
    assert transcript.tool_calls["t1"] == ToolCallState(title="Edit a.py", kind="edit", status="completed")
    assert [r.model_dump(by_alias=True, exclude_unset=True) for r in transcript.permission_requests] == [
        {"toolCallId": "t1", "title": "Edit a.py"}
    ]
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
    # acpx's traffic with the test agent is ACP as the SDK defines it, in everything the reader reads.
    checked = {acp_schema.message(line) for line in real_stream}
    assert {"session/new", "session/prompt", "session/update", "session/request_permission"} <= checked
    assert {"InitializeResponse", "RequestPermissionResponse", "PromptResponse"} <= checked


def test_the_reader_understands_what_the_acp_sdk_writes() -> None:
    """Messages built with the SDK's own models, as an agent on the SDK sends them: a renamed field in the
    protocol shows up here."""
    from acp import schema

    def notification(update: BaseModel) -> str:
        params = schema.SessionNotification(session_id="s", update=update)
        return rpc(method="session/update", params=params)

    def rpc(**message: object) -> str:
        dumped = {
            k: v.model_dump(mode="json", by_alias=True, exclude_none=True) if isinstance(v, BaseModel) else v
            for k, v in message.items()
        }
        return json.dumps({"jsonrpc": "2.0", **dumped})

    text = schema.TextContentBlock(type="text", text="Reading.\n")
    stdio = schema.McpServerStdio(name="tools", command="t", args=[], env=[schema.EnvVariable(name="K", value="v")])
    web = schema.HttpMcpServer(type="http", name="docs", url="u", headers=[])
    lines = [
        rpc(id=1, method="session/new", params=schema.NewSessionRequest(cwd="/w", mcp_servers=[stdio, web])),
        rpc(id=1, result=schema.NewSessionResponse(session_id="s")),
        rpc(id=2, method="session/prompt", params=schema.PromptRequest(session_id="s", prompt=[text])),
        notification(schema.AgentMessageChunk(session_update="agent_message_chunk", content=text)),
        notification(
            schema.ToolCallStart(
                session_update="tool_call", tool_call_id="t1", title="Edit a.py", kind="edit", status="pending"
            )
        ),
        rpc(
            id=1,
            method="session/request_permission",
            params=schema.RequestPermissionRequest(
                session_id="s",
                tool_call=schema.ToolCallUpdate(tool_call_id="t1", title="Edit a.py"),
                options=[schema.PermissionOption(option_id="allow", name="Allow", kind="allow_once")],
            ),
        ),
        rpc(
            id=1,
            result=schema.RequestPermissionResponse(
                outcome=schema.AllowedOutcome(outcome="selected", option_id="allow")
            ),
        ),
        notification(schema.ToolCallProgress(session_update="tool_call_update", tool_call_id="t1", status="failed")),
        notification(
            schema.AgentMessageChunk(
                session_update="agent_message_chunk", content=text.model_copy(update={"text": "Ok"})
            )
        ),
        rpc(id=2, result=schema.PromptResponse(stop_reason="end_turn")),
    ]
    transcript = acpx.Transcript()
    for line in lines:
        transcript.feed(line)

    assert (transcript.session_id, transcript.mcp_servers, transcript.stop_reason) == (
        "s",
        ["tools", "docs"],
        "end_turn",
    )
    assert transcript.messages == ["Reading.", "Ok"]
    assert transcript.tool_calls == {"t1": ToolCallState(title="Edit a.py", kind="edit", status="failed")}
    assert [r.model_dump(by_alias=True, exclude_unset=True) for r in transcript.permission_requests] == [
        {"toolCallId": "t1", "title": "Edit a.py"}
    ]
    assert [(line.kind, line.text) for line in acpx.readable(lines)] == [
        ("session", "started in /w; MCP servers: tools, docs"),
        ("prompt", "Reading."),
        ("agent", "Reading."),
        ("tool", "Edit a.py [edit] pending"),
        ("permission", "Edit a.py (Allow)"),
        ("permission", "answered: allow"),
        ("tool", "Edit a.py [edit] failed"),
        ("agent", "Ok"),
        ("end", "stop reason: end_turn"),
    ]


MALFORMED_UPDATES = [
    {"sessionUpdate": "agent_message_chunk", "content": "not a content block"},  # not ACP's: skipped, counted
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 7}},  # the same
    {"sessionUpdate": "tool_call", "toolCallId": ["t"], "title": "odd id"},  # an id that is not one: read as "?"
    {"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Edit", "content": "a diff"},  # no content shown
    {"sessionUpdate": 7},  # no kind the reader knows: passed by
]


def test_malformed_updates_an_agent_sends_through_acpx_are_skipped_and_the_run_reads_on(
    tmp_path: Path, acpx_bin: Path, test_agent_command: str
) -> None:
    """What the agent sends, acpx relays as it is: an update that is not ACP's is skipped (and counted) or read as
    far as it goes, never a failure of the reader, and what comes around it is read as ever."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    sent = [f"acp-test: update {json.dumps(update)}" for update in MALFORMED_UPDATES]
    prompt = "\n".join(["acp-test: say before", *sent, "acp-test: say after"])
    argv = [str(acpx_bin), "--cwd", str(workdir), "--format", "json", "--approve-all"]
    result = subprocess.run(
        [*argv, "--agent", test_agent_command, "exec", prompt], capture_output=True, timeout=60, check=True
    )
    updates = [line for line in result.stdout.splitlines() if b'"session/update"' in line]
    relayed = [json.loads(line)["params"]["update"] for line in updates]
    assert all(update in relayed for update in MALFORMED_UPDATES)  # (acpx passed them on unchanged)

    transcript = acpx.Transcript()
    transcript.follow(result.stdout.rstrip(b"\n"))  # as a run reads acpx's output

    assert transcript.malformed == 2
    assert transcript.messages == ["before", "after"] and transcript.stop_reason == "end_turn"
    assert transcript.tool_calls == {"?": ToolCallState(title="odd id"), "t2": ToolCallState(title="Edit")}
    shown = [(line.kind, line.text) for line in acpx.readable(result.stdout.decode().splitlines())]
    assert shown[2:] == [
        ("agent", "before"),
        ("tool", "odd id [?] pending"),
        ("tool", "Edit [?] pending"),
        ("agent", "after"),
        ("end", "stop reason: end_turn"),
    ]


def test_a_message_that_is_not_json_rpc_is_skipped_without_a_trace() -> None:
    """Shapes acpx would not relay, fed to the reader all the same: each is counted and skipped."""
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ["not", "text"]}}
    lines = [
        {"jsonrpc": "2.0", "method": "session/update", "params": ["not", "an", "object"]},
        {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}},
        {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": chunk}},
        {"jsonrpc": "2.0", "method": "session/request_permission", "params": "Edit a.py?"},
        {"jsonrpc": "2.0", "id": [2], "result": {"stopReason": "end_turn"}},
        {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": {"why": "unknown"}}},
        {"jsonrpc": "2.0", "id": None, "error": "boom"},
    ]
    transcript = acpx.Transcript()
    for line in lines:
        assert transcript.feed(json.dumps(line)) is None

    assert transcript.malformed == len(lines)
    assert transcript == acpx.Transcript(malformed=len(lines))  # nothing else was taken from them
    assert acpx.readable([json.dumps(line) for line in lines]) == []


def test_a_lone_surrogate_in_an_agents_message_is_read_as_python_reads_json() -> None:
    """JSON lets an agent escape half a surrogate pair (``\\ud800``); the fast parser refuses it, Python's takes it:
    the message is read all the same (its record cleans the character)."""
    transcript = acpx.Transcript()
    transcript.feed(json.dumps(chunk("odd \ud800 text")).encode())
    assert transcript.final_message == "odd \ufffd text" and transcript.malformed == 0
    assert [line.text for line in acpx.readable([json.dumps(chunk("odd \ud800 text"))])] == ["odd \ud800 text"]


@pytest.mark.slow
def test_the_real_acpx_leaves_to_a_person_what_beflows_permissions_say_and_allows_the_one_request_granted(
    tmp_path: Path, acpx_bin: Path, test_agent_command: str
) -> None:
    """acpx's ``--permission-policy`` and ``--non-interactive-permissions`` as beflow gives them (one acpx run): the
    granted request is allowed (before the escalate rule), an escalated one refused and flagged, an undecided one
    cancelled; the turn fails with exit 5; the transcript's :attr:`undecided` is the first request left over."""
    from beflow.agent.acpx_command import ACPX_PERMISSION_DENIED, permission_args
    from beflow.config import Config

    workdir = tmp_path / "work"
    workdir.mkdir()
    policy = {"mode": "approve-reads", "undecided": "ask", "escalate": ["fetch"]}
    flags = permission_args(Config.model_validate({"permissions": policy}), grant="Write granted.txt")
    prompt = "\n".join(f"acp-test: ask {name} x" for name in ("granted.txt", "GRANTED.TXT", "other.txt", "granted.txt"))
    argv = [str(acpx_bin), "--cwd", str(workdir), "--format", "json", *flags, "--agent", test_agent_command]
    result = subprocess.run([*argv, "exec", prompt], capture_output=True, text=True, timeout=60)
    transcript = acpx.Transcript()
    for line in result.stdout.splitlines():
        transcript.feed(line)

    assert result.returncode == ACPX_PERMISSION_DENIED, result.stderr
    assert transcript.acpx_code == "PERMISSION_PROMPT_UNAVAILABLE"
    # The title, whole — acpx compares without case: the limit docs/questions.md states — and nothing else.
    assert sorted(p.name for p in workdir.iterdir()) == ["GRANTED.TXT", "granted.txt"]
    assert transcript.undecided is not None and transcript.undecided.title == "Write other.txt"
    assert transcript.undecided.raw_input == {"content": "x", "path": str(workdir / "other.txt")}


def test_a_permission_acpx_escalated_or_cancelled_is_undecided_and_one_it_answered_is_not() -> None:
    def asked(ident: int, title: str) -> str:
        tool = {"toolCallId": f"t{ident}", "title": title, "kind": "edit"}
        params = {"sessionId": "s", "toolCall": tool, "options": [{"optionId": "a", "name": "A", "kind": "allow_once"}]}
        return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "session/request_permission", "params": params})

    def answered(ident: int, outcome: dict[str, object], meta: dict[str, object] | None = None) -> str:
        result: dict[str, object] = {"outcome": outcome, **({"_meta": meta} if meta else {})}
        return json.dumps({"jsonrpc": "2.0", "id": ident, "result": result})

    escalation = {"acpx": {"permissionEscalation": {"type": "permission_escalation", "toolTitle": "Write b"}}}
    decided, escalated, cancelled = acpx.Transcript(), acpx.Transcript(), acpx.Transcript()
    for transcript, outcome, meta in [
        (decided, {"outcome": "selected", "optionId": "reject"}, None),
        (escalated, {"outcome": "selected", "optionId": "reject"}, escalation),
        (cancelled, {"outcome": "cancelled"}, None),
    ]:
        for line in (asked(1, "Write a"), answered(1, {"outcome": "selected", "optionId": "a"})):
            transcript.feed(line)
        for line in (asked(2, "Write b"), answered(2, outcome, meta), asked(3, "Write c")):
            transcript.feed(line)
        transcript.feed(answered(3, {"outcome": "cancelled"}) if transcript is not decided else answered(3, outcome))

    assert decided.undecided is None
    assert escalated.undecided is not None and escalated.undecided.title == "Write b"  # (the first left over)
    assert cancelled.undecided is not None and cancelled.undecided.title == "Write b"
    # An answer whose id is no permission request's (acpx's own request ids count from 0 too) is none.
    stray = acpx.Transcript()
    stray.feed(answered(7, {"outcome": "cancelled"}))
    assert stray.undecided is None
