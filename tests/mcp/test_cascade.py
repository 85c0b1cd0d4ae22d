"""The ``.mcp.json`` cascade: loading, validation, merging, ``disabled`` and ``${VAR}`` expansion."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beflow import validation
from beflow.config import load_project
from beflow.doctor import check_mcp
from beflow.errors import ConfigError
from beflow.mcp import cascade as cascade_module
from beflow.mcp.cascade import (
    RemoteServer,
    StdioServer,
    check_cascade,
    expand_string,
    load_cascade,
    resolved_servers,
)
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
        ('{"command": "c", "args": ["ok", 3]}', "mcpServers.s.args.1: expected a string (got a number)"),
        ('{"command": "c", "args": "one"}', "mcpServers.s.args: expected a list (got a string of 3 characters)"),
        ('{"command": "c", "env": {"N": 1}}', "mcpServers.s.env.N: expected a string (got a number)"),
        ('{"type": "http", "url": "https://x", "headers": {"H": true}}', "mcpServers.s.headers.H: expected a string"),
        ('{"command": ""}', "mcpServers.s.command: expected at least 1 character"),
        ('"npx server"', "mcpServers.s: expected an object (got a string of 10 characters)"),
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
    assert "mcpServers.s.args.0: malformed reference at character 1 (expected ${NAME}" in found[0]
    assert "mcpServers.s.args.1: malformed reference at character 1" in found[1]
    assert "1BAD" not in found[0] and "OPEN" not in found[1]  # the text after `${` may be a pasted value


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


def test_thousands_of_invalid_servers_are_located_in_one_pass_over_the_file(
    project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Finding each problem's line by searching the file again made `mcp check` quadratic: 10 000 broken servers
    # did not finish in five minutes. The file is now read for lines once, however many problems it has.
    servers = {f"s{i}": {"command": i} for i in range(2000)}
    write_mcp(project_dir / ".mcp.json", json.dumps({"mcpServers": servers}, indent=2))
    scans = []
    original = validation._without_comments
    monkeypatch.setattr(validation, "_without_comments", lambda text: scans.append(text) or original(text))

    found = problems()

    assert len(found) == 2000
    assert found[1234].endswith(f":{4 + 1234 * 3}: mcpServers.s1234.command: expected a string (got a number)")
    assert len([text for text in scans if "mcpServers" in text]) <= 2  # its depth, its keys


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("docs", "Docs"),
        ("caf\u00e9", "cafe\u0301"),  # é as one character, and as e + a combining accent
        ("ｄｏｃｓ", "docs"),  # full-width letters
        ("STRASSE", "straße"),
    ],
)
def test_server_names_that_differ_only_in_case_or_unicode_form_are_an_error_naming_both(
    project_dir: Path, first: str, second: str
) -> None:
    path = write_mcp(
        project_dir / ".mcp.json",
        f'{{"mcpServers": {{\n"{first}": {{"command": "a"}},\n"{second}": {{"command": "b"}}\n}}}}',
    )

    assert problems() == [
        f"{path}:3: mcpServers.{second}: differs from server {first!r} ({path}:2) only in case or Unicode form: give "
        "them names that differ in more than that, or the same name to replace it"
    ]


def test_a_project_server_named_like_a_global_one_but_for_case_is_an_error(
    project_dir: Path, isolated_home: Path
) -> None:
    global_file = write_mcp(isolated_home / ".mcp.json", '{"mcpServers": {"docs": {"command": "a"}}}')
    project_file = write_mcp(project_dir / ".mcp.json", '{"mcpServers": {"DOCS": {"disabled": true}}}')

    [problem] = problems()
    assert problem.startswith(f"{project_file}:1: mcpServers.DOCS: differs from server 'docs' ({global_file}:1)")


@pytest.mark.parametrize("name", ["a\u0000b", "tab\there", "zero\u200bwidth", "rtl\u202eevil", "bell\u0007"])
def test_a_server_name_with_control_or_invisible_characters_is_an_error(project_dir: Path, name: str) -> None:
    path = write_mcp(project_dir / ".mcp.json", json.dumps({"mcpServers": {name: {"command": "a"}}}))
    escaped = name.encode("unicode_escape").decode("ascii")

    assert problems() == [
        f"{path}:1: mcpServers.{escaped}: a server name must not hold control or invisible characters (shown escaped "
        "here)"
    ]
    assert load_cascade(load_project()).entries == []


# --- big files: one validation call, and once per run -------------------------------------------------------------


def _count_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[object]:
    calls: list[object] = []
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *args, **kwargs: calls.append(args) or original(*args, **kwargs))
    return calls


def test_a_file_of_valid_servers_is_validated_in_one_call_not_one_per_server(
    project_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers: dict[str, dict] = {f"s{i:04d}": {"command": "tool", "args": [str(i)]} for i in range(500)}
    servers |= {f"r{i:04d}": {"type": "http", "url": f"https://x/{i}"} for i in range(500)}
    servers["off"] = {"disabled": True}
    write_mcp(project_dir / ".mcp.json", json.dumps({"mcpServers": servers}))
    per_entry = _count_calls(monkeypatch, cascade_module, "_validate_entry")

    loaded = load_cascade(load_project())

    assert per_entry == []
    assert len(loaded.entries) == 1001 and loaded.problems == []
    by_name = {e.name: e for e in loaded.entries}
    assert by_name["s0042"].server == StdioServer(command="tool", args=["42"])
    assert by_name["r0007"].server == RemoteServer(type="http", url="https://x/7")
    assert by_name["off"].server is None


def test_one_bad_server_among_many_is_named_exactly_as_it_would_be_alone(project_dir: Path) -> None:
    good = {f"s{i:03d}": {"command": "tool"} for i in range(300)}
    bad = {"broken": {"command": "tool", "args": "not-a-list", "env": {"K": 5}}}
    write_mcp(project_dir / ".mcp.json", json.dumps({"mcpServers": {**good, **bad}}))
    among_many = problems()
    assert len(load_cascade(load_project()).entries) == 300  # the others are still read
    write_mcp(project_dir / ".mcp.json", json.dumps({"mcpServers": bad}))
    alone = problems()

    assert [p.split(": ", 1)[1] for p in among_many] == [p.split(": ", 1)[1] for p in alone]
    assert [p.split(": ", 1)[1] for p in alone] == [
        "mcpServers.broken.args: expected a list (got a string of 10 characters)",
        "mcpServers.broken.env.K: expected a string (got a number)",
    ]
