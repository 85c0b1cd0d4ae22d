"""``beflow restore``: put back every file a killed beflow left managed (and the quiet check every command runs)."""

from __future__ import annotations

import click

from beflow.cli.common import emit_json, err, escape, out
from beflow.errors import BeflowError
from beflow.mcp.orphans import active_entries, recover_orphans
from beflow.repository import repoguard


@click.command(
    "restore",
    short_help="Put back the .acpxrc.json files a killed beflow left behind.",
    epilog="Example:  beflow restore --json",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"restored", "in_use"} as JSON.')
def command(as_json: bool) -> None:
    """Put back every .acpxrc.json a killed beflow left behind; files of running beflows are left alone."""
    results = recover_orphans()
    put_back = repoguard.recover()
    in_use = active_entries()
    # A quarantined entry is a problem too: what it was for may not be back.
    failed = any(r.action in ("failed", "quarantined") for r in results) or any(
        line.startswith("could not") for line in put_back
    )
    if as_json:
        emit_json(
            {
                "restored": [r.model_dump(mode="json") for r in results],
                "in_use": [{"target": str(e.target), "pid": e.pid} for e in in_use],
                "git": put_back,
            }
        )
    else:
        for result in results:
            mark = {"failed": "[red]✗[/]", "quarantined": "[yellow]![/]"}.get(result.action, "[green]✓[/]")
            out.print(f"{mark} {escape(result.describe())}")
        for line in put_back:
            out.print(f"{'[red]✗[/]' if line.startswith('could not') else '[green]✓[/]'} {escape(line)}")
        for entry in in_use:
            out.print(f"  left alone: {escape(str(entry.target))} is managed by a running beflow (pid {entry.pid})")
        if not results and not in_use and not put_back:
            out.print("Nothing to restore.")
    if failed:
        raise SystemExit(1)


def recover_quietly() -> None:
    """Run at the start of every other command: restore orphans, say only what was restored (on stderr)."""
    try:
        results = recover_orphans()
        put_back = repoguard.recover()
    except (OSError, BeflowError) as exc:  # never stop the command the user asked for
        err.print(f"[yellow]warning:[/] could not check for files to restore: {escape(str(exc))}")
        return
    for result in results:
        err.print(f"beflow: {escape(result.describe())}")
    for line in put_back:
        err.print(f"beflow: {escape(line)}")
