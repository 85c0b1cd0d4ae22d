"""The run modes: ``beflow --auto [KEY ...]`` (and, later, ``--attend`` and ``--open``)."""

from __future__ import annotations

import click

from beflow import interrupts
from beflow.cli.common import App, emit_json, err, pass_app
from beflow.cli.progress import Progress
from beflow.runner import run_many
from beflow.trackers import open_tracker

FAILED_OUTCOMES = {"failed", "timeout", "cancelled"}


@click.command(
    "auto",
    hidden=True,
    epilog="Examples:\n\n  beflow --auto            # every ready issue, once\n\n  beflow --auto 7 9 --concurrency 2",
)
@click.argument("keys", nargs=-1)
@click.option("--limit", type=click.IntRange(min=1), help="Run at most N issues.")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True, help="Issues run at once.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON event per line instead of the live view.")
@pass_app
def auto(app: App, keys: tuple[str, ...], limit: int | None, concurrency: int, as_json: bool) -> None:
    """Run the agent on the given issues (default: every ready issue, once), unattended, each in a throwaway
    worktree on branch beflow/<key>; commit, record, update the tracker, exit."""
    project = app.project()
    tracker = open_tracker(project)
    with Progress(as_json=as_json) as progress:
        records = interrupts.run(
            lambda: run_many(project, tracker, list(keys), limit=limit, concurrency=concurrency, events=progress)
        )
    if not records:
        if as_json:
            emit_json({"event": "idle", "message": "no ready issues"})
        else:
            err.print("No ready issues to run. `beflow issues new TITLE` files one.")
    if any(r.outcome in FAILED_OUTCOMES for r in records):
        raise SystemExit(1)
