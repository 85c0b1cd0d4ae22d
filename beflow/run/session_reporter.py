"""A run told as an agent's session on its issue (:class:`beflow.trackers.base.HostsAgentSessions`: Linear with an
app's token), from a thread of its own: the run's events are emitted on the event loop every run of a watch shares,
and each activity is a request.

Activities are sent in order; an ephemeral one (a tool call) still waiting is replaced by the next one (Linear would
replace it anyway), so nothing piles up however fast the agent works. While the run lives, the thread also asks every
:data:`STOP_EVERY` seconds whether a person sent the session a stop signal, and says so once through ``on_stop``;
:func:`look_now` has every live reporter of the process ask at once (a Linear webhook said a session was prompted).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from beflow.trackers.base import AgentSession

#: Seconds between two looks for a person's stop signal (one cheap request each).
STOP_EVERY = 5.0
#: Seconds the end of a run waits for the activities still queued before its response.
CLOSE_WAIT = 5.0

#: The reporters of the runs this process runs, while they listen for a stop.
_LISTENING: weakref.WeakSet[SessionReporter] = weakref.WeakSet()


def look_now() -> int:
    """Every reporter listening for a stop asks its session now, not at its next look (a webhook said a session was
    prompted: maybe with a stop); how many were asked."""
    reporters = list(_LISTENING)
    for reporter in reporters:
        reporter.look_now()
    return len(reporters)


@dataclass(frozen=True)
class _Step:
    send: Callable[[AgentSession], None]
    ephemeral: bool


class SessionReporter:
    """Sends a run's activities to its agent session and listens for a stop signal (see the module)."""

    def __init__(
        self,
        session: AgentSession,
        on_stop: Callable[[], None] | None = None,
        *,
        stop_every: float | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.session = session
        self._on_stop = on_stop
        self._stop_every = STOP_EVERY if stop_every is None else stop_every
        self._on_error = on_error
        self._queue: deque[_Step] = deque()
        self._changed = threading.Condition()
        self._closed = False
        self._busy = False
        self._failed = False
        self._look = False
        self._thread = threading.Thread(target=self._run, name="beflow-session", daemon=True)
        self._thread.start()
        if on_stop is not None:
            _LISTENING.add(self)

    def look_now(self) -> None:
        """Ask the session for a stop at once (after the activity being sent, if one is)."""
        with self._changed:
            self._look = True
            self._changed.notify_all()

    def action(self, action: str, parameter: str, *, ephemeral: bool = False) -> None:
        self._add(_Step(lambda s: s.action(action, parameter, ephemeral=ephemeral), ephemeral))

    def _add(self, step: _Step) -> None:
        with self._changed:
            if self._closed:
                return
            if self._queue and self._queue[-1].ephemeral:
                self._queue.pop()  # (replaced by the next activity, as Linear replaces an ephemeral one)
            self._queue.append(step)
            self._changed.notify_all()

    def _run(self) -> None:
        next_look = time.monotonic() + self._stop_every
        while True:
            with self._changed:
                while not self._queue and not self._closed:
                    if self._on_stop is None:  # (nobody listens for a stop: only an activity or the end wakes it)
                        self._changed.wait()
                        continue
                    wait = next_look - time.monotonic()
                    if wait <= 0 or self._look:
                        break
                    self._changed.wait(wait)
                if self._closed:
                    return
                step = self._queue.popleft() if self._queue else None
                look = step is None and self._look  # (asked to look now: after any activity waiting)
                if look:
                    self._look = False
                self._busy = True
            try:
                if step is not None:
                    step.send(self.session)
                elif self._on_stop is not None and (look or time.monotonic() >= next_look):
                    next_look = time.monotonic() + self._stop_every
                    if self.session.stop_asked():
                        on_stop, self._on_stop = self._on_stop, None
                        _LISTENING.discard(self)
                        on_stop()
            except Exception as error:  # the session is a courtesy: a tracker that fails it never fails the run
                if self._on_error is not None and not self._failed:
                    self._failed = True
                    self._on_error(error)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Stop listening; the activities queued are sent first (up to ``timeout`` seconds), then the thread ends.
        Called from a worker thread (the run's finish), never on the event loop."""
        _LISTENING.discard(self)
        with self._changed:
            self._on_stop = None
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self._queue and not self._busy, timeout)
            self._closed = True
            self._queue.clear()
            self._changed.notify_all()
