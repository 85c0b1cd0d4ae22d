"""Whether the watch's last look at its tracker succeeded: the dashboard's "tracker reachable".

Only the tracker's own failures count: an error raised in the tracker's code (GitHub down or refusing, the local
tracker's files unreadable). Any other error of a tick — a config edit that did not reload, a full disk writing a
record, a check every run would fail — is the watch's, shown as an error, and says nothing of the tracker. A
later look that succeeds makes it reachable again.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import beflow.trackers

_TRACKERS = Path(beflow.trackers.__file__).resolve().parent


@dataclass
class TrackerLook:
    """The outcome of the watch's latest look at its tracker (None: it has not looked yet)."""

    reachable: bool | None = None
    at: float | None = None

    def succeeded(self) -> None:
        self.reachable, self.at = True, time.time()

    def failed(self, error: BaseException) -> None:
        """A tick's error: the tracker is unreachable if the tracker raised it, else nothing changes."""
        if raised_by_tracker(error):
            self.reachable, self.at = False, time.time()


def raised_by_tracker(error: BaseException) -> bool:
    """Whether ``error`` came out of the tracker's code (a frame of :mod:`beflow.trackers` on its way up)."""
    for frame, _ in traceback.walk_tb(error.__traceback__):
        if Path(frame.f_code.co_filename).resolve().is_relative_to(_TRACKERS):
            return True
    return False
