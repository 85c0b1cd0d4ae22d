"""``beflow doctor``."""

from __future__ import annotations

import dataclasses

import click

from beflow.cli.common import App, emit_json, escape, out, pass_app
from beflow.doctor import run_checks


@click.command(
    "doctor",
    short_help="Check everything beflow needs, the agent's login included; a fix for each problem.",
    epilog="Example:  beflow doctor --json",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@pass_app
def command(app: App, as_json: bool) -> None:
    """Check git, node, acpx, the config, the tracker and MCP, and start the agent (no prompt) to see that it is
    installed and logged in; exit 1 when something needs fixing."""
    checks = run_checks(app.config_option)
    if as_json:
        emit_json([dataclasses.asdict(c) for c in checks])
    else:
        for check in checks:
            mark = "[green]✓[/]" if check.ok and not check.warning else "[yellow]![/]" if check.ok else "[red]✗[/]"
            out.print(f"{mark} [bold]{check.name}[/]: {escape(check.detail)}")
            if check.fix and (check.warning or not check.ok):
                out.print(f"    fix: {escape(check.fix)}")
    if not all(c.ok for c in checks):
        raise SystemExit(1)
