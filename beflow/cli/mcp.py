"""``beflow mcp show`` and ``beflow mcp check`` (the MCP cascade a run would inject), ``beflow mcp serve`` (beflow's
own MCP server) and ``beflow mcp schema`` (what that server exposes, as JSON)."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from beflow.cli.common import App, HelpGroup, emit_json, err, escape, out, pass_app
from beflow.errors import ConfigError
from beflow.mcp.acp import MASK, masked, shadowed_global_servers, translate
from beflow.mcp.cascade import Entry, RemoteServer, StdioServer, check_cascade, fix_for, summary
from beflow.mcp.own import own_server


@click.group("mcp", cls=HelpGroup, epilog="Example:  beflow mcp check && beflow mcp show")
def group() -> None:
    """MCP: the servers beflow gives each agent run (.mcp.json, injected as .acpxrc.json), and beflow's own."""


def _entry_dict(entry: Entry, *, reveal: bool) -> dict[str, Any]:
    server = entry.server
    data: dict[str, Any] = {
        "name": entry.name,
        "scope": entry.scope,
        "origin": str(entry.origin),
        "overrides": str(entry.overrides) if entry.overrides else None,
        "disabled": entry.disabled,
        "entry": None,
    }
    if server is not None:
        raw = server.model_dump(mode="json")
        for secret in ("env", "headers"):
            if secret in raw and not reveal:
                raw[secret] = {k: MASK for k in raw[secret]}
        data["entry"] = raw
    return data


def _pairs(record: dict[str, str], reveal: bool) -> str:
    return ", ".join(f"{k}={v if reveal else MASK}" for k, v in record.items())


def _print_entry(entry: Entry, reveal: bool) -> None:
    server = entry.server
    kind = "disabled" if entry.disabled or server is None else server.type
    note = f"  (replaces the entry in {entry.overrides})" if entry.overrides else ""
    out.print(f"  [bold]{escape(entry.name)}[/]  {kind}  from {escape(str(entry.origin))}{escape(note)}")
    if isinstance(server, StdioServer):
        rows = [("command", server.command), ("args", " ".join(json.dumps(a) for a in server.args))]
        rows.append(("env", _pairs(server.env, reveal)))
    elif isinstance(server, RemoteServer):
        rows = [("url", server.url), ("headers", _pairs(server.headers, reveal))]
    else:
        rows = []
    for label, value in rows:
        if value:
            out.print(f"      {label:<8} {escape(value)}")


@group.command("show", epilog="Example:  beflow mcp show --json")
@click.option("--reveal", is_flag=True, help="Show env and header values instead of masking them.")
@click.option("--json", "as_json", is_flag=True, help="Print the cascade and its translation as JSON.")
@pass_app
def show(app: App, reveal: bool, as_json: bool) -> None:
    """The merged .mcp.json cascade (with the file each server comes from) and what acpx would receive."""
    project = app.project()
    checked = check_cascade(project, os.environ)
    cascade = checked.cascade
    cascade.raise_problems()  # a file that does not load: nothing sensible to show
    expansion = [p for p in checked.problems if p not in cascade.problems]
    shadowed = shadowed_global_servers() if cascade.active else None
    resolved = {name for name, _ in checked.servers}
    # Without --reveal, what a ${VAR} expands to is masked wherever it stands (in args and urls too).
    shown = (
        checked.servers
        if reveal
        else [(e.name, masked(e.server)) for e in cascade.active if e.server is not None and e.name in resolved]
    )
    enabled = project.config.mcp.enabled
    own = own_server(project, issue="<KEY>", run_id="<ID>") if project.config.mcp.self_server else None
    if as_json:
        # The cascade as written is always shown; the translation only when every value expands.
        emit_json(
            {
                "enabled": enabled,
                "files": [s.model_dump(mode="json") for s in cascade.sources],
                "servers": [_entry_dict(e, reveal=reveal) for e in cascade.entries],
                "acp": None if expansion else translate(shown, reveal=reveal),
                "problems": [p.render() for p in expansion],
                "shadowed": shadowed.model_dump(mode="json") if shadowed else None,
                "self": own.model_dump(mode="json") if own is not None else None,
            }
        )
        if expansion:
            raise SystemExit(2)
        return
    if enabled:
        out.print("MCP injection: [green]on[/] (mcp.enabled)")
    else:
        where = escape(app.project().config_name)
        out.print(f'MCP injection: [yellow]off[/] — set "mcp": {{"enabled": true}} in {where} to inject these')
    if own is not None:
        argv = " ".join(json.dumps(a) if " " in a else a for a in [own.command, *own.args])
        out.print(f"beflow's own server (mcp.self): [green]on[/] — every run adds [bold]beflow[/]: {escape(argv)}")
    out.print("[bold]Files[/] (later wins per server name):")
    for source in cascade.sources:
        state = "" if source.exists else "  (missing)"
        out.print(f"  {source.scope:<8} {escape(str(source.path))}{state}")
    if not cascade.entries:
        out.print("No servers: nothing is injected.")
        return
    out.print("[bold]Servers[/]:")
    for entry in cascade.entries:
        _print_entry(entry, reveal)
    if expansion:
        raise ConfigError(summary(expansion), fix=fix_for(expansion))
    if checked.servers:
        out.print("[bold]ACP translation[/] (the mcpServers of the managed .acpxrc.json):")
        out.print(escape(json.dumps(translate(shown, reveal=reveal), indent=2, ensure_ascii=False)))
    else:
        out.print("Every server is disabled: nothing is injected.")
    if shadowed is not None:
        names = ", ".join(shadowed.names)
        err.print(
            f"[yellow]warning:[/] injection shadows the mcpServers of {escape(str(shadowed.path))} ({escape(names)}):"
            " acpx uses a project list instead of the global one, it does not merge them"
        )


@group.command("check", epilog="Example:  beflow mcp check")
@click.option("--json", "as_json", is_flag=True, help='Print {"ok", "servers", "problems"} as JSON.')
@pass_app
def check(app: App, as_json: bool) -> None:
    """Validate the cascade (syntax, entries, ${VAR} expansion); exit 2 listing every problem."""
    checked = check_cascade(app.project(), os.environ)
    names = [name for name, _ in checked.servers]
    if as_json:
        emit_json({"ok": not checked.problems, "servers": names, "problems": [p.render() for p in checked.problems]})
        if checked.problems:
            raise SystemExit(2)
        return
    if checked.problems:
        raise ConfigError(summary(checked.problems), fix=fix_for(checked.problems))
    files = [str(s.path) for s in checked.cascade.sources if s.exists]
    count = f"{len(names)} server{'s' if len(names) != 1 else ''}"
    disabled = len(checked.cascade.entries) - len(names)
    detail = f" ({disabled} disabled)" if disabled else ""
    source = f" from {', '.join(files)}" if files else " (no .mcp.json found)"
    out.print(f"[green]✓[/] {count} resolve{'s' if len(names) == 1 else ''}{detail}{escape(source)}")
    if names:
        out.print(f"  {escape(', '.join(names))}")


_allow_option = click.option(
    "--allow",
    metavar="OP,...",
    help="Operations to expose, by name (issue.comment or issue_comment), or 'all'. Default: the agent-safe ones. "
    "Bound to an issue, only agent-safe operations may be named.",
)
_issue_option = click.option(
    "--issue", "issue", metavar="KEY", help="Bind to this issue: no tool argument can reach another one."
)


@group.command("serve", epilog="Example:  beflow mcp serve --issue 7")
@_allow_option
@_issue_option
@click.option("--run", "run_id", metavar="ID", help="Bind to this run (its progress; its issue unless --issue).")
@click.option("--channel", metavar="SOCKET", hidden=True, help="A run's channel (mcp.self): forward every operation.")
@click.option(
    "--actor",
    help="Who comments and reports: the comments say so. Default: agent for a run's own server (--channel), else you "
    "(git's user.name).",
)
@click.option("--max-input", type=click.IntRange(min=1024), default=256 * 1024, show_default=True, help="Bytes.")
@click.option("--max-output", type=click.IntRange(min=4096), default=1024 * 1024, show_default=True, help="Bytes.")
@click.option(
    "--poll",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds between looks at the bound issue and subscribed resources (for change notifications).",
)
@pass_app
def serve(
    app: App,
    allow: str | None,
    issue: str | None,
    run_id: str | None,
    channel: str | None,
    actor: str | None,
    max_input: int,
    max_output: int,
    poll: float,
) -> None:
    """Serve beflow's operations over MCP on stdin/stdout (for Claude Code, Claude Desktop, Cursor, Zed, OpenCode,
    and the agents of runs with mcp.self). Stops on stdin EOF, SIGINT or SIGTERM after answering the calls in
    flight, exit 0."""
    import anyio

    from beflow.system import hardening

    hardening.keep_private()  # an agent starts this server: it cannot read what the server holds

    from beflow.mcpserver.launch import Launch, Limits, check_launch
    from beflow.mcpserver.schema import parse_allow
    from beflow.mcpserver.server import serve as serve_mcp

    if actor is not None and (not actor.strip() or len(actor.splitlines()) > 1):
        raise click.BadParameter("one line, not empty", param_hint="--actor")
    launch = Launch(
        project=app.project(),
        allow=parse_allow(allow),
        issue=issue,
        run=run_id,
        actor=None if actor is None else actor.strip(),
        limits=Limits(max_input=max_input, max_output=max_output),
        poll=poll,
        channel=channel,
        opens_tracker=lambda _project: app.tracker(),
    )
    launch = check_launch(launch)
    err.print(f"beflow mcp: serving on stdio{f' (issue {launch.issue})' if launch.issue else ''}", markup=False)
    anyio.run(serve_mcp, launch)


@group.command("schema", epilog="Example:  beflow mcp schema --issue 7 | jq .permissionHints")
@_allow_option
@_issue_option
@click.option("--server", "server_name", default="beflow", show_default=True, help="The server's name in snippets.")
@click.option(
    "--http-url",
    default="http://127.0.0.1:8765",
    show_default=True,
    help="Where `beflow watch --http` or `beflow serve` listens, for the HTTP snippets.",
)
@pass_app
def schema(app: App, allow: str | None, issue: str | None, server_name: str, http_url: str) -> None:
    """Print every operation as JSON: name, title, description, input and output schema, annotations, metadata,
    whether agents may use it and whether this launch exposes it; permission hints; Claude Code and OpenCode
    snippets, and the same for MCP over HTTP (`beflow watch --http`). --allow and --issue narrow it as they narrow
    serve."""
    from beflow.mcpserver.launch import existing_issue
    from beflow.mcpserver.schema import TOOL_SERVER_NAME, export, load_all, parse_allow
    from beflow.ops.operations import Context

    if not TOOL_SERVER_NAME.match(server_name):
        raise click.BadParameter("letters, digits, - and _ only", param_hint="--server")
    project = app.project()
    if issue is not None:  # narrowed to an issue that does not exist, the snippets would start a server that fails
        show = load_all()["issue.show"]
        issue = existing_issue(
            issue, lambda key: show.call(Context(project=project, opens_tracker=lambda _p: app.tracker()), {"key": key})
        )
    if not http_url.startswith(("http://", "https://")):
        raise click.BadParameter("an http:// or https:// URL", param_hint="--http-url")
    schema = export(project, parse_allow(allow), issue, server_name, http_url)
    emit_json(schema)
    # The HTTP snippets work only with the token in the client's environment: say how, beside them (on stderr, so
    # that the JSON still pipes).
    token = schema["snippets"]["http"]["token"]
    err.print(f"beflow mcp schema: the HTTP snippets need {token['env']} in the client's environment:", markup=False)
    err.print(f"  {token['export']}", markup=False)
