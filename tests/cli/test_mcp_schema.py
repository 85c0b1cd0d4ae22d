"""``beflow mcp schema``: every operation as JSON, with permission hints and client snippets; and what
``beflow mcp show`` says of beflow's own server."""

from __future__ import annotations

import json
import os
import re
import subprocess
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
    # Claude Code: an .mcp.json server is `type`, `command`, `args` (https://code.claude.com/docs/en/mcp); a settings
    # permission rule names an MCP tool `mcp__<server>__<tool>` in `allow`/`ask`/`deny`
    # (https://code.claude.com/docs/en/settings, "Permission settings").
    claude = schema["snippets"]["claudeCode"]
    assert set(claude["settings"]["permissions"]) == {"allow", "ask", "deny"}
    assert "mcp__beflow__issue_show" in claude["settings"]["permissions"]["allow"]
    assert claude["mcpServers"]["beflow"] == {"type": "stdio", "command": "beflow", "args": ["mcp", "serve"]}
    # OpenCode: a local server is `type: local` with `command` an array (https://opencode.ai/docs/mcp-servers/#local);
    # `permission` is keyed by tool name, an MCP tool's being `<server>_<tool>` (https://opencode.ai/docs/permissions/,
    # https://opencode.ai/docs/mcp-servers/#glob-patterns).
    opencode = schema["snippets"]["opencode"]
    assert opencode["permission"]["beflow_issue_comment"] == "ask"
    assert opencode["mcp"]["beflow"] == {"type": "local", "command": ["beflow", "mcp", "serve"], "enabled": True}


def test_schema_gives_the_snippets_for_mcp_over_http_too(repo: Path, beflow) -> None:
    key = with_one_issue(repo)

    plain = json.loads(beflow("mcp", "schema", "--http-url", "http://10.0.0.5:9000").stdout)["snippets"]["http"]
    bound = json.loads(beflow("mcp", "schema", "--issue", key).stdout)["snippets"]["http"]

    assert plain["url"] == "http://10.0.0.5:9000/mcp"
    assert bound["url"] == f"http://127.0.0.1:8765/mcp/issues/{key}"
    assert beflow("mcp", "schema", "--http-url", "ftp://x").exit_code == 2


def test_each_http_snippet_is_written_in_its_clients_own_syntax_and_gets_the_servers_token(repo: Path, beflow) -> None:
    """Each client's form, as its documentation gives it, and the export line printed beside them, run in a real
    shell, hand both clients exactly the token the server takes (the one beflow made under BEFLOW_HOME)."""
    from beflow.web.guard import load_token

    result = beflow("mcp", "schema", "--http-url", "http://10.0.0.5:9000")
    http = json.loads(result.stdout)["snippets"]["http"]
    token = load_token()  # what `beflow serve` makes and checks
    assert token.source == "created"

    # Claude Code: `${VAR}` in an .mcp.json server's url and headers, `"type": "http"`
    # (https://code.claude.com/docs/en/mcp, "Environment variable expansion in .mcp.json").
    claude = http["claudeCode"]["mcpServers"]["beflow"]
    assert claude == {"type": "http", "url": http["url"], "headers": {"Authorization": "Bearer ${BEFLOW_HTTP_TOKEN}"}}
    # OpenCode: `{env:VAR}` (https://opencode.ai/docs/config/#env-vars); a remote server is `"type": "remote"` with
    # `url`, `headers`, `enabled` and `oauth: false` for a server that takes a key
    # (https://opencode.ai/docs/mcp-servers/#remote, #disabling-oauth). `${VAR}` it would send as it is.
    opencode = http["opencode"]["mcp"]["beflow"]
    assert opencode == {
        "type": "remote",
        "url": http["url"],
        "headers": {"Authorization": "Bearer {env:BEFLOW_HTTP_TOKEN}"},
        "oauth": False,
        "enabled": True,
    }
    assert http["opencode"]["$schema"] == "https://opencode.ai/config.json"

    # The export line, said where the snippets are printed, works as printed.
    export = http["token"]["export"]
    assert export in result.stderr and "BEFLOW_HTTP_TOKEN" in result.stderr
    env = {k: v for k, v in os.environ.items() if k != "BEFLOW_HTTP_TOKEN"}
    shell = subprocess.run(["bash", "-c", f'{export} && printf %s "$BEFLOW_HTTP_TOKEN"'], env=env, capture_output=True)
    client_env = {"BEFLOW_HTTP_TOKEN": shell.stdout.decode()}
    as_claude = re.sub(r"\$\{(\w+)\}", lambda m: client_env[m[1]], claude["headers"]["Authorization"])
    as_opencode = re.sub(r"\{env:(\w+)\}", lambda m: client_env[m[1]], opencode["headers"]["Authorization"])
    assert as_claude == as_opencode == f"Bearer {token.value}"


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


def test_the_docs_connect_each_client_in_its_own_documented_form() -> None:
    """docs/mcp-server.md's "Connect a client": each client's block, against that client's documentation."""
    import beflow.docs

    page = (Path(beflow.docs.__file__).parent / "mcp-server.md").read_text(encoding="utf-8")
    section = page.split("## Connect a client", 1)[1].split("\n## ", 1)[0]
    blocks = dict(re.findall(r"\*\*([\w ]+)\*\* —[^\n]*\n\n```json\n(.*?)```", section, re.S))
    stdio = {"command": "beflow", "args": ["mcp", "serve"]}
    # Claude Code's .mcp.json (https://code.claude.com/docs/en/mcp) and Cursor's .cursor/mcp.json
    # (https://cursor.com/docs/context/mcp): `mcpServers`, a server's `command` and `args`.
    assert json.loads(blocks["Cursor"]) == {"mcpServers": {"beflow": stdio}}
    # Claude Desktop's claude_desktop_config.json (https://modelcontextprotocol.io/quickstart/user): the same shape.
    desktop = json.loads(blocks["Claude Desktop"])["mcpServers"]["beflow"]
    assert desktop["command"] == "beflow" and desktop["args"][-2:] == ["mcp", "serve"]
    # Zed's settings.json (https://zed.dev/docs/ai/mcp, "As Custom Servers"): `context_servers`, `source: custom`.
    zed = json.loads(blocks["Zed"])["context_servers"]["beflow"]
    assert zed["source"] == "custom" and zed["command"] == "beflow" and zed["args"][-2:] == ["mcp", "serve"]
    # OpenCode's opencode.json (https://opencode.ai/docs/mcp-servers/#local): `type: local`, `command` an array.
    opencode = json.loads(blocks["OpenCode"])["mcp"]["beflow"]
    assert opencode == {"type": "local", "command": ["beflow", "mcp", "serve"], "enabled": True}
