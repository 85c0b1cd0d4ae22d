"""The secret values of the injected MCP servers never reach a run record."""

from __future__ import annotations

import json

from pydantic import TypeAdapter

from beflow.mcp.acp import MASK, AcpServer, wire
from beflow.mcp.redact import Redactor

SERVERS = TypeAdapter(list[AcpServer]).validate_python(
    [
        {"name": "tools", "command": "t", "args": [], "env": [{"name": "KEY", "value": "env-secret-value"}]},
        {"type": "http", "name": "docs", "url": "u", "headers": [{"name": "A", "value": "abc"}]},
    ]
)


def test_the_redactor_masks_server_values_in_session_new_and_long_values_anywhere() -> None:
    redact = Redactor(SERVERS)
    session_new = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "session/new",
        "params": {"cwd": "/w", "mcpServers": wire(SERVERS)},
    }

    masked = json.loads(redact(json.dumps(session_new).encode()))

    servers = masked["params"]["mcpServers"]
    assert servers[0]["env"] == [{"name": "KEY", "value": MASK}]
    assert servers[1]["headers"] == [{"name": "A", "value": MASK}]  # short, but known to be a secret here
    assert redact(b"agent said env-secret-value twice: env-secret-value") == f"agent said {MASK} twice: {MASK}".encode()
    assert redact(b"abc is too short to mask in free text") == b"abc is too short to mask in free text"
    assert Redactor()(b"untouched") == b"untouched"


def test_for_hook_output_values_of_any_length_are_masked_where_they_stand_as_words() -> None:
    redact = Redactor(SERVERS, words=True)

    assert redact(b"A=abc\n") == f"A={MASK}\n".encode()
    assert redact(b'{"value": "abc"} abc. (abc)') == f'{{"value": "{MASK}"}} {MASK}. ({MASK})'.encode()
    assert redact(b"env-secret-value") == MASK.encode()
    assert redact(b"fabcd abc_1 xabc") == b"fabcd abc_1 xabc"  # inside other words: not the value
