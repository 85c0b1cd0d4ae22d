"""The live terminal view of ``--auto`` and ``watch``: a rich ``Live`` drawn afresh from the state on every refresh,
so that what counts on by itself (elapsed times, a backoff's "due in") moves while no event comes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from beflow.cli.common import err

if TYPE_CHECKING:  # rich is loaded for the live view only: `--json` (cron, scripts) never needs it
    from rich.console import Console, RenderableType
    from rich.live import Live


class LiveView:
    """A view on stderr redrawn from ``draw()`` ``per_second`` times a second, taken down (transient) at the end."""

    def __init__(self, draw: Callable[[], RenderableType], *, per_second: float) -> None:
        from rich.live import Live

        # get_renderable, not a renderable: rich calls it on each refresh, so nothing shown goes stale.
        self._live: Live = Live(get_renderable=draw, console=err, refresh_per_second=per_second, transient=True)

    @property
    def console(self) -> Console:
        """Where to print lines above the view (they scroll; the view stays below them)."""
        return self._live.console

    def refresh(self) -> None:
        """Draw now (an event changed the state) rather than at the next refresh."""
        self._live.refresh()

    def start(self) -> None:
        self._live.start()

    def stop(self) -> None:
        with contextlib.suppress(OSError):  # a closed window (SIGHUP): nothing to take down, the exit code says
            self._live.stop()

    def __enter__(self) -> LiveView:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
