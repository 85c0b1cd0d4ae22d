"""A run's progress, shown on its issue by a tracker that can (GitHub edits a comment), from a thread of its own.

Telling the tracker is network I/O (an HTTP request with retries and a 30 s timeout); a run's events are emitted
on the event loop that every run of a watch shares. So emitting only hands the text over: one worker thread per
run sends the latest text, and a text that a newer one replaces before it was sent is never sent (nothing piles
up however fast the agent works or however slow the tracker answers).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: Seconds the end of a run waits for a progress update already on its way (it would otherwise land after the
#: outcome, on the same comment); one that takes longer is left to finish on its own.
CLOSE_WAIT = 2.0


class ProgressReporter:
    """Sends ``send(text)`` for the latest text :meth:`report` was given, from a worker thread started on first
    use; never blocks the caller."""

    def __init__(self, send: Callable[[str], object], *, name: str = "beflow-progress") -> None:
        self._send = send
        self._name = name
        self._changed = threading.Condition()
        self._latest: str | None = None
        self._sending = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def report(self, text: str) -> None:
        """Make ``text`` the next one sent (replacing one not sent yet)."""
        with self._changed:
            if self._closed:
                return
            self._latest = text
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._latest is None and not self._closed:
                    self._changed.wait()
                if self._closed or self._latest is None:
                    return
                text, self._latest = self._latest, None
                self._sending = True
            try:
                self._send(text)
            except Exception:  # progress is a courtesy: a tracker that fails it never fails the run
                pass
            finally:
                with self._changed:
                    self._sending = False
                    self._changed.notify_all()

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Stop: a text not sent yet is dropped (the run's outcome replaces it), one on its way is waited for up to
        ``timeout`` seconds. Called from a worker thread (the run's finish), never on the event loop."""
        with self._changed:
            self._closed = True
            self._latest = None
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self._sending, timeout)
