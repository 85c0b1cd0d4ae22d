"""The ACP names and shapes the stream's reader acts on, each as the ACP SDK's schema spells it."""

from __future__ import annotations

import json
from typing import get_args

from pydantic import BaseModel

from beflow.agent import acp_wire


def test_the_names_the_reader_acts_on_are_acps() -> None:
    """Methods, update kinds, tool call fields and statuses, each as the ACP SDK's schema spells it."""
    from acp import meta, schema

    def literal(model: type[BaseModel], field: str) -> tuple[object, ...]:
        return get_args(model.model_fields[field].annotation)

    assert (meta.AGENT_METHODS["session_new"], meta.AGENT_METHODS["session_prompt"]) == (
        acp_wire.NEW_SESSION,
        acp_wire.PROMPT,
    )
    assert meta.CLIENT_METHODS["session_update"] == acp_wire.UPDATE
    assert meta.CLIENT_METHODS["session_request_permission"] == acp_wire.REQUEST_PERMISSION
    assert literal(schema.AgentMessageChunk, "session_update") == (acp_wire.MESSAGE_CHUNK,)
    assert literal(schema.ToolCallStart, "session_update") == (acp_wire.TOOL_CALL,)
    assert literal(schema.ToolCallProgress, "session_update") == (acp_wire.TOOL_CALL_UPDATE,)
    assert set(acp_wire.TOOL_FIELDS) <= set(schema.ToolCallProgress.model_fields) & set(
        schema.ToolCallStart.model_fields
    )
    assert set(acp_wire.TOOL_ENDED) <= set(get_args(schema.ToolCallStatus))
    # Which side sends a request: the agent's requests to the client are told from acpx's to the agent.
    both = set(meta.AGENT_METHODS.values()) & set(meta.CLIENT_METHODS.values())
    to_client = set(meta.CLIENT_METHODS.values()) - both - {acp_wire.UPDATE}
    assert [m for m in sorted(to_client) if not acp_wire.from_agent(m)] == []
    assert [m for m in sorted(meta.AGENT_METHODS.values()) if acp_wire.from_agent(m)] == []


def test_the_usage_names_the_reader_acts_on_are_acps() -> None:
    """``usage_update`` (context used, window size, cumulative cost) and the prompt response's token counts, as
    the ACP SDK's schema spells them."""
    from acp import schema

    assert get_args(schema.UsageUpdate.model_fields["session_update"].annotation) == (acp_wire.USAGE_UPDATE,)
    wire = {field.alias or name for name, field in schema.UsageUpdate.model_fields.items()}
    assert set(acp_wire.USAGE_FIELDS) <= wire and "cost" in wire
    assert set(acp_wire.COST_FIELDS) <= set(schema.Cost.model_fields)
    tokens = {field.alias or name for name, field in schema.Usage.model_fields.items()} - {"_meta"}
    assert set(acp_wire.TURN_TOKENS) == tokens
    assert schema.PromptResponse.model_fields["usage"].alias in (None, "usage")


def test_unknown_fields_are_ignored_and_a_field_only_shown_that_is_not_of_its_type_reads_as_absent() -> None:
    line = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "s",
            "future": {"of": "acp"},
            "update": {
                "sessionUpdate": "tool_call",
                "toolCallId": "t1",
                "title": 42,
                "status": "pending",
                "_meta": {"x": 1},
                "locations": [{"path": "/w/a.py"}],
            },
        },
    }
    message = acp_wire.decode(json.dumps(line))
    assert isinstance(message, acp_wire.UpdateMessage) and message.params is not None
    update = message.params.update
    assert isinstance(update, acp_wire.ToolCall)
    assert (update.tool_call_id, update.title, update.status) == ("t1", None, "pending")
    assert "title" in update.model_fields_set  # (it was sent: an update of the title to nothing)
    other = acp_wire.SessionNotification.model_validate({"update": {"sessionUpdate": "plan", "entries": []}})
    assert isinstance(other.update, acp_wire.OtherUpdate)
    assert acp_wire.decode("not json") is None and acp_wire.decode("[1, 2]") is None
