"""``beflow mcp show`` and ``beflow mcp check``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beflow.mcp.acp import MASK
from tests.mcp.conftest import SEED_MCP_JSON, write_mcp
from tests.support.projects import config_file

SECRET = "Bearer s3cr3t"


@pytest.fixture
def cascade(repo: Path, isolated_home: Path) -> tuple[Path, Path]:
    """Injection on; a global file with two servers, a project file that replaces one and adds one."""
    config_file(repo).write_text('{"mcp": {"enabled": true}}')
    global_file = write_mcp(
        isolated_home / ".mcp.json",
        '{"mcpServers": {"docs": {"type": "http", "url": "https://old"}, "shared": {"command": "g"}}}',
    )
    project_file = write_mcp(
        repo / ".mcp.json",
        json.dumps(
            {
                "mcpServers": {
                    "docs": {"type": "http", "url": "https://mcp.example.com", "headers": {"Authorization": SECRET}},
                    "index": {"command": "idx", "args": ["--db", "a b"], "env": {"TOKEN": "${INDEX_TOKEN:-t0k}"}},
                    "off": {"command": "x", "disabled": True},
                }
            }
        ),
    )
    return global_file, project_file


def test_show_lists_servers_with_their_origin_masks_secrets_and_prints_the_translation(
    beflow, cascade: tuple[Path, Path]
) -> None:
    global_file, project_file = cascade
    result = beflow("mcp", "show")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "MCP injection: on" in out
    assert f"global   {global_file}" in out and f"project  {project_file}" in out
    assert f"docs  http  from {project_file}  (replaces the entry in {global_file})" in out
    assert f"shared  stdio  from {global_file}" in out
    assert f"off  disabled  from {project_file}" in out
    assert 'args     "--db" "a b"' in out
    assert f"headers  Authorization={MASK}" in out and f"env      TOKEN={MASK}" in out
    translation = json.loads(out[out.index("[\n") :])
    assert [s["name"] for s in translation] == ["docs", "index", "shared"]
    assert translation[0]["headers"] == [{"name": "Authorization", "value": MASK}]
    assert "s3cr3t" not in out and "t0k" not in out
    assert result.stderr == ""


def test_show_reveal_shows_expanded_values(beflow, cascade: tuple[Path, Path]) -> None:
    result = beflow("mcp", "show", "--reveal")
    assert SECRET in result.stdout
    assert '"value": "t0k"' in result.stdout  # the translation is expanded
    assert "TOKEN=${INDEX_TOKEN:-t0k}" in result.stdout  # the entry is shown as written


def test_show_json(beflow, cascade: tuple[Path, Path]) -> None:
    global_file, project_file = cascade
    result = beflow("mcp", "show", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["enabled"] is True
    assert data["files"] == [
        {"scope": "global", "path": str(global_file), "exists": True},
        {"scope": "project", "path": str(project_file), "exists": True},
    ]
    docs = data["servers"][0]
    assert docs["name"] == "docs" and docs["origin"] == str(project_file) and docs["overrides"] == str(global_file)
    assert docs["entry"]["headers"] == {"Authorization": MASK}
    assert [s["name"] for s in data["acp"]] == ["docs", "index", "shared"]
    assert data["shadowed"] is None
    assert "s3cr3t" not in result.stdout
    assert SECRET in beflow("mcp", "show", "--json", "--reveal").stdout


def test_show_says_when_injection_is_off(beflow, repo: Path) -> None:
    write_mcp(repo / ".mcp.json", SEED_MCP_JSON)
    assert "MCP injection: off" in beflow("mcp", "show").stdout
    assert json.loads(beflow("mcp", "show", "--json").stdout)["enabled"] is False


def test_show_without_any_file(beflow, repo: Path) -> None:
    result = beflow("mcp", "show")
    assert result.exit_code == 0
    assert "(missing)" in result.stdout and "No servers: nothing is injected." in result.stdout


def test_show_warns_when_injection_shadows_acpx_global_servers(beflow, cascade: tuple[Path, Path]) -> None:
    acpx_config = Path(os.environ["HOME"]) / ".acpx" / "config.json"
    acpx_config.parent.mkdir()
    acpx_config.write_text(json.dumps({"mcpServers": [{"name": "everywhere", "command": "e"}]}))
    result = beflow("mcp", "show")
    assert result.exit_code == 0
    assert f"warning: injection shadows the mcpServers of {acpx_config} (everywhere)" in result.stderr
    assert "does not merge them" in result.stderr
    shadowed = json.loads(beflow("mcp", "show", "--json").stdout)["shadowed"]
    assert shadowed == {"path": str(acpx_config), "names": ["everywhere"]}


def test_show_names_an_unset_variable_and_never_a_value(beflow, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTHER_SECRET", "do-not-print")
    write_mcp(
        repo / ".mcp.json", '{"mcpServers": {"api": {"command": "x", "env": {"K": "${MISSING}${OTHER_SECRET}"}}}}'
    )
    problem = "mcpServers.api.env.K: ${MISSING} is not set and has no default (server 'api')"
    for args in (("mcp", "show"), ("mcp", "show", "--reveal")):
        result = beflow(*args)
        assert result.exit_code == 2
        assert problem in result.stderr
        assert "do-not-print" not in result.stdout + result.stderr
    result = beflow("mcp", "show", "--json")  # the cascade as written, the problem, and no translation
    assert result.exit_code == 2
    shown = json.loads(result.stdout)
    assert [s["name"] for s in shown["servers"]] == ["api"] and shown["acp"] is None
    assert any(problem in line for line in shown["problems"])
    assert "do-not-print" not in result.stdout + result.stderr


def test_show_refuses_a_broken_file(beflow, repo: Path) -> None:
    path = write_mcp(repo / ".mcp.json", '{"mcpServers": {"s": {"type": "http"}}}')
    result = beflow("mcp", "show")
    assert result.exit_code == 2
    assert f"{path}:1: mcpServers.s.url: required key is missing" in result.stderr


def test_check_counts_the_servers_that_resolve(beflow, cascade: tuple[Path, Path]) -> None:
    global_file, project_file = cascade
    result = beflow("mcp", "check")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"✓ 3 servers resolve (1 disabled) from {global_file}, {project_file}",
        "  docs, index, shared",
    ]


def test_check_with_no_file(beflow, repo: Path) -> None:
    result = beflow("mcp", "check")
    assert result.exit_code == 0
    assert result.stdout.strip() == "✓ 0 servers resolve (no .mcp.json found)"


def test_check_lists_every_problem_and_exits_2(beflow, repo: Path, isolated_home: Path) -> None:
    global_file = write_mcp(isolated_home / ".mcp.json", "{ mcpServers: { broken: , } }")
    project_file = write_mcp(
        repo / ".mcp.json",
        '{\n"mcpServers": {\n"a": {"command": 1},\n"b": {"type": "http", "url": "${NOPE}"},\n"c": {"typo": 1}\n}\n}\n',
    )
    result = beflow("mcp", "check")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0] == "error: 5 problems in the MCP cascade:"
    assert lines[1].startswith(f"{global_file}:1: invalid JSON5")
    assert lines[2] == f"{project_file}:3: mcpServers.a.command: expected a string (got a number)"
    assert lines[3] == f"{project_file}:5: mcpServers.c.command: required key is missing"
    assert lines[4] == f"{project_file}:5: mcpServers.c.typo: unknown key (did you mean 'type'?)"
    assert lines[5] == f"{project_file}:4: mcpServers.b.url: ${{NOPE}} is not set and has no default (server 'b')"
    assert lines[6] == (
        "fix: Export NOPE before running beflow, or write ${NOPE:-…} in .mcp.json to give a default; fix the syntax "
        "where shown (comments and trailing commas are allowed); fix each entry at the line shown (`beflow docs mcp` "
        "describes them); `beflow mcp check` lists every problem."
    )
    assert result.stdout == ""


def test_an_unclosed_brace_is_shown_where_it_was_opened_with_the_syntax_fix(beflow, repo: Path) -> None:
    path = write_mcp(repo / ".mcp.json", '{"mcpServers": {\n  "docs": {"command": "docs-server"}\n')

    for command in (("mcp", "check"), ("mcp", "show")):
        result = beflow(*command)

        assert result.exit_code == 2
        assert result.stderr.splitlines() == [
            "error: 1 problem in the MCP cascade:",
            f"{path}:3: invalid JSON5: Unexpected end of input at column 1 (the {{ at line 1, column 16 is never "
            "closed: a } is missing?)",
            "fix: Fix the syntax where shown (comments and trailing commas are allowed); `beflow mcp check` lists "
            "every problem.",
        ]


def test_check_json(beflow, repo: Path) -> None:
    write_mcp(repo / ".mcp.json", '{"mcpServers": {"a": {}, "b": {"command": "b"}}}')
    result = beflow("mcp", "check", "--json")
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["servers"] == ["b"] and len(data["problems"]) == 1


def test_the_example_file_checks_out(beflow, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example = Path(__file__).resolve().parents[2] / ".mcp.example.json"
    (repo / ".mcp.json").write_text(example.read_text())
    monkeypatch.setenv("DOCS_TOKEN", "t")
    result = beflow("mcp", "check")
    assert result.exit_code == 0, result.stderr
    assert "2 servers resolve (1 disabled)" in result.stdout
    monkeypatch.delenv("DOCS_TOKEN")
    unset = beflow("mcp", "check").stderr
    assert "${DOCS_TOKEN} is not set" in unset
    assert unset.splitlines()[-1] == (
        "fix: Export DOCS_TOKEN before running beflow, or write ${DOCS_TOKEN:-…} in .mcp.json to give a default; "
        "`beflow mcp check` lists every problem."
    )


def test_every_key_of_show_json_is_documented(beflow, repo: Path) -> None:
    write_mcp(repo / ".mcp.json", '{"mcpServers": {"a": {"command": "x", "env": {"K": "${UNSET_HERE}"}}}}')
    keys = json.loads(beflow("mcp", "show", "--json").stdout).keys()
    docs = (Path(__file__).resolve().parents[2] / "beflow" / "docs" / "mcp.md").read_text()
    (row,) = [line for line in docs.splitlines() if line.startswith("| `beflow mcp show --json` |")]

    assert all(f'"{key}"' in row for key in keys), (sorted(keys), row)


def test_show_masks_what_a_reference_expands_to_in_args_command_and_url(
    beflow, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TOKEN", "sk-live-7c1d")
    monkeypatch.setenv("SHORT", "ab")
    config_file(repo).write_text('{"mcp": {"enabled": true}}')
    write_mcp(
        repo / ".mcp.json",
        json.dumps(
            {
                "mcpServers": {
                    "index": {"command": "idx-${SHORT}", "args": ["--token=${API_TOKEN}", "--plain"]},
                    "docs": {"type": "http", "url": "https://mcp.example.com/${API_TOKEN}/mcp"},
                }
            }
        ),
    )

    for args in (["mcp", "show"], ["mcp", "show", "--json"]):
        result = beflow(*args)
        assert result.exit_code == 0, result.stderr
        assert "sk-live-7c1d" not in result.stdout and "idx-ab" not in result.stdout
        assert f"--token={MASK}" in result.stdout and "--plain" in result.stdout
        assert f"https://mcp.example.com/{MASK}/mcp" in result.stdout
        assert f"idx-{MASK}" in result.stdout

    revealed = beflow("mcp", "show", "--reveal").stdout
    assert "--token=sk-live-7c1d" in revealed and "idx-ab" in revealed


@pytest.mark.parametrize(
    "entry",
    [
        {"command": "x", "env": {"TOKEN": ["Bearer sk-live-9f8e7d"]}},  # a value in a list by mistake
        {"type": "http", "url": "https://x", "headers": "Bearer sk-live-9f8e7d"},  # headers as a string
        {"command": "x", "args": "Bearer sk-live-9f8e7d"},
        {"type": "Bearer sk-live-9f8e7d"},
        "Bearer sk-live-9f8e7d",
        {"command": "x", "args": ["${Bearer sk-live-9f8e7d}"]},
    ],
)
def test_a_shape_error_never_echoes_the_value(beflow, repo: Path, entry: dict[str, object] | str) -> None:
    config_file(repo).write_text('{"mcp": {"enabled": true}}')
    write_mcp(repo / ".mcp.json", json.dumps({"mcpServers": {"api": entry}}))

    commands = [["mcp", "check"], ["mcp", "check", "--json"], ["--auto"]]
    if "args" not in entry:  # (show prints args as written: they are not secrets, env and header values are)
        commands.append(["mcp", "show"])
    for args in commands:
        result = beflow(*args)
        assert result.exit_code == 2, (args, result.stderr)
        assert "mcpServers.api" in result.stderr + result.stdout
        assert "sk-live" not in result.stderr + result.stdout
