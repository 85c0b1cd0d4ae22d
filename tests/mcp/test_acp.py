"""Translation to the ACP ``McpServer`` shape, the run-facing ``resolve_servers``, and acpx's global config."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beflow.config import load_project
from beflow.errors import ConfigError
from beflow.mcp import acp, cascade
from beflow.mcp.acp import (
    MASK,
    AcpStdio,
    acp_servers,
    resolve_servers,
    server_names,
    shadowed_global_servers,
    translate,
    wire,
)
from beflow.mcp.cascade import RemoteServer, StdioServer, resolved_servers
from beflow.mcp.own import own_server
from beflow.mcpserver.channel import RunChannel
from tests.mcp.conftest import SEED_CODEGRAPH, SEED_DOCS, SEED_MCP_JSON, write_mcp
from tests.support import acp_schema


def test_the_seed_examples_come_out_exactly_as_the_seed_shows_them(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", SEED_MCP_JSON)
    codegraph, docs = translate(resolved_servers(load_project(), {}))
    # The seed's JSON, parsed in order, and ours, printed the same way: same keys, same order, same values.
    assert json.dumps(codegraph, indent=2) == json.dumps(json.loads(SEED_CODEGRAPH), indent=2)
    assert json.dumps(docs, indent=2) == json.dumps(json.loads(SEED_DOCS), indent=2)


@pytest.mark.parametrize("reveal", [True, False])
def test_every_shape_is_acps_mcp_server_of_its_kind(reveal: bool) -> None:
    """The ACP SDK's models are the reference: stdio, http and sse, with and without env, headers and args, shown
    or masked, each validates as its kind and loses nothing in the SDK's hands."""
    servers = [
        ("bare", StdioServer(command="run")),
        ("full", StdioServer(command="/usr/bin/run", args=["--x", "${HOME}"], env={"KEY": "secret", "B": ""})),
        ("web", RemoteServer(type="http", url="https://example.com/mcp", headers={"Authorization": "Bearer t"})),
        ("plain", RemoteServer(type="http", url="http://localhost:1/mcp")),
        ("events", RemoteServer(type="sse", url="https://example.com/sse", headers={"X-Key": "k"})),
    ]
    entries = translate(servers, reveal=reveal)
    assert sorted({entry.get("type") for entry in entries}, key=str) == [None, "http", "sse"]
    for entry in entries:
        acp_schema.mcp_server(entry)


def test_beflows_own_server_is_acps_stdio_server(project_dir: Path) -> None:
    channel = RunChannel(load_project(), "7", "r-1")
    own = own_server(load_project(), issue="7", run_id="r-1", socket=str(channel.path), capability=channel.capability)
    (entry,) = wire([own])
    acp_schema.mcp_server(entry)
    assert entry["args"][-8:] == ["--issue", "7", "--run", "r-1", "--channel", str(channel.path), "--poll", "2"]
    assert {"name": "BEFLOW_MCP_CAPABILITY", "value": channel.capability} in entry["env"]


def test_stdio_has_no_type_and_always_args_and_env() -> None:
    assert translate([("s", StdioServer(command="run"))]) == [{"name": "s", "command": "run", "args": [], "env": []}]


@pytest.mark.parametrize("kind", ["http", "sse"])
def test_remote_servers_keep_their_type_and_always_have_headers(kind: str) -> None:
    (server,) = translate([("r", RemoteServer(type=kind, url="https://x"))])
    assert list(server) == ["type", "name", "url", "headers"]
    assert server == {"type": kind, "name": "r", "url": "https://x", "headers": []}


def test_servers_are_sorted_by_name_and_records_keep_file_order() -> None:
    servers = [
        ("zeta", StdioServer(command="z", env={"B": "2", "A": "1"})),
        ("Alpha", StdioServer(command="a")),
        ("beta", RemoteServer(type="sse", url="https://b", headers={"X-Z": "z", "X-A": "a"})),
    ]
    translated = translate(servers)
    assert server_names(acp_servers(servers)) == ["Alpha", "beta", "zeta"]  # code point order: capitals first
    assert translated[2]["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert translated[1]["headers"] == [{"name": "X-Z", "value": "z"}, {"name": "X-A", "value": "a"}]


def test_masking_hides_env_and_header_values_only() -> None:
    servers = [
        ("s", StdioServer(command="c", args=["--flag"], env={"TOKEN": "t"})),
        ("h", RemoteServer(type="http", url="https://u", headers={"Authorization": "Bearer t"})),
    ]
    h, s = translate(servers, reveal=False)
    assert h["headers"] == [{"name": "Authorization", "value": MASK}]
    assert s["env"] == [{"name": "TOKEN", "value": MASK}]
    assert (s["command"], s["args"], h["url"]) == ("c", ["--flag"], "https://u")


def test_resolve_servers_is_none_when_injection_is_off(repo: Path) -> None:
    write_mcp(repo / ".mcp.json", SEED_MCP_JSON)
    assert resolve_servers(load_project(), {}) is None


def test_resolve_servers_is_none_when_nothing_resolves(project_dir: Path) -> None:
    assert resolve_servers(load_project(), {}) is None
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"s": {"command": "x", "disabled": true}}}')
    assert resolve_servers(load_project(), {}) is None


def test_resolve_servers_expands_with_the_given_environment(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"s": {"command": "x", "env": {"T": "${TOKEN}"}}}}')
    servers = resolve_servers(load_project(), {"TOKEN": "abc"})
    assert servers is not None
    assert wire(servers) == [{"name": "s", "command": "x", "args": [], "env": [{"name": "T", "value": "abc"}]}]
    assert server_names(servers) == ["s"]
    with pytest.raises(ConfigError, match=r"\$\{TOKEN\} is not set"):
        resolve_servers(load_project(), {})


def test_resolve_servers_reads_beflows_environment_by_default(
    project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"s": {"command": "${BIN}"}}}')
    monkeypatch.setenv("BIN", "/opt/server")
    (server,) = resolve_servers(load_project()) or []
    assert isinstance(server, AcpStdio) and server.command == "/opt/server"


def test_resolving_the_same_files_in_the_same_environment_again_reads_and_validates_nothing_again(
    project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checks before a run and the run itself both resolve the servers; so does every run of a watch.
    path = write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"s": {"command": "x", "env": {"T": "${TOKEN}"}}}}')
    validated: list[object] = []
    original = cascade._read_file
    monkeypatch.setattr(cascade, "_read_file", lambda *args: validated.append(args) or original(*args))
    translated: list[object] = []
    original_acp = acp.acp_servers
    monkeypatch.setattr(acp, "acp_servers", lambda *args: translated.append(args) or original_acp(*args))
    project = load_project()

    first = resolve_servers(project, {"TOKEN": "abc"})
    again = resolve_servers(project, {"TOKEN": "abc"})
    assert (
        wire(first or [])
        == wire(again or [])
        == [{"name": "s", "command": "x", "args": [], "env": [{"name": "T", "value": "abc"}]}]
    )
    assert (len(validated), len(translated)) == (1, 1)

    # Another environment: expanded again from the same validated file.
    (server,) = resolve_servers(project, {"TOKEN": "xyz"}) or []
    assert isinstance(server, AcpStdio) and server.env[0].value == "xyz"
    assert (len(validated), len(translated)) == (1, 2)
    with pytest.raises(ConfigError, match=r"\$\{TOKEN\} is not set"):
        resolve_servers(project, {})

    # The file edited (same size, at once): read and validated again.
    path.write_text(path.read_text().replace('"x"', '"y"'))
    (server,) = resolve_servers(project, {"TOKEN": "xyz"}) or []
    assert isinstance(server, AcpStdio) and server.command == "y"
    assert len(validated) == 2
    path.write_text('{"mcpServers": {"s": {"command": 1}}}')
    with pytest.raises(ConfigError, match=r"mcpServers\.s\.command"):
        resolve_servers(project, {"TOKEN": "xyz"})


# --- acpx's global config ------------------------------------------------------------------------------------


def acpx_global(content: str) -> Path:
    path = Path(os.environ["HOME"]) / ".acpx" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


def test_global_servers_are_found_where_acpx_looks_under_HOME() -> None:
    path = acpx_global(json.dumps({"mcpServers": [{"name": "a", "command": "x"}, {"name": "b", "url": "u"}]}))
    shadowed = shadowed_global_servers()
    assert shadowed is not None and shadowed.path == path and shadowed.names == ["a", "b"]


@pytest.mark.parametrize("content", ['{"mcpServers": []}', '{"defaultAgent": "codex"}', "not json", "[1]"])
def test_nothing_is_shadowed_without_global_servers(content: str) -> None:
    acpx_global(content)
    assert shadowed_global_servers() is None


def test_no_global_config_shadows_nothing() -> None:
    assert shadowed_global_servers() is None
