"""The run modes: ``beflow --auto [KEY ...]``, ``beflow --attend KEY`` and ``beflow --open KEY``."""

from __future__ import annotations

import click

from beflow.cli.common import App, emit_json, err, escape, pass_app
from beflow.cli.progress import OUTCOME_STYLE, Progress
from beflow.events import IDLE, AgentProgress, Finished, Notice, RunEvent, Started
from beflow.records.record import FAILED_OUTCOMES
from beflow.run import modes
from beflow.run.batch import run_many
from beflow.run.checkout import invisible_changes
from beflow.system import hardening, interrupts
from beflow.watch import holds


@click.command(
    "auto",
    hidden=True,
    epilog="Examples:\n\n  beflow --auto            # every ready issue, once\n\n"
    "  beflow --auto 7 9 --concurrency 2\n\n  beflow --auto 7 --attempts 3   # three candidates, the best proposed",
)
@click.argument("keys", nargs=-1)
@click.option("--limit", type=click.IntRange(min=1), help="Run at most N issues.")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True, help="Issues run at once.")
@click.option(
    "--attempts",
    type=click.IntRange(min=1),
    help="Best of N: N candidates per issue, judged, one pull request (at most attempts.max).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON event per line instead of the live view.")
@pass_app
def auto(
    app: App, keys: tuple[str, ...], limit: int | None, concurrency: int, attempts: int | None, as_json: bool
) -> None:
    """Run the agent on the given issues (default: every ready issue, once), unattended, each in a throwaway
    worktree on branch beflow/<key>; commit, record, update the tracker, exit."""
    from beflow.app import open_code_host

    hardening.keep_private()  # before any agent runs: its process cannot read beflow's (docs/safety.md)
    project = app.project()
    tracker = app.tracker()  # (the fleet's claims, on the Temporal engine)
    note = invisible_changes(project)
    if note and as_json:
        emit_json({"event": "notice", "issue": None, "message": note})
    elif note:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    with Progress(as_json=as_json) as progress:
        records = interrupts.run(
            lambda: run_many(
                project,
                tracker,
                list(keys),
                limit=limit,
                concurrency=concurrency,
                attempts=attempts,
                opens_code_host=open_code_host,
                events=progress,
            )
        )
    if not records:
        if as_json:
            emit_json({"event": IDLE, "message": "no ready issues"})
        else:
            err.print("No ready issues to run. `beflow issues new TITLE` files one.")
    wrong_currency = holds.currency_error(project, records)
    if wrong_currency is not None:  # no run's fault: the config's, as a config error (exit 2)
        raise wrong_currency
    if any(r.outcome in FAILED_OUTCOMES for r in records):
        raise SystemExit(1)


class SessionView:
    """Shows a supervised session's events as plain lines on stderr: the session itself owns the terminal, so
    there is no live view to fight it."""

    def __call__(self, event: RunEvent) -> None:
        match event.data:
            case Started(mode="attend") as started:
                servers = ", ".join(started.servers or []) or "none injected"
                what = (
                    f"attended run {event.run_id} in {started.checkout} "
                    f"(permissions: {started.permissions}; MCP servers: {servers})"
                )
                err.print(f"▶ issue {escape(event.issue)}: {escape(what)}", highlight=False)
            case Started() as started:
                what = f"{started.client} in {started.checkout} (run {event.run_id}; {started.source})"
                err.print(f"▶ issue {escape(event.issue)}: {escape(what)}", highlight=False)
            case Notice(message=message):
                err.print(f"[yellow]![/] {escape(message)}", highlight=False)
            case AgentProgress(text=text):
                err.print(f"  progress: {escape(text)}", highlight=False)
            case Finished(outcome=outcome, reason=reason) as finished:
                style = OUTCOME_STYLE.get(outcome, "white")
                reason = escape(str(reason))
                err.print(f"[{style}]■ issue {escape(event.issue)}: {outcome}[/] — {reason}", highlight=False)
                changed = finished.changed if isinstance(finished.changed, list) else []
                if changed:
                    err.print(f"  changed in the checkout ({len(changed)}, not committed):", highlight=False)
                    for line in changed:
                        err.print(f"    {escape(line.replace(chr(9), ' '))}", highlight=False)
                if finished.dirty_before:
                    left = len(finished.dirty_before)
                    err.print(f"  uncommitted before the session, left as they were: {left}", highlight=False)
                err.print(f"  record: beflow runs show {event.run_id}", highlight=False)


@click.command(
    "attend",
    hidden=True,
    epilog="Example:\n\n  beflow --attend 7",
)
@click.argument("key")
@pass_app
def attend(app: App, key: str) -> None:
    """Run the agent on one issue in this checkout, with you: acpx's permission prompts come to this terminal
    (attend.permissions, default approve-reads). MCP servers are injected into .acpxrc.json for the run and put
    back afterwards. Nothing is committed; the run record lists the files the run changed."""
    hardening.keep_private()
    project = app.project()
    tracker = app.tracker()
    record = interrupts.run(lambda: modes.attend(project, tracker, key, events=SessionView()))
    if record.outcome in FAILED_OUTCOMES:
        raise SystemExit(1)


@click.command(
    "open",
    hidden=True,
    epilog="Example:\n\n  beflow --open 7",
)
@click.argument("key")
@pass_app
def open_(app: App, key: str) -> None:
    """Start the agent's own interactive client (claude, codex, gemini, opencode, cursor-agent, or `open` in
    .beflow/config.json) in this checkout with the issue's prompt as its first message. beflow waits and exits with the
    client's exit code; .acpxrc.json is not touched (the client reads its own MCP configuration)."""
    hardening.keep_private()
    project = app.project()
    tracker = app.tracker()
    record = interrupts.run(lambda: modes.open_native(project, tracker, key, events=SessionView()))
    raise SystemExit(modes.exit_status(record))
