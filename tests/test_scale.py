"""Work in proportion to the input: a big ``.mcp.json`` is read by the C JSON parser when it is plain JSON, its
secrets are masked in one pass, and what comes out is exactly what the slower paths gave."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beflow import validation
from beflow.errors import ConfigError
from beflow.mcp import acp
from beflow.mcp.acp import AcpStdio, NameValue
from beflow.mcp.redact import FEW_SECRETS, Redactor


def servers_with(values: list[str]) -> list[AcpStdio]:
    return [
        AcpStdio(name=f"s{i}", command="c", args=[], env=[NameValue(name="K", value=v)]) for i, v in enumerate(values)
    ]


secret = st.text(
    st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters='"\\'), min_size=6, max_size=40
)


@settings(max_examples=30, deadline=None)
@given(st.lists(secret, min_size=FEW_SECRETS + 1, max_size=80, unique=True), st.text(max_size=200))
def test_many_secrets_are_masked_in_one_pass_exactly_as_one_by_one(values: list[str], noise: str) -> None:
    text = (noise + " ".join(values) + noise).encode()
    one_by_one = text
    for value in sorted(values, key=len, reverse=True):
        one_by_one = one_by_one.replace(value.encode(), acp.MASK.encode())
    masked = Redactor(servers_with(values))(text)
    for value in values:
        assert value.encode() not in masked
    if not any(a != b and a in b for a in values for b in values):  # no secret inside another: same result
        assert masked == one_by_one


def test_a_very_long_secret_among_many_is_masked() -> None:
    values = ["t" * 20_000, *(f"secret-{i:04d}" for i in range(500))]
    line = json.dumps({"method": "x", "params": {"text": " ".join(values[::-1])}}).encode()
    masked = Redactor(servers_with(values))(line)
    assert b"secret-" not in masked and b"t" * 100 not in masked


def test_the_session_new_line_of_thousands_of_servers_is_masked() -> None:
    values = [f"secret-value-{i:05d}" for i in range(3000)]
    servers = servers_with(values)
    wire = [server.model_dump(mode="json") for server in servers]
    line = json.dumps({"jsonrpc": "2.0", "method": "session/new", "params": {"mcpServers": wire}}).encode()
    masked = json.loads(Redactor(servers)(line))
    assert {pair["value"] for s in masked["params"]["mcpServers"] for pair in s["env"]} == {acp.MASK}


def test_plain_json_is_read_without_json5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text('{"mcpServers": {"a": {"command": "x", "args": [1.5, null, true]}}}')
    monkeypatch.setattr(validation.json5, "loads", lambda *a, **k: pytest.fail("json5 for plain JSON"))
    assert validation.read_json5(path)[1] == {"mcpServers": {"a": {"command": "x", "args": [1.5, None, True]}}}


@pytest.mark.parametrize(
    "text", ['{"a": 1, // a comment\n "b": 2}', "{a: 1, b: 2,}", "{'a': 1, \"b\": 2}", '{"a": 1, "b": 2,}']
)
def test_json5_is_still_read(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    assert validation.read_json5(path)[1] == {"a": 1, "b": 2}


def test_a_key_given_twice_in_plain_json_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text('{"mcpServers": {"a": {"command": "x"},\n "a": {"command": "y"}}}')
    with pytest.raises(ConfigError, match=r"\.mcp\.json:2: mcpServers\.a: key given twice \(first at line 1\)"):
        validation.read_json5(path)
