"""Showing runs as they go: a live rich view on a terminal, plain lines elsewhere, JSON lines with ``--json``."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING

from beflow.cli.common import err, escape
from beflow.cli.stream import EventStream

if TYPE_CHECKING:  # the live view is only for a terminal: runs printing JSON or into a file never load it
    from rich.table import Table

    from beflow.cli.live import LiveView
from beflow.events import Activity, AgentProgress, Finished, Notice, RunEvent, Started

OUTCOME_STYLE = {
    "succeeded": "green",
    "no_changes": "cyan",
    "asked": "yellow",
    "failed": "red",
    "timeout": "red",
    "stalled": "red",
    "over_budget": "red",
    "cancelled": "yellow",
}


class Progress:
    """Receives :class:`RunEvent` s (possibly from several runs at once) and shows them."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.running: dict[str, dict[str, object]] = {}
        self.live: LiveView | None = None
        # A reader that stops reading never holds up a run or a signal (beflow.cli.stream).
        self.stream = EventStream() if as_json else None
        if not as_json and err.is_terminal:
            from beflow.cli.live import LiveView

            # Drawn from the running runs on each refresh: their elapsed times tick while their agents are silent.
            self.live = LiveView(self._table, per_second=4)

    def __enter__(self) -> Progress:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.stop()
        if self.stream is not None:
            self.stream.close()

    def __call__(self, event: RunEvent) -> None:
        if self.stream is not None:
            self.stream(event.to_json())
            return
        match event.data:
            case Started(branch=branch):
                self.running[event.run_id] = {"issue": event.issue, "since": event.time, "latest": "starting"}
                self._print(f"▶ issue {event.issue}: run {event.run_id} on {branch}")
            case Activity(latest=latest) if event.run_id in self.running:
                self.running[event.run_id]["latest"] = latest
            case AgentProgress(text=text):
                self._print(f"  issue {event.issue}: progress: {text}")
            case Notice(message=message):
                self._print(f"  issue {event.issue}: {message}")
            case Finished(outcome=outcome, reason=reason, commit=commit):
                self.running.pop(event.run_id, None)
                style = OUTCOME_STYLE.get(outcome, "white")
                tail = f" → commit {commit[:12]}" if commit else ""
                self._print(
                    f"[{style}]■ issue {escape(event.issue)}: {outcome}[/] — {escape(str(reason))}{tail}",
                    markup=True,
                )
        if self.live is not None:
            self.live.refresh()

    def _print(self, text: str, *, markup: bool = False) -> None:
        (self.live.console if self.live else err).print(text if markup else escape(text), highlight=False)

    def _table(self) -> Table:
        from rich.table import Table

        table = Table(box=None, show_header=bool(self.running), pad_edge=False)
        table.add_column("issue", style="bold")
        table.add_column("elapsed", justify="right")
        table.add_column("latest activity", overflow="ellipsis", no_wrap=True, max_width=80)
        for row in list(self.running.values()):  # (a copy in one step: the view's thread draws while runs change)
            elapsed = time.time() - float(row["since"])  # type: ignore[arg-type]
            table.add_row(str(row["issue"]), f"{elapsed:.0f}s", escape(str(row["latest"])))
        return table
