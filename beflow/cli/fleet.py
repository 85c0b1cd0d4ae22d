"""A fleet on Temporal (docs/fleet.md): ``beflow temporal dev``, ``beflow worker``, and ``beflow watch`` as its
dispatcher."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from beflow.cli.common import App, HelpGroup, emit_json, err, escape, out, pass_app
from beflow.cli.lines import event_line
from beflow.cli.serve import stopped_as_a_service
from beflow.config import Project
from beflow.errors import UsageError
from beflow.events import RunEvent, WatchEvent
from beflow.system import hardening, interrupts

#: The events a worker or a fleet's dispatcher gives a line.
SHOWN = {
    "dispatched",
    "cancelled",
    "requeued",
    "settled",
    "skipped",
    "error",
    "started",
    "finished",
    "notice",
    "feedback",
    "swept",
    "held",
    "triggered",
    "ignored",
}


def _line(event: WatchEvent | RunEvent, as_json: bool) -> None:
    if as_json:
        emit_json(event.to_json())
        return
    if event.type not in SHOWN:
        return
    err.print(escape(event_line(event)), highlight=False)


@click.group("temporal", cls=HelpGroup, epilog="Example:\n\n  beflow temporal dev")
def group() -> None:
    """Temporal, the engine of a fleet: a local dev server for a try-out."""


@group.command("dev", epilog="Examples:\n\n  beflow temporal dev\n\n  beflow temporal dev --port 7300 --ui-port 8233")
@click.option("--port", type=click.IntRange(1, 65535), default=7233, show_default=True, help="The frontend's port.")
@click.option("--ui-port", type=click.IntRange(1, 65535), help="Also serve Temporal's web UI on this port.")
@click.option(
    "--db",
    "database",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The database file (default: temporal/dev.db in beflow's home); it keeps workflows across restarts.",
)
def dev(port: int, ui_port: int | None, database: Path | None) -> None:
    """Start Temporal's local dev server on 127.0.0.1 and print its address; Ctrl-C stops it."""
    from beflow.fleet import devserver

    where = database or devserver.default_database()

    def ready() -> None:
        out.print(f"{devserver.HOST}:{port}", highlight=False)
        ui = f"; web UI on http://{devserver.HOST}:{ui_port}" if ui_port else ""
        err.print(escape(f"Temporal dev server at {devserver.HOST}:{port} (database {where}{ui}); Ctrl-C stops it"))

    with stopped_as_a_service():
        code = interrupts.run(lambda: devserver.serve(port, where, ready, ui_port=ui_port))
    if code:
        raise SystemExit(code)


@click.command(
    "worker",
    short_help="Run a fleet's issues on this machine (the Temporal engine).",
    epilog="Examples:\n\n  beflow worker\n\n  beflow worker --lanes 4 --id build-box-1",
)
@click.option("--lanes", type=click.IntRange(1, 64), default=2, show_default=True, help="Runs at once here.")
@click.option("--id", "name", metavar="NAME", help="This worker's name (default: host and pid); unique in the fleet.")
@click.option("--json", "as_json", is_flag=True, help="One JSON event per line.")
@pass_app
def worker(app: App, lanes: int, name: str | None, as_json: bool) -> None:
    """Take runs of the fleet's issues, up to --lanes at once, until stopped (Ctrl-C or SIGTERM: running runs are
    cancelled and recorded; the fleet resumes them on another worker)."""
    from beflow.app import engine, open_project
    from beflow.fleet.shapes import engine_of

    project = app.project()
    engine_of(project)  # a project on the embedded engine has no fleet to work for: say so, with the fix
    engine(project)  # (the Temporal SDK installed, or how to install it)
    from beflow.fleet.worker import FleetWorker, default_name

    hardening.keep_private()  # before any agent runs (docs/safety.md)
    opened = open_project(project)
    fleet = FleetWorker(project, opened, lanes, name or default_name(), lambda event: _line(event, as_json))

    def ready() -> None:
        err.print(escape(f"worker {fleet.name}: {lanes} lane(s) on {fleet.settings.address}, queue {fleet.queue}"))

    with stopped_as_a_service():  # a worker is a service: SIGTERM is how it is stopped
        interrupts.run(lambda: fleet.serve(ready))


def watch_fleet(project: Project, *, once: bool, as_json: bool, http: str | None = None) -> None:
    """``beflow watch`` with the Temporal engine: the fleet's dispatcher."""
    from beflow.app import open_project
    from beflow.fleet.dispatch import FleetDispatcher

    if http is not None:
        raise UsageError(
            "--http shows the runs of this machine's watch; with the Temporal engine the runs are the workers'",
            fix="Leave --http out, and see the fleet in Temporal's web UI (`beflow temporal dev --ui-port 8233`).",
        )

    dispatcher = FleetDispatcher(project, open_project(project), lambda event: _line(event, as_json))
    if not as_json:
        err.print(escape(f"dispatching to the fleet at {dispatcher.settings.address} — Ctrl-C stops"))
    # A watch is a service stopped by a signal; an interrupted `--once` is an interruption.
    with stopped_as_a_service() if not once else contextlib.nullcontext():
        interrupts.run(lambda: dispatcher.watch(once=once))
