"""``beflow mcp schema``: every operation as JSON, with permission hints and client snippets; and what
``beflow mcp show`` says of beflow's own server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.mcp.acp import MASK
from tests.support.projects import config_file


def test_schema_lists_every_operation_with_hints_and_snippets(repo: Path, beflow) -> None:
    result = beflow("mcp", "schema")

    assert result.exit_code == 0, result.stderr
    schema = json.loads(result.stdout)
    tools = {t["name"]: t for t in schema["tools"]}
    assert {"issue_show", "issue_comment", "run_progress", "docs_locate", "issue_list", "run_logs"} <= set(tools)
    show = tools["issue_show"]
    assert show["agentSafe"] and show["exposed"] and show["annotations"]["readOnlyHint"]
    assert show["inputSchema"]["required"] == ["key"] and show["outputSchema"]["type"] == "object"
    assert show["_meta"]["beflow/operation"]["category"] == "issues"
    assert not tools["issue_list"]["agentSafe"] and not tools["issue_list"]["exposed"]
    hints = schema["permissionHints"]
    assert "issue_show" in hints["allow"] and "issue_comment" in hints["ask"] and "issue_close" in hints["deny"]
    claude = schema["snippets"]["claudeCode"]
    assert "mcp__beflow__issue_show" in claude["settings"]["permissions"]["allow"]
    assert claude["mcpServers"]["beflow"] == {"type": "stdio", "command": "beflow", "args": ["mcp", "serve"]}
    opencode = schema["snippets"]["opencode"]
    assert opencode["permission"]["beflow_issue_comment"] == "ask"
    assert opencode["mcp"]["beflow"]["command"] == ["beflow", "mcp", "serve"]


def test_schema_gives_the_snippets_for_mcp_over_http_too(repo: Path, beflow) -> None:
    key = with_one_issue(repo)

    plain = json.loads(beflow("mcp", "schema", "--http-url", "http://10.0.0.5:9000").stdout)["snippets"]["http"]
    bound = json.loads(beflow("mcp", "schema", "--issue", key).stdout)["snippets"]["http"]

    assert plain["url"] == "http://10.0.0.5:9000/mcp"
    server = plain["claudeCode"]["mcpServers"]["beflow"]
    assert server == {"type": "http", "url": plain["url"], "headers": {"Authorization": "Bearer ${BEFLOW_HTTP_TOKEN}"}}
    assert plain["opencode"]["mcp"]["beflow"]["type"] == "remote"
    assert bound["url"] == f"http://127.0.0.1:8765/mcp/issues/{key}"
    assert beflow("mcp", "schema", "--http-url", "ftp://x").exit_code == 2


def with_one_issue(repo: Path) -> str:
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text("{}\n")
    return open_tracker(load_project(config_file(repo))).create("Fix the crash", "").key


def test_allow_and_issue_narrow_the_schema_as_they_narrow_serve(repo: Path, beflow) -> None:
    assert with_one_issue(repo) == "1"
    result = beflow("mcp", "schema", "--issue", "1", "--allow", "issue.show,issue_comment", "--server", "bf")

    schema = json.loads(result.stdout)
    exposed = sorted(t["name"] for t in schema["tools"] if t["exposed"])
    assert exposed == ["issue_comment", "issue_show"]
    assert "issue_set_status" in schema["permissionHints"]["deny"]
    comment = next(t for t in schema["tools"] if t["name"] == "issue_comment")
    assert "issue 1 only" in comment["inputSchema"]["properties"]["key"]["description"]
    assert schema["launch"]["args"] == ["mcp", "serve", "--allow", "issue.show,issue_comment", "--issue", "1"]
    assert schema["snippets"]["claudeCode"]["settings"]["permissions"]["allow"] == ["mcp__bf__issue_show"]

    refused = beflow("mcp", "schema", "--issue", "1", "--allow", "issue.close")
    assert refused.exit_code == 2 and "issue.close is not agent-safe" in refused.stderr
    unknown = beflow("mcp", "schema", "--allow", "issue.nuke")
    assert unknown.exit_code == 2 and "no operation 'issue.nuke'" in unknown.stderr


def test_schema_refuses_an_issue_that_does_not_exist_or_is_no_key(repo: Path, beflow) -> None:
    with_one_issue(repo)
    for issue, said in [
        ("999", "--issue: no issue 999"),
        ("../1", "--issue '../1' is not an issue key"),
        ("1\x1b[2J" + "x" * 5000, "is not an issue key"),
    ]:
        result = beflow("mcp", "schema", "--issue", issue)
        assert result.exit_code == 2, issue
        assert said in result.stderr and result.stdout == ""
        assert "\x1b" not in result.stderr and len(result.stderr) < 400


def test_show_lists_beflows_own_server_when_self_is_on(repo: Path, beflow) -> None:
    config_file(repo).write_text('{"mcp": {"self": true}}')

    text = beflow("mcp", "show")
    data = json.loads(beflow("mcp", "show", "--json").stdout)

    assert "beflow's own server (mcp.self): on" in text.stdout
    assert data["self"]["name"] == "beflow" and data["self"]["command"] == sys.executable
    assert data["self"]["args"][-8:] == ["--issue", "<KEY>", "--run", "<ID>", "--channel", "<SOCKET>", "--poll", "2"]
    # The run's capability is its secret: shown masked, never a value.
    assert {pair["name"]: pair["value"] for pair in data["self"]["env"]}["BEFLOW_MCP_CAPABILITY"] == MASK
    assert str(config_file(repo)) in data["self"]["args"]
