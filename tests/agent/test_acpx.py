"""The acpx command line of a run, and reading acpx's ``--format json`` stream (the ACP JSON-RPC traffic)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from beflow import guardrails
from beflow.agent import acpx
from beflow.config import Config
from tests.support import acp_schema


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
    assert transcript.tool_calls["t1"] == {"title": "Edit a.py", "kind": "edit", "status": "completed"}
    assert transcript.permission_requests == [{"toolCallId": "t1", "title": "Edit a.py"}]
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


def test_the_names_the_reader_acts_on_are_acps() -> None:
    """Methods, update kinds, tool call fields and statuses, each as the ACP SDK's schema spells it."""
    from acp import meta, schema

    def literal(model: type[BaseModel], field: str) -> tuple[object, ...]:
        return get_args(model.model_fields[field].annotation)

    assert (meta.AGENT_METHODS["session_new"], meta.AGENT_METHODS["session_prompt"]) == (acpx.NEW_SESSION, acpx.PROMPT)
    assert meta.CLIENT_METHODS["session_update"] == acpx.UPDATE
    assert meta.CLIENT_METHODS["session_request_permission"] == acpx.REQUEST_PERMISSION
    assert literal(schema.AgentMessageChunk, "session_update") == (acpx.MESSAGE_CHUNK,)
    assert literal(schema.ToolCallStart, "session_update") == (acpx.TOOL_CALL,)
    assert literal(schema.ToolCallProgress, "session_update") == (acpx.TOOL_CALL_UPDATE,)
    assert set(acpx.TOOL_FIELDS) <= set(schema.ToolCallProgress.model_fields) & set(schema.ToolCallStart.model_fields)
    assert set(acpx.TOOL_ENDED) <= set(get_args(schema.ToolCallStatus))
    # Which side sends a request: the agent's requests to the client are told from acpx's to the agent.
    both = set(meta.AGENT_METHODS.values()) & set(meta.CLIENT_METHODS.values())
    to_client = set(meta.CLIENT_METHODS.values()) - both - {acpx.UPDATE}
    assert [m for m in sorted(to_client) if not acpx._from_agent(m)] == []
    assert [m for m in sorted(meta.AGENT_METHODS.values()) if acpx._from_agent(m)] == []


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
    assert transcript.tool_calls == {"t1": {"title": "Edit a.py", "kind": "edit", "status": "failed"}}
    assert transcript.permission_requests == [{"toolCallId": "t1", "title": "Edit a.py"}]
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


# -- usage: what the agent reports it used ------------------------------------------------------------------------


def test_the_usage_names_the_reader_acts_on_are_acps() -> None:
    """``usage_update`` (context used, window size, cumulative cost) and the prompt response's token counts, as
    the ACP SDK's schema spells them."""
    from acp import schema

    assert get_args(schema.UsageUpdate.model_fields["session_update"].annotation) == (acpx.USAGE_UPDATE,)
    wire = {field.alias or name for name, field in schema.UsageUpdate.model_fields.items()}
    assert set(acpx.USAGE_FIELDS) <= wire and "cost" in wire
    assert set(acpx.COST_FIELDS) <= set(schema.Cost.model_fields)
    tokens = {field.alias or name for name, field in schema.Usage.model_fields.items()} - {"_meta"}
    assert set(acpx.TURN_TOKENS) == tokens
    assert schema.PromptResponse.model_fields["usage"].alias in (None, "usage")


def test_the_reader_keeps_the_usage_the_acp_sdk_writes() -> None:
    from acp import schema

    def notification(update: BaseModel) -> dict[str, object]:
        params = schema.SessionNotification(session_id="s", update=update)
        return {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": params.model_dump(by_alias=True, exclude_none=True),
        }

    lines = [
        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s", "prompt": []}},
        notification(schema.UsageUpdate(session_update="usage_update", used=1200, size=200_000)),
        notification(
            schema.UsageUpdate(
                session_update="usage_update", used=5000, size=200_000, cost=schema.Cost(amount=0.25, currency="USD")
            )
        ),
        notification(
            schema.UsageUpdate(
                session_update="usage_update", used=3000, size=200_000, cost=schema.Cost(amount=0.5, currency="USD")
            )
        ),
        {
            "jsonrpc": "2.0",
            "id": 2,
            "result": schema.PromptResponse(
                stop_reason="end_turn",
                usage=schema.Usage(total_tokens=9000, input_tokens=7000, output_tokens=2000, cached_read_tokens=100),
            ).model_dump(by_alias=True, exclude_none=True),
        },
    ]
    assert [acp_schema.message(line) for line in lines][1:] == ["session/update"] * 3 + ["PromptResponse"]
    transcript = acpx.Transcript()
    for line in lines:
        transcript.feed(json.dumps(line))

    usage = transcript.usage
    assert (usage.context_used, usage.context_peak, usage.context_size) == (3000, 5000, 200_000)
    assert (usage.cost, usage.currency) == (0.5, "USD")  # cumulative: the latest, not a sum
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens, usage.cached_read_tokens) == (
        7000,
        2000,
        9000,
        100,
    )
    assert usage.tokens == 9000 and usage.updates == 3 and usage.rejected == 0


def test_an_agent_that_reports_no_usage_has_none_and_no_price() -> None:
    transcript = acpx.Transcript()
    for line in (chunk("Done."), {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}):
        transcript.feed(json.dumps(line))

    assert transcript.usage.empty and transcript.usage.cost is None and transcript.usage.tokens is None


GARBAGE = [
    # update fields, what is kept: (context_used, context_size, cost, currency), rejected values
    pytest.param({"used": -5, "size": 100}, (None, 100, None, None), 1, id="negative"),
    pytest.param({"used": "12", "size": "x"}, (None, None, None, None), 2, id="strings"),
    pytest.param({"used": 10**30, "size": 100}, (None, 100, None, None), 1, id="huge"),
    pytest.param({"used": 1.5, "size": True}, (None, None, None, None), 2, id="float-and-bool"),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": "NaN", "currency": "USD"}}, (7, 9, None, None), 1, id="str-amount"
    ),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": -1, "currency": "USD"}}, (7, 9, None, None), 1, id="neg-cost"
    ),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": 1e300, "currency": "USD"}}, (7, 9, None, None), 1, id="huge-cost"
    ),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": 1, "currency": "US Dollar"}}, (7, 9, None, None), 1, id="bad-code"
    ),
    pytest.param({"used": 7, "size": 9, "cost": "a lot"}, (7, 9, None, None), 1, id="cost-not-object"),
    pytest.param({}, (None, None, None, None), 2, id="empty"),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": 2, "currency": "eur"}}, (7, 9, 2.0, "EUR"), 0, id="lowercase"
    ),
]


@pytest.mark.parametrize(("fields", "kept", "rejected"), GARBAGE)
def test_usage_values_that_are_not_valid_are_counted_and_ignored(
    fields: dict[str, object], kept: tuple[object, ...], rejected: int
) -> None:
    transcript = acpx.Transcript()
    transcript.feed(json.dumps(update(sessionUpdate="usage_update", **fields)))

    usage = transcript.usage
    assert (usage.context_used, usage.context_size, usage.cost, usage.currency) == kept
    assert usage.rejected == rejected and usage.updates == 1


def test_nan_and_infinite_costs_in_the_stream_are_ignored_and_a_currency_change_is_noted() -> None:
    transcript = acpx.Transcript()
    for text in (
        '{"method": "session/update", "params": {"update": {"sessionUpdate": "usage_update", "used": 1, "size": 2, '
        '"cost": {"amount": NaN, "currency": "USD"}}}}',
        '{"method": "session/update", "params": {"update": {"sessionUpdate": "usage_update", "used": 1, "size": 2, '
        '"cost": {"amount": Infinity, "currency": "USD"}}}}',
    ):
        transcript.feed(text)
    assert transcript.usage.cost is None and transcript.usage.rejected == 2
    for currency in ("USD", "EUR"):
        transcript.feed(
            json.dumps(update(sessionUpdate="usage_update", used=1, size=2, cost={"amount": 1, "currency": currency}))
        )
    assert (transcript.usage.cost, transcript.usage.currency) == (1.0, "EUR")
    assert transcript.usage.note is not None and "from USD to EUR" in transcript.usage.note
    # A prompt response whose usage is garbage leaves the turn's counts unset.
    transcript.feed(
        json.dumps({"id": 2, "result": {"stopReason": "end_turn", "usage": {"inputTokens": -1, "totalTokens": "9"}}})
    )
    assert transcript.usage.total_tokens is None and transcript.usage.input_tokens is None


def test_a_real_acpx_stream_carries_the_test_agents_usage_as_acp_defines_it(
    tmp_path: Path, acpx_bin: Path, test_agent_command: str
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    prompt = "acp-test: usage 1500 100000\nacp-test: usage 2500 100000 0.75 USD\nacp-test: tokens 3000 400"
    argv = [str(acpx_bin), "--cwd", str(workdir), "--format", "json", "--approve-all"]
    result = subprocess.run(
        [*argv, "--agent", test_agent_command, "exec", prompt], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    checked = [acp_schema.message(line) for line in lines]
    assert checked.count("session/update") == 2 and "PromptResponse" in checked

    transcript = acpx.Transcript()
    for line in lines:
        transcript.feed(line)
    usage = transcript.usage
    assert (usage.context_used, usage.context_size, usage.cost, usage.currency) == (2500, 100000, 0.75, "USD")
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens, usage.tokens) == (3000, 400, 3400, 3400)


def _acpx_line(update: dict[str, object], session: str = "acp-test-23d7cb88c7034cbe969d1ae352154943") -> bytes:
    """A session/update line as acpx prints it (compact JSON, its order of keys)."""
    message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}}
    return json.dumps(message, separators=(",", ":")).encode()


USAGE_LINES = [
    # (the update, whether the line is read without a JSON parse)
    ({"sessionUpdate": "usage_update", "used": 1500, "size": 200000}, True),
    ({"sessionUpdate": "usage_update", "used": 0, "size": 0}, True),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": {"amount": 0.25, "currency": "usd"}}, True),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": {"amount": 3, "currency": "EUR"}}, True),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": {"amount": -1.5e2, "currency": "EUR"}}, True),
    ({"sessionUpdate": "usage_update", "used": 10**15 + 1, "size": 9}, True),  # beyond any context: rejected either way
    ({"sessionUpdate": "usage_update", "used": 10**16, "size": 9}, False),
    ({"sessionUpdate": "usage_update", "used": 1.5, "size": 9}, False),
    ({"sessionUpdate": "usage_update", "used": -1, "size": 9}, False),
    ({"sessionUpdate": "usage_update", "size": 9, "used": 7}, False),  # another order
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "_meta": {"used": 99}}, False),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": {"currency": "USD", "amount": 1}}, False),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": None}, False),
    ({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "used 7"}}, False),
]


@pytest.mark.parametrize(("update", "fast"), USAGE_LINES)
def test_a_usage_update_read_without_a_json_parse_means_what_the_parse_would(
    update: dict[str, object], fast: bool
) -> None:
    line = _acpx_line(update)
    assert (acpx.USAGE_LINE.fullmatch(line) is not None) is fast
    read, parsed = acpx.Transcript(), acpx.Transcript()

    message = read.feed(line)
    parsed.feed(line.decode())  # (text goes through the JSON parse)
    followed = acpx.Transcript()
    followed.follow(line)  # as the run's stream is read: no message made of a usage line

    assert read.usage == parsed.usage == followed.usage
    assert message == json.loads(line)


def _usage(used: object, size: object = 200_000, cost: object = None, currency: str = "USD") -> dict[str, object]:
    update: dict[str, object] = {"sessionUpdate": "usage_update", "used": used, "size": size}
    if cost is not None:
        update["cost"] = {"amount": cost, "currency": currency}
    return update


SESSION = "acp-test-23d7cb88c7034cbe969d1ae352154943"
MIXED_STREAM = [
    json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": SESSION}}).encode(),
    *(_acpx_line(_usage(used)) for used in (10, 900, 30)),  # a burst without cost: its peak is not its last
    *(_acpx_line(update) for update, _ in USAGE_LINES),  # every shape, fast or not, valid or not
    _acpx_line({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "working\nstill"}}),
    *(_acpx_line(_usage(used, cost=used / 100)) for used in (50, 60, 70)),  # a burst with a cost
    _acpx_line(_usage(80, cost=0.9, currency="eur")),  # the currency changes
    _acpx_line(_usage(85, cost=1)),
    _acpx_line(_usage(90, 10**15)),  # a figure beyond what a burst admits, then one it does
    _acpx_line(_usage(95, cost=2e3)),  # a cost with an exponent, after JSON's own writing
    _acpx_line(_usage(5), session="another-session"),
    _acpx_line({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "edit", "status": "pending"}),
    *(_acpx_line(_usage(used)) for used in range(100, 140)),
    b"not json at all",
    b"",
    json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn", "usage": {"totalTokens": 5}}}).encode(),
]


@pytest.mark.parametrize("seed", [*range(12), None])
def test_following_the_lines_of_each_read_keeps_what_feeding_them_one_by_one_keeps(seed: int | None) -> None:
    """The run's reader takes the lines a read brought together (a burst of usage updates at once, the others one
    by one without a parse); however the stream falls into reads, what it keeps is what feeding each line keeps.
    (Reads cut at random, one read in all, and a read a line.)"""
    count = len(MIXED_STREAM)
    cuts = sorted(random.Random(seed).sample(range(1, count), k=seed % 7)) if seed is not None else [*range(1, count)]
    reads = [MIXED_STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(MIXED_STREAM)], strict=True)]
    one_by_one, together = acpx.Transcript(), acpx.Transcript()
    for line in MIXED_STREAM:
        one_by_one.feed(line)
    for read in reads:
        together.follow(b"\n".join(read))

    assert together == one_by_one
    usage = together.usage
    assert (usage.updates, usage.context_used, usage.context_peak, usage.context_size) == (64, 139, 1500, 200_000)
    assert (usage.cost, usage.currency) == (2000.0, "USD")
    assert usage.note == "the agent changed its cost's currency from EUR to USD during the run"
    assert (together.latest, together.stop_reason, usage.total_tokens) == ("edit (pending)", "end_turn", 5)


def test_a_read_of_usage_updates_alone_is_taken_whole_and_any_other_read_is_left_to_the_lines() -> None:
    burst = acpx._Burst(SESSION.encode())
    plain = b"\n".join(_acpx_line(_usage(used)) for used in (3, 9, 4))
    costed = b"\n".join(_acpx_line(_usage(used, cost=used / 10)) for used in (3, 9, 4))
    usage = guardrails.Usage()

    assert burst.took(usage, plain) and burst.took(usage, costed)
    assert (usage.updates, usage.context_used, usage.context_peak, usage.cost) == (6, 4, 9, 0.4)
    for other in (
        plain + b"\n" + _acpx_line({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "x"}}),
        plain + b"\n",  # an empty line
        plain.replace(b'"used":9', b'"used":9.5'),
        plain + b"\n" + _acpx_line(_usage(1), session="another"),
        _acpx_line(_usage(10**15)),
        _acpx_line(_usage(1, cost=-1)),
        costed.replace(b'"USD"', b'"usd"', 1),  # a currency written two ways
        _acpx_line(_usage(1, cost=1, currency="EUR")),  # another currency than the run's so far
    ):
        assert not burst.took(usage, other)
    assert usage.updates == 6  # (nothing of a read it left was taken)
    # A resumed session's cost counts from the earlier run's figure: each of its updates is taken one by one.
    earlier = guardrails.Usage(cost=0.2, currency="USD", session_cost=0.2)
    assert not burst.took(guardrails.Usage.resuming(earlier), costed)


def test_a_session_id_the_pattern_does_not_take_goes_through_the_json_parse() -> None:
    update = {"sessionUpdate": "usage_update", "used": 7, "size": 9}
    line = _acpx_line(update, session='a\\"b')
    assert acpx.USAGE_LINE.fullmatch(line) is None
    transcript = acpx.Transcript()
    transcript.feed(line)
    assert transcript.usage.context_used == 7
