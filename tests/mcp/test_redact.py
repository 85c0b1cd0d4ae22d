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


def test_the_lines_of_a_read_are_masked_together_as_each_would_be_alone() -> None:
    """A run's output is masked a read at a time: a session/new among other lines has its server values masked, and
    a value is masked wherever it stands."""
    redact = Redactor(SERVERS)
    session_new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"mcpServers": wire(SERVERS)}}
    lines = [b"first", json.dumps(session_new).encode(), b"the key: env-secret-value", b"", b"last"]

    masked = redact(b"\n".join(lines)).split(b"\n")

    assert masked == [redact(line) for line in lines]
    assert b"abc" not in masked[1] and MASK.encode() in masked[2]


def test_for_hook_output_values_of_any_length_are_masked_where_they_stand_as_words() -> None:
    redact = Redactor(SERVERS, words=True)

    assert redact(b"A=abc\n") == f"A={MASK}\n".encode()
    assert redact(b'{"value": "abc"} abc. (abc)') == f'{{"value": "{MASK}"}} {MASK}. ({MASK})'.encode()
    assert redact(b"env-secret-value") == MASK.encode()
    assert redact(b"fabcd abc_1 xabc") == b"fabcd abc_1 xabc"  # inside other words: not the value


def test_beflows_own_secrets_are_masked_raw_and_json_escaped_and_are_needles_of_the_leak_check() -> None:
    token = 'ghp_tok"en\\value-0123'
    redact = Redactor(SERVERS, secrets=[token, ""])

    assert redact.text(f"the token is {token}") == f"the token is {MASK}"
    assert redact.text(json.dumps({"said": token})) == json.dumps({"said": MASK}, ensure_ascii=False)
    assert {token.encode(), json.dumps(token)[1:-1].encode()} <= set(redact.needles())
    assert b"" not in redact.needles()


def test_the_token_of_a_scheme_word_header_is_masked_when_said_bare() -> None:
    servers = TypeAdapter(list[AcpServer]).validate_python(
        [
            {
                "type": "http",
                "name": "api",
                "url": "u",
                "headers": [{"name": "Authorization", "value": "Bearer tok-12345678"}],
            },
            {"type": "http", "name": "x", "url": "u", "headers": [{"name": "X-Note", "value": "hello world-wide"}]},
        ]
    )
    redact = Redactor(servers, secrets=["token gh-abcdefgh"])

    assert redact.text("curl -H 'Authorization: Bearer tok-12345678'") == f"curl -H 'Authorization: {MASK}'"
    assert redact.text("the token tok-12345678 alone") == f"the token {MASK} alone"
    assert redact.text("gh-abcdefgh") == MASK
    assert b"tok-12345678" in redact.needles()
    # Only after a scheme word: a value with a space is not taken apart
    assert redact.text("world-wide") == "world-wide"
