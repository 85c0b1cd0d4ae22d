"""``beflow watch``: the dispatcher, with a live terminal view or a JSON event stream."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import TYPE_CHECKING

import click

from beflow import guardrails
from beflow.cli.common import App, err, escape, pass_app
from beflow.cli.lines import event_line
from beflow.cli.serve import stopped_as_a_service
from beflow.cli.stream import EventStream
from beflow.errors import BeflowError
from beflow.events import RunEvent, WatchEvent
from beflow.records.record import FAILED_OUTCOMES, RunRecord
from beflow.system import hardening, interrupts
from beflow.trackers import Status
from beflow.watch.dispatcher import Dispatcher
from beflow.watch.lanes import Snapshot

if TYPE_CHECKING:  # rich is loaded for the live view only: `watch --json` (cron, scripts) never needs it
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from beflow.cli.live import LiveView

#: Events worth a line in the scrolling log above the live view.
LOGGED = {
    "dispatched",
    "skipped",
    "finished",
    "retry_scheduled",
    "cancelled",
    "error",
    "failed",
    "requeued",
    "config_reloaded",
    "stopping",
    "settled",
    "budget_reached",
    "budget_cleared",
    "feedback",
    "held",
    "triggered",
    "ignored",
}

#: The run events the HTTP server's event stream carries besides the watch's (its lanes move with them; `usage` at
#: most once a second a run, beflow.run.limits).
HTTP_RUN_EVENTS = {"started", "activity", "progress", "usage", "finished", "notice"}


def render(snapshot: Snapshot, concurrency: int) -> Group:
    """The live view: running runs, the queue, backoffs and recent outcomes."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from beflow.cli.progress import OUTCOME_STYLE

    now = time.time()
    running = Table(title=f"running ({len(snapshot.running)}/{concurrency})", title_justify="left", box=None)
    for column in ("issue", "attempt", "elapsed", "usage", "progress", "latest activity"):
        running.add_column(
            column,
            no_wrap=True,
            overflow="ellipsis",
            max_width=50 if column in ("progress", "latest activity") else None,
        )
    for run in snapshot.running:
        running.add_row(
            run.key,
            f"{run.attempt} (round {run.round})" if run.round else str(run.attempt),
            f"{now - run.started:.0f}s",
            guardrails.short(run.usage),
            escape(run.progress or "-"),
            escape(run.latest),
        )
    parts: list[Table | Text] = [running]
    if snapshot.queue:
        queue = Table(title=f"queue ({len(snapshot.queue)})", title_justify="left", box=None)
        for column in ("issue", "priority", "title"):
            queue.add_column(column, no_wrap=True, overflow="ellipsis")
        for issue in snapshot.queue[:10]:
            queue.add_row(issue.key, str(issue.priority), escape(issue.title))
        parts.append(queue)
    if snapshot.held:
        held = Table(title=f"held ({len(snapshot.held)})", title_justify="left", box=None)
        for column in ("issue", "why"):
            held.add_column(column, no_wrap=True, overflow="ellipsis", max_width=80)
        for key, why in list(snapshot.held.items())[:10]:
            held.add_row(key, escape(why))
        parts.append(held)
    if snapshot.backoffs:
        backoffs = Table(title="backing off", title_justify="left", box=None)
        for column in ("issue", "next attempt", "due in", "last failure"):
            backoffs.add_column(column, no_wrap=True, overflow="ellipsis", max_width=60)
        for backoff in snapshot.backoffs:
            backoffs.add_row(
                backoff.key, str(backoff.attempt), f"{max(0, backoff.due - now):.0f}s", escape(backoff.reason)
            )
        parts.append(backoffs)
    if snapshot.recent:
        recent = Table(title="recent", title_justify="left", box=None)
        for column in ("issue", "outcome", "usage", "run"):
            recent.add_column(column, no_wrap=True)
        for record in snapshot.recent[:8]:
            style = OUTCOME_STYLE.get(record.outcome, "white")
            recent.add_row(record.issue, f"[{style}]{record.outcome}[/]", guardrails.short(record.usage), record.id)
        parts.append(recent)
    if snapshot.blocked is not None:
        fix = f" — fix: {snapshot.blocked_fix}" if snapshot.blocked_fix else ""
        parts.append(Text(f"not dispatching: {snapshot.blocked}{fix}", style="yellow"))
    if snapshot.budget is not None and snapshot.budget.reached:
        parts.append(Text(f"not dispatching: {snapshot.budget.describe()}", style="yellow"))
    used = f"used: {snapshot.used.describe()}"
    if snapshot.budget is not None:
        budget = snapshot.budget
        used += f"; today {budget.spent:.2f} of {budget.limit:g} {budget.currency} (limits.cost_per_day)"
    parts.append(Text(used, style="dim"))
    parts.append(
        Text(f"tick {snapshot.tick}; next poll in {max(0, snapshot.next_tick - now):.0f}s — Ctrl-C stops", style="dim")
    )
    return Group(*parts)


@click.command(
    "watch",
    short_help="Run ready issues in parallel, unattended, until stopped.",
    epilog="Examples:\n\n  beflow watch\n\n  beflow watch --once --json",
)
@click.option("--once", is_flag=True, help="One tick: dispatch what is ready, wait for those runs, exit.")
@click.option("--json", "as_json", is_flag=True, help="Stream one JSON event per line instead of the live view.")
@click.option(
    "--http",
    "http",
    metavar="[HOST:]PORT",
    help="Also serve the live dashboard, the HTTP API and MCP over HTTP (127.0.0.1 unless a host is given).",
)
@pass_app
def command(app: App, once: bool, as_json: bool, http: str | None) -> None:
    """Poll the tracker and run ready issues in parallel, unattended, until stopped (Ctrl-C or SIGTERM: running
    runs are cancelled, their files restored and recorded, then beflow exits 130)."""
    from beflow.app import engine, open_project

    hardening.keep_private()  # before any agent runs: its process cannot read beflow's (docs/safety.md)
    project = app.project()
    if engine(project).runs_elsewhere:  # the fleet's workers run the issues; this starts their workflows
        from beflow.cli.fleet import watch_fleet

        return watch_fleet(project, once=once, as_json=as_json, http=http)
    live: LiveView | None = None
    # A reader that stops reading never holds up the runs, the dispatcher or a signal (beflow.cli.stream).
    stream = EventStream() if as_json else None
    hub = None
    if http is not None:
        from beflow.web.live import Hub

        hub = Hub()

    def listener(event: WatchEvent | RunEvent) -> None:
        if hub is not None and (isinstance(event, WatchEvent) or event.type in HTTP_RUN_EVENTS):
            hub.publish(event.to_json())  # never waits (beflow.web.live)
        if stream is not None:
            # The dispatcher's events, and the progress lines agents report (run events of their own).
            if isinstance(event, WatchEvent) or event.type in ("progress", "usage"):
                stream(event.to_json())
            return
        if isinstance(event, WatchEvent) and event.type in LOGGED:
            (live.console if live else err).print(escape(event_line(event)), highlight=False)

    dispatcher = Dispatcher(project, opens=open_project, config_option=app.config_option, listener=listener)
    if not as_json and err.is_terminal:
        from beflow.cli.live import LiveView

        concurrency = project.config.watch.concurrency
        live = LiveView(
            lambda: render(dispatcher.snapshot(), dispatcher.project.config.watch.concurrency or concurrency),
            per_second=2,
        )
        live.start()
    try:
        with contextlib.ExitStack() as serving:
            if not once or http is not None:  # a service stopped says so; an interrupted `--once` is an interruption
                serving.enter_context(stopped_as_a_service())  # (outermost: after the server's own warning)
            if hub is not None and http is not None:
                from beflow.cli.serve import beside_watch

                source = serving.enter_context(beside_watch(app, http, dispatcher, hub))

                async def watching() -> list[RunRecord]:
                    source.attach()  # the server asks for the dispatcher's state on this loop
                    return await dispatcher.watch(once=once)

                records = interrupts.run(watching)
            else:
                records = interrupts.run(lambda: dispatcher.watch(once=once))
    finally:
        if live is not None:
            live.stop()
        if stream is not None:
            stream.close()
    if once and not records and not as_json:  # `--json` keeps its stream as it is: no run, no event
        with contextlib.suppress(BeflowError):  # the tracker's failure was said as the watch's `error`
            click.echo(nothing_ran(dispatcher), err=True)  # (plain words of beflow's own: a pipe needs no rich)
    if once and any(r.outcome in FAILED_OUTCOMES for r in records):
        raise SystemExit(1)


def nothing_ran(dispatcher: Dispatcher) -> str:
    """What ``--once`` says when it started no run: the issues by status, and what the user can do."""
    issues = dispatcher.tracker.listing().issues
    if not issues:
        return 'nothing ready: there are no issues yet (`beflow issues new "TITLE"` files one, ready for runs)'
    counts = Counter(issue.status for issue in issues)
    seen = ", ".join(f"{counts[status]} {status.value}" for status in Status if counts[status])
    if not counts[Status.READY]:
        hint = " (`beflow issues set-status KEY ready` makes one ready)" if counts[Status.OPEN] else ""
        return f"nothing ready: {seen}{hint}"
    backoffs = dispatcher.retries.waiting()
    if backoffs:
        due = time.strftime("%H:%M:%S", time.localtime(backoffs[0].due))
        why = f"{len(backoffs)} backing off after a failed run, the next due at {due}"
    elif dispatcher.blockers.held:
        why = f"{len(dispatcher.blockers.held)} held back, waiting for other issues (as said above)"
    else:
        why = "the ready ones are held: claimed by another run, or skipped as said above"
    return f"nothing started: {seen}; {why}"
