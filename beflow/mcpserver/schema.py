"""What beflow's MCP server exposes, described once for serving (``beflow mcp serve``) and for export
(``beflow mcp schema``): which operations a launch exposes, their tool definitions (schemas, annotations,
metadata), the permission hints derived from their safety, and ready-to-paste client snippets.

A launch decides what is exposed, never a tool argument: ``--allow`` picks operations, ``--issue`` binds the server
to one issue. A server bound to an issue (an agent in a run) may expose only operations marked agent-safe in the
registry; an unbound one (a person at their MCP client) may name any operation in ``--allow``. Without ``--allow``,
both expose the agent-safe set.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from beflow import __version__
from beflow.config import Project
from beflow.errors import OutOfScopeError, UsageError
from beflow.mcp.own import SERVER_NAME
from beflow.ops.operations import REGISTRY, Operation
from beflow.paths import TOKEN_ENV, token_path

#: The resources beflow serves: an issue, and a run with its record and transcript.
ISSUE_URI = "beflow://issue/{key}"
RUN_URI = "beflow://run/{id}"

#: What a server name may be in the snippets (Claude Code builds ``mcp__<server>__<tool>`` from it).
TOOL_SERVER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: The ``_meta`` key of beflow's own tool metadata.
META_KEY = "beflow/operation"

Permission = Literal["allow", "ask", "deny"]


def load_all() -> dict[str, Operation[Any, Any]]:
    """Every operation beflow serves, registered by importing the modules that declare them (the registry itself
    knows none of them: they import it)."""
    import beflow.ops.docs
    import beflow.ops.issues
    import beflow.ops.questions
    import beflow.ops.reviews
    import beflow.ops.runs  # noqa: F401 - each registers its operations

    return REGISTRY


def ordered() -> list[Operation[Any, Any]]:
    """Every operation, by name: the same order whatever imported them first."""
    return sorted(load_all().values(), key=lambda op: op.name)


def exposed(allow: Sequence[str] | None, *, bound: bool) -> list[Operation[Any, Any]]:
    """The operations a launch exposes, by name. ``allow`` names operations (``issue.comment``) or tools
    (``issue_comment``), or is ``["all"]``; ``None`` is the agent-safe set."""
    registry = {op.name: op for op in ordered()}
    by_tool = {op.tool_name: op for op in registry.values()}
    if not allow:
        return [op for op in registry.values() if op.agent]
    if list(allow) == ["all"]:
        return [op for op in registry.values() if op.agent or not bound]
    chosen: list[Operation[Any, Any]] = []
    for name in allow:
        op = registry.get(name) or by_tool.get(name)
        if op is None:
            names = ", ".join(registry)
            raise UsageError(f"--allow: no operation {name!r}", fix=f"The operations are: {names}.")
        if bound and not op.agent:
            agents = ", ".join(o.name for o in registry.values() if o.agent)
            raise OutOfScopeError(
                f"--allow: {op.name} is not agent-safe, and a server bound to an issue serves agent-safe operations "
                "only",
                fix=f"The agent-safe operations are: {agents}.",
            )
        if op not in chosen:
            chosen.append(op)
    return [op for op in registry.values() if op in chosen]


def parse_allow(text: str | None) -> list[str] | None:
    """``--allow a,b c``: names split on commas and spaces; ``None`` when not given."""
    if text is None:
        return None
    names = [name for part in text.replace(",", " ").split() if (name := part.strip())]
    if not names:
        raise UsageError("--allow: name at least one operation (or all)")
    return names


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every ``$ref`` to ``$defs`` replaced by its definition: some MCP clients do not follow refs."""
    definitions = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = resolve(definitions[ref.removeprefix("#/$defs/")])
                extra = {k: resolve(v) for k, v in node.items() if k != "$ref"}
                return {**target, **extra}
            return {k: resolve(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    result: dict[str, Any] = resolve(schema)
    return result


def input_schema(op: Operation[Any, Any], bound_issue: str | None = None) -> dict[str, Any]:
    """The tool's input schema, from the operation's input model. Bound, the issue field is optional and says that
    it can only be the bound issue."""
    schema = _inline(op.input.model_json_schema())
    field = op.issue_field
    if bound_issue is not None and field is not None and field in schema.get("properties", {}):
        prop = schema["properties"][field]
        prop["description"] = (
            f"{prop.get('description', '')} This session works on issue {bound_issue} only: leave it out (any other "
            "issue is refused)."
        ).strip()
        schema["required"] = [name for name in schema.get("required", []) if name != field]
        if not schema["required"]:
            del schema["required"]
    return schema


def output_schema(op: Operation[Any, Any]) -> dict[str, Any]:
    return _inline(op.output.model_json_schema(mode="serialization"))


def tool(op: Operation[Any, Any], project: Project | None = None, bound_issue: str | None = None) -> dict[str, Any]:
    """One MCP tool definition, in the wire's field names."""
    return {
        "name": op.tool_name,
        "title": op.title,
        "description": op.description,
        "inputSchema": input_schema(op, bound_issue),
        "outputSchema": output_schema(op),
        "annotations": {"title": op.title, **op.annotations(project)},
        "_meta": {META_KEY: op.metadata()},
    }


def permission(op: Operation[Any, Any], exposed_ops: Sequence[Operation[Any, Any]]) -> Permission:
    """What a client should do when an agent calls the tool: reads are allowed, actions asked for, destructive and
    unexposed operations denied."""
    if op not in exposed_ops:
        return "deny"
    return {"read": "allow", "action": "ask", "destructive": "deny"}[op.safety]  # type: ignore[return-value]


class Launch(BaseModel):
    """How a client starts the server: the command line the snippets carry."""

    command: str
    args: list[str]


def launch_of(allow: Sequence[str] | None, issue: str | None) -> Launch:
    """``beflow mcp serve`` with the same narrowing; ``beflow`` on PATH, as people install it."""
    args = ["mcp", "serve"]
    if allow:
        args += ["--allow", ",".join(allow)]
    if issue:
        args += ["--issue", issue]
    return Launch(command="beflow", args=args)


#: Where the snippets say ``beflow watch --http`` / ``beflow serve`` listens (the example port of the docs).
HTTP_URL = "http://127.0.0.1:8765"


def http_endpoint(base: str, issue: str | None) -> str:
    """The MCP endpoint of beflow's HTTP server: ``/mcp``, or ``/mcp/issues/<key>`` bound to an issue."""
    return f"{base.rstrip('/')}/mcp" + (f"/issues/{issue}" if issue else "")


def export(
    project: Project | None,
    allow: Sequence[str] | None,
    issue: str | None,
    server: str = SERVER_NAME,
    http_url: str = HTTP_URL,
) -> dict[str, Any]:
    """``beflow mcp schema``: every operation with its schemas, annotations, metadata, whether agents may use it and
    whether this launch exposes it; permission hints; snippets for Claude Code and OpenCode."""
    chosen = exposed(allow, bound=issue is not None)
    tools = []
    hints: dict[Permission, list[str]] = {"allow": [], "ask": [], "deny": []}
    claude: dict[Permission, list[str]] = {"allow": [], "ask": [], "deny": []}
    opencode: dict[str, Permission] = {}
    for op in ordered():
        tools.append({**tool(op, project, issue), "agentSafe": op.agent, "exposed": op in chosen})
        verdict = permission(op, chosen)
        hints[verdict].append(op.tool_name)
        claude[verdict].append(f"mcp__{server}__{op.tool_name}")
        opencode[f"{server}_{op.tool_name}"] = verdict
    launch = launch_of(allow, issue)
    endpoint = http_endpoint(http_url, issue)
    return {
        "server": {"name": server, "version": __version__, "python": sys.version.split()[0]},
        "launch": launch.model_dump(),
        "tools": tools,
        "permissionHints": hints,
        "snippets": {
            "claudeCode": {
                "mcpServers": {server: {"type": "stdio", "command": launch.command, "args": launch.args}},
                "settings": {"permissions": claude},
            },
            "opencode": {
                "$schema": "https://opencode.ai/config.json",
                "mcp": {server: {"type": "local", "command": [launch.command, *launch.args], "enabled": True}},
                "permission": opencode,
            },
            # MCP over Streamable HTTP (`beflow watch --http PORT`, `beflow serve PORT`): the agent-safe tools.
            "http": http_snippets(server, endpoint),
        },
    }


#: How each client writes "the value of an environment variable" in its config. Claude Code expands ``${VAR}``
#: in an ``.mcp.json`` server's ``url`` and ``headers`` (https://code.claude.com/docs/en/mcp, "Environment variable
#: expansion in .mcp.json"); OpenCode substitutes ``{env:VAR}`` anywhere in its config and sends ``${VAR}`` as it
#: is (https://opencode.ai/docs/config/#env-vars, https://opencode.ai/docs/mcp-servers/#remote).
CLAUDE_CODE_ENV = "${%s}"
OPENCODE_ENV = "{env:%s}"


def http_snippets(server: str, endpoint: str) -> dict[str, Any]:
    """The clients' configs for beflow's MCP endpoint over HTTP, and how the token gets to them: both read it from
    ``BEFLOW_HTTP_TOKEN`` in the client's own environment, while beflow keeps the token it made in a file."""
    claude = {"Authorization": "Bearer " + CLAUDE_CODE_ENV % TOKEN_ENV}
    opencode = {"Authorization": "Bearer " + OPENCODE_ENV % TOKEN_ENV}
    stored = token_path()
    return {
        "url": endpoint,
        "claudeCode": {"mcpServers": {server: {"type": "http", "url": endpoint, "headers": claude}}},
        "opencode": {
            "$schema": "https://opencode.ai/config.json",
            # `oauth: false`: a bearer token is what the server takes, so OpenCode does not try OAuth discovery on
            # a 401 (https://opencode.ai/docs/mcp-servers/#disabling-oauth).
            "mcp": {server: {"type": "remote", "url": endpoint, "headers": opencode, "oauth": False, "enabled": True}},
        },
        "token": {
            "env": TOKEN_ENV,
            "file": str(stored),
            "export": f'export {TOKEN_ENV}="$(cat {shlex.quote(str(stored))})"',
            "note": (
                f"Both snippets read the token from {TOKEN_ENV} in the client's environment. The server's token is "
                f"${TOKEN_ENV} where it was set, else the one beflow made in {stored} the first time a server needed "
                "it: run the export line in the shell that starts the client (or set the variable to the value you "
                "gave the server)."
            ),
        },
    }


def tool_table() -> str:
    """The tool table of docs/mcp-server.md, from the registry (a test fails when the page and this disagree)."""
    rows = [
        "| tool | operation | safety | agent-safe | annotations | what it is for |",
        "|---|---|---|---|---|---|",
    ]
    for op in ordered():
        if op.name.startswith("test."):
            continue
        hints = op.annotations()
        shown = ", ".join(name for name in ("readOnlyHint", "idempotentHint", "destructiveHint") if hints[name])
        rows.append(
            f"| `{op.tool_name}` | `{op.name}` | {op.safety} | {'yes' if op.agent else 'no'} | {shown or '-'} "
            f"| {op.title} |"
        )
    return "\n".join(rows)
