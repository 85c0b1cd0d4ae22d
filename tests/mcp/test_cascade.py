"""The ``.mcp.json`` cascade: loading, validation, merging, ``disabled`` and ``${VAR}`` expansion."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beflow.config import load_project
from beflow.doctor import check_mcp
from beflow.errors import ConfigError
from beflow.mcp.cascade import check_cascade, expand_string, load_cascade, resolved_servers
from tests.mcp.conftest import SEED_MCP_JSON, write_mcp
from tests.support.projects import config_file


def problems(environ: dict[str, str] | None = None) -> list[str]:
    return [p.render() for p in check_cascade(load_project(), environ or {}).problems]


def resolved(environ: dict[str, str] | None = None) -> dict[str, dict]:
    return {name: server.model_dump() for name, server in resolved_servers(load_project(), environ or {})}


# --- files and merging ---------------------------------------------------------------------------------------


def test_missing_files_are_skipped(project_dir: Path) -> None:
    cascade = load_cascade(load_project())
    assert cascade.entries == []
    assert [(s.scope, s.exists) for s in cascade.sources] == [("global", False), ("project", False)]


def test_the_seed_example_loads_with_comments_and_trailing_commas(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", "// servers for this repo\n" + SEED_MCP_JSON)
    servers = resolved()
    assert servers["codegraph"]["command"] == "bunx"
    assert servers["docs"]["headers"] == {"Authorization": "Bearer TOKEN"}


def test_project_entry_replaces_the_global_one_whole_and_keeps_the_others(
    project_dir: Path, isolated_home: Path
) -> None:
    write_mcp(
        isolated_home / ".mcp.json",
        '{"mcpServers": {"shared": {"command": "global-cmd", "env": {"ONLY_GLOBAL": "1"}}, "g": {"command": "g"}}}',
    )
    write_mcp(
        project_dir / ".mcp.json", '{"mcpServers": {"shared": {"command": "project-cmd"}, "p": {"command": "p"}}}'
    )
    cascade = load_cascade(load_project())
    by_name = {e.name: e for e in cascade.entries}
    assert sorted(by_name) == ["g", "p", "shared"]
    assert by_name["shared"].origin == project_dir / ".mcp.json"
    assert by_name["shared"].overrides == isolated_home / ".mcp.json"
    assert by_name["g"].origin == isolated_home / ".mcp.json"
    assert resolved()["shared"] == {
        "disabled": False,
        "type": "stdio",
        "command": "project-cmd",
        "args": [],
        "env": {},
    }


def test_type_defaults_to_stdio(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"s": {"command": "run"}}}')
    assert resolved()["s"]["type"] == "stdio"


def test_disabled_drops_a_server(project_dir: Path) -> None:
    write_mcp(
        project_dir / ".mcp.json", '{"mcpServers": {"off": {"command": "x", "disabled": true}, "on": {"command": "y"}}}'
    )
    assert list(resolved()) == ["on"]
    assert [e.name for e in load_cascade(load_project()).entries] == ["off", "on"]


def test_a_project_switches_a_global_server_off(project_dir: Path, isolated_home: Path) -> None:
    write_mcp(isolated_home / ".mcp.json", '{"mcpServers": {"noisy": {"command": "noisy"}, "kept": {"command": "k"}}}')
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"noisy": {"disabled": true}}}')
    assert list(resolved()) == ["kept"]


def test_a_disabled_entry_with_fields_is_still_validated(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"off": {"disabled": true, "comand": "x"}}}')
    assert any("mcpServers.off.comand: unknown key (did you mean 'command'?)" in p for p in problems())


# --- validation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('{"args": ["a"]}', "mcpServers.s.command: required key is missing"),
        ('{"type": "http"}', "mcpServers.s.url: required key is missing"),
        ('{"type": "sse", "url": "https://x", "env": {}}', "mcpServers.s.env: unknown key"),
        ('{"command": "c", "headers": {}}', "mcpServers.s.headers: unknown key"),
        ('{"type": "ws", "url": "x"}', "mcpServers.s.type: expected 'stdio', 'http' or 'sse' (got 'ws')"),
        ('{"command": "c", "args": ["ok", 3]}', "mcpServers.s.args.1: expected a string (got 3)"),
        ('{"command": "c", "args": "one"}', 'mcpServers.s.args: expected a list (got "one")'),
        ('{"command": "c", "env": {"N": 1}}', "mcpServers.s.env.N: expected a string (got 1)"),
        ('{"type": "http", "url": "https://x", "headers": {"H": true}}', "mcpServers.s.headers.H: expected a string"),
        ('{"command": ""}', "mcpServers.s.command: expected at least 1 character"),
        ('"npx server"', "mcpServers.s: expected an object (got 'npx server')"),
    ],
)
def test_a_wrong_entry_names_file_line_server_and_field(project_dir: Path, entry: str, expected: str) -> None:
    path = write_mcp(project_dir / ".mcp.json", '{\n  "mcpServers": {\n    "s": ' + entry + "\n  }\n}\n")
    found = problems()
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}:3: {expected}"), found


def test_the_top_level_is_checked(project_dir: Path) -> None:
    path = write_mcp(project_dir / ".mcp.json", '{"servers": {}, "mcpServers": []}')
    assert problems() == [
        f"{path}:1: servers: unknown key (expected mcpServers)",
        f"{path}:1: mcpServers: expected an object of servers (got list)",
    ]
    write_mcp(project_dir / ".mcp.json", "[]")
    assert problems() == [f"{path}:1: expected a JSON object at the top level (got list)"]


def test_a_syntax_error_names_the_line(project_dir: Path) -> None:
    path = write_mcp(project_dir / ".mcp.json", '{\n  "mcpServers": {\n    "s": {"command": "x"\n  }\n')
    (problem,) = problems()
    assert problem.startswith(f"{path}:")
    assert "invalid JSON5" in problem


def test_a_blank_server_name_is_refused(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {" s": {"command": "x"}}}')
    assert "must not be blank or start or end with spaces" in problems()[0]


def test_every_problem_of_both_files_is_listed_and_valid_entries_survive(
    project_dir: Path, isolated_home: Path
) -> None:
    global_file = write_mcp(
        isolated_home / ".mcp.json", '{"mcpServers": {"a": {"type": "http"}, "ok": {"command": "o"}}}'
    )
    project_file = write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"b": {"command": 5}, "c": {}}}')
    found = problems()
    assert [p.split(": ")[1] for p in found] == ["mcpServers.a.url", "mcpServers.b.command", "mcpServers.c.command"]
    assert found[0].startswith(str(global_file)) and found[1].startswith(str(project_file))
    with pytest.raises(ConfigError) as raised:
        resolved()
    assert raised.value.message.startswith("3 problems in the MCP cascade:")


# --- expansion -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "environ", "expected"),
    [
        ("${A}", {"A": "x"}, "x"),
        ("pre-${A}-post", {"A": "x"}, "pre-x-post"),
        ("${A:-fallback}", {}, "fallback"),
        ("${A:-fallback}", {"A": ""}, "fallback"),  # as in a shell: empty counts as unset for `:-`
        ("${A:-fallback}", {"A": "set"}, "set"),
        ("${A:-}", {}, ""),
        ("${A:-with spaces/and:colons}", {}, "with spaces/and:colons"),
        ("${A}", {"A": ""}, ""),
        ("${A}${B}", {"A": "1", "B": "2"}, "12"),
        ("${A}", {"A": "${B}"}, "${B}"),  # a value is not expanded again
        ("$A and $ and {A}", {"A": "x"}, "$A and $ and {A}"),  # only ${...} is a reference
    ],
)
def test_expand_string(text: str, environ: dict[str, str], expected: str) -> None:
    assert expand_string(text, environ) == expected


def test_every_field_is_expanded(project_dir: Path) -> None:
    write_mcp(
        project_dir / ".mcp.json",
        """{"mcpServers": {
          "s": {"command": "${BIN}", "args": ["--index", "${IDX:-/tmp/i}"], "env": {"${KEEP}": "${TOKEN}"}},
          "h": {"type": "http", "url": "${BASE}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
        }}""",
    )
    servers = resolved({"BIN": "/usr/bin/srv", "TOKEN": "t0k", "BASE": "https://h.example"})
    assert servers["s"]["command"] == "/usr/bin/srv"
    assert servers["s"]["args"] == ["--index", "/tmp/i"]
    assert servers["s"]["env"] == {"${KEEP}": "t0k"}  # names are not expanded, values are
    assert servers["h"]["url"] == "https://h.example/mcp"
    assert servers["h"]["headers"] == {"Authorization": "Bearer t0k"}


def test_an_unset_variable_names_the_variable_and_server_never_a_value(project_dir: Path) -> None:
    path = write_mcp(
        project_dir / ".mcp.json",
        '{\n "mcpServers": {\n  "api": {\n   "type": "http",\n   "url": "https://x",\n'
        '   "headers": {"Authorization": "Bearer ${API_TOKEN} ${OTHER}"}\n  }\n }\n}\n',
    )
    with pytest.raises(ConfigError) as raised:
        resolved({"OTHER": "s3cret-value"})
    message = raised.value.message
    assert f"{path}:6: mcpServers.api.headers.Authorization: ${{API_TOKEN}} is not set and has no default" in message
    assert "(server 'api')" in message
    assert "s3cret-value" not in message


def test_a_malformed_reference_is_an_error(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"s": {"command": "x", "args": ["${1BAD}", "${OPEN"]}}}')
    found = problems()
    assert "mcpServers.s.args.0: malformed reference '${1BAD}'" in found[0]
    assert "mcpServers.s.args.1: malformed reference '${OPEN'" in found[1]


def test_a_url_must_be_http_after_expansion_and_is_not_shown(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"h": {"type": "sse", "url": "${U}"}}}')
    (problem,) = problems({"U": "ftp://secret@host"})
    assert "mcpServers.h.url: expected an http:// or https:// URL after expansion (server 'h')" in problem
    assert "secret" not in problem


def test_disabled_servers_are_not_expanded(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"s": {"command": "${UNSET}", "disabled": true}}}')
    assert problems() == []


# --- doctor --------------------------------------------------------------------------------------------------


def test_doctor_reports_the_cascade(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", SEED_MCP_JSON)
    check = check_mcp(load_project())
    assert (check.ok, check.warning) == (True, False)
    assert check.detail == "injection on, 2 servers: codegraph, docs"


def test_doctor_fails_on_a_broken_cascade_only_when_injection_is_on(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"s": {}}}')
    check = check_mcp(load_project())
    assert not check.ok and "mcpServers.s.command" in check.detail and "beflow mcp check" in (check.fix or "")
    config_file(project_dir).write_text("{}")
    check = check_mcp(load_project())
    assert check.ok and check.warning


def test_doctor_warns_when_injection_hides_acpx_global_servers(project_dir: Path) -> None:
    write_mcp(project_dir / ".mcp.json", SEED_MCP_JSON)
    acpx_config = Path(os.environ["HOME"]) / ".acpx" / "config.json"
    acpx_config.parent.mkdir(parents=True)
    acpx_config.write_text(json.dumps({"mcpServers": [{"name": "everywhere", "command": "x"}]}))
    check = check_mcp(load_project())
    assert check.ok and check.warning
    assert "hides everywhere" in check.detail
