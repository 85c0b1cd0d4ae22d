"""The ACP SDK (``agent-client-protocol``) as the reference for every ACP shape beflow writes or reads.

beflow itself never imports the SDK (loading its schema costs more CPU than a whole ``beflow --help``); the tests
check beflow's shapes against it instead, so that a drift from the protocol fails a test.
"""

from __future__ import annotations

import json
from typing import Any

from acp import schema
from pydantic import BaseModel

#: The params of the requests and notifications the transcript reader acts on, by method.
PARAMS: dict[str, type[BaseModel]] = {
    "initialize": schema.InitializeRequest,
    "session/new": schema.NewSessionRequest,
    "session/prompt": schema.PromptRequest,
    "session/update": schema.SessionNotification,
    "session/request_permission": schema.RequestPermissionRequest,
}

#: The results the reader reads, told apart by the key each must have.
RESULTS: dict[str, type[BaseModel]] = {
    "stopReason": schema.PromptResponse,
    "outcome": schema.RequestPermissionResponse,
    "protocolVersion": schema.InitializeResponse,
}

#: One MCP server as ``session/new`` carries it, by its ``type`` (stdio has none).
MCP_SERVERS: dict[str | None, type[BaseModel]] = {
    None: schema.McpServerStdio,
    "http": schema.HttpMcpServer,
    "sse": schema.SseMcpServer,
}


def conforms(model: type[BaseModel], data: Any) -> None:
    """``data`` is a valid ``model`` and says nothing the model does not know: the SDK's models accept and drop
    unknown keys (and salvage some bad values), so the data must also come back unchanged from the model."""
    parsed = model.model_validate(data)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == data, model.__name__


def mcp_server(entry: dict[str, Any]) -> None:
    """One entry of an ``mcpServers`` list is ACP's ``McpServer`` of its kind."""
    conforms(MCP_SERVERS.get(entry.get("type"), schema.McpServerStdio), entry)


def message(line: str | dict[str, Any]) -> str:
    """One JSON-RPC message of a transcript conforms to ACP, as far as the reader reads it; returns what was
    checked (the method, or the result's model), so that a test can say the check covered what it meant to."""
    data = json.loads(line) if isinstance(line, str) else line
    method = data.get("method")
    if method in PARAMS:
        conforms(PARAMS[method], data["params"])
        return str(method)
    result = data.get("result")
    if isinstance(result, dict):
        for key, model in RESULTS.items():
            if key in result:
                conforms(model, result)
                return model.__name__
    return ""
