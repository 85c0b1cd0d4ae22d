"""What wakes ``beflow watch`` between its polls: a run ending, an issue file created or edited, a claim released.

The dispatcher sleeps on one :class:`Wakeup` until its next poll is due; anything that may make a run startable
calls :meth:`Wakeup.set`, and the next tick comes at once instead of ``watch.interval`` later. Sources of wake-ups
are small and separate: the dispatcher's own run tasks call ``set`` when a run ends; :func:`watch_directories`
turns file system events in the local tracker's directories into wake-ups. The interval stays as the fallback
poll, for what no event tells (a clock reaching a backoff's due time is handled by the sleep's deadline).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path

import anyio

#: Why a person woke the watch (the dashboard's refresh): feedback is read afresh too.
REFRESH = "refresh asked over HTTP"
#: Why a forge woke the watch (a verified webhook, :mod:`beflow.web.hooks`): feedback is read afresh too.
HOOKED = "a webhook arrived"


def looks_again(reasons: list[str]) -> bool:
    """Whether the reasons a wait ended for ask for every source's feedback to be read afresh: a person's refresh, or
    a forge saying something changed (a review, a note, a check finished)."""
    return any(reason == REFRESH or reason.startswith(HOOKED) for reason in reasons)


class Wakeup:
    """A level-triggered wake-up: ``set`` any number of times, one ``wait`` returns (and clears it)."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.reasons: list[str] = []
        #: What :func:`watch_directories` watches right now: the directories a change in which wakes the
        #: dispatcher, an empty list while it waits for one to appear, None when it is not watching.
        self.watching: list[Path] | None = None

    def set(self, reason: str = "") -> None:
        if reason and len(self.reasons) < 16:
            self.reasons.append(reason)
        self._event.set()

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float) -> list[str]:
        """Until ``set`` or ``timeout`` seconds; the reasons it was set for (empty: the timeout)."""
        if not self._event.is_set() and timeout > 0:
            with anyio.move_on_after(timeout if math.isfinite(timeout) else None):
                await self._event.wait()
        reasons, self.reasons = self.reasons, []
        if self._event.is_set():
            self._event = anyio.Event()
            return reasons or ["woken"]
        return reasons


async def watch_directories(paths: Callable[[], list[Path]], wakeup: Wakeup, *, retry: float = 0.5) -> None:
    """Set ``wakeup`` whenever something changes in one of the directories ``paths()`` names (not recursively).

    Directories that do not exist yet (a tracker with no issue has no directory) are looked for every ``retry``
    seconds, and one appearing is a change too. Runs until cancelled; a file system that cannot be watched
    leaves the dispatcher to its polls.
    """
    import watchfiles  # only a long watch needs it

    # watchfiles reports its own problems (an inotify limit reached) through logging: the poll covers for them.
    logging.getLogger("watchfiles").setLevel(logging.ERROR)
    watched: list[Path] = []
    while True:
        existing = [p for p in paths() if p.is_dir()]
        if any(p not in watched for p in existing) and watched:
            wakeup.set("a directory appeared")  # what was written into it before the watcher started counts
        watched = existing
        if not existing:
            wakeup.watching = []
            await anyio.sleep(retry)
            watched = [Path()]  # so that the first directory to appear wakes the dispatcher
            continue
        stop = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                if len(existing) < len(paths()):
                    group.start_soon(_stop_when_more, paths, len(existing), stop, retry)
                # rust_timeout: a cancellation (Ctrl-C, SIGTERM) waits for the watcher's thread to come back, which
                # by default it does after 5 s without a change; a quarter of a second keeps a stop prompt.
                # Set before the watcher exists, but no other task runs until its first wait: by then it watches.
                wakeup.watching = existing
                async for _ in watchfiles.awatch(
                    *existing,
                    recursive=False,
                    stop_event=stop,
                    debounce=200,
                    step=20,
                    rust_timeout=250,
                    watch_filter=_interesting,
                ):
                    wakeup.set("files changed")
                group.cancel_scope.cancel()
        except (OSError, RuntimeError):
            wakeup.watching = None
            await anyio.sleep(retry)  # a watched directory was removed, the watcher failed: start again
            watched = [Path()]
        finally:
            wakeup.watching = None


async def _stop_when_more(paths: Callable[[], list[Path]], count: int, stop: anyio.Event, retry: float) -> None:
    """Stop the watcher when more of ``paths()`` exist than it watches, so that it starts again with them."""
    while not stop.is_set():
        await anyio.sleep(retry)
        if len([p for p in paths() if p.is_dir()]) > count:
            stop.set()


def _interesting(change: object, path: str) -> bool:
    """Issue files and claim notes; not beflow's own temporary files and locks."""
    return not path.endswith((".tmp", ".lock"))
