"""The ``--json`` event stream of ``watch`` and ``--auto``: JSON lines written by a thread of their own, so that a
reader that stops reading never holds up a run, the dispatcher or a signal.

Events are handed over on the event loop and never wait: a line that does not fit in what is pending (the reader
is that far behind) is dropped and counted, and once the reader takes lines again the stream says how many were
lost, in a ``notice`` event of its own, where they would have been.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
from collections import deque
from typing import Any

from beflow.cli.common import json_text

#: Bytes of lines waiting for the reader, at most; beyond it, events are dropped (and counted).
PENDING_LIMIT = 1 << 20
#: Seconds the end of a command waits for a reader to take what is pending, at most.
CLOSE_WAIT = 2.0


class EventStream:
    """JSON lines on stdout from a writer thread, never blocking the caller."""

    def __init__(self, limit: int = PENDING_LIMIT) -> None:
        self.limit = limit
        self._pending: deque[bytes] = deque()
        self._size = 0
        #: Events dropped since the last notice of them.
        self._dropped = 0
        self._broken = False
        self._closing = False
        self._changed = threading.Condition()
        self._busy = False
        self._write = _writer()
        self._thread = threading.Thread(target=self._run, name="beflow-json-stream", daemon=True)
        self._thread.start()

    def __call__(self, value: Any) -> None:
        """Queue one event (a dict or a model) as a line; drop it if the reader is too far behind."""
        line = (json_text(value) + "\n").encode("utf-8", errors="surrogateescape")
        with self._changed:
            if self._broken:
                return
            # Once dropping, dropping goes on until the reader has taken half of what was pending: one notice
            # for a stall, not one per line while the pipe takes a line at a time.
            resume = self.limit // 2 if self._dropped else self.limit
            if self._size + len(line) > resume:
                self._dropped += 1
                return
            if self._dropped:
                self._queue(self._notice())
            self._queue(line)

    def _queue(self, line: bytes) -> None:
        self._pending.append(line)
        self._size += len(line)
        self._changed.notify_all()

    def _notice(self) -> bytes:
        count, self._dropped = self._dropped, 0
        message = f"{count} event{'s' if count != 1 else ''} dropped: the reader was not reading"
        return (json_text({"event": "notice", "issue": None, "time": time.time(), "message": message}) + "\n").encode()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._closing:
                    self._changed.wait()
                if not self._pending:
                    return
                batch = b"".join(self._pending)
                self._pending.clear()
                self._busy = True
            try:
                self._write(batch)
            except (OSError, ValueError):  # the reader went away (a closed pipe): nothing more is written
                with self._changed:
                    self._broken = True
                    self._pending.clear()
            with self._changed:
                self._size = 0 if self._broken else self._size - len(batch)
                self._busy = False
                if self._dropped and not self._broken and self._size <= self.limit // 2:
                    self._queue(self._notice())  # the reader reads again: say at once what it missed
                self._changed.notify_all()

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Write what is pending (and a last notice of what was dropped) if the reader takes it within
        ``timeout``; a reader that does not is left behind."""
        deadline = time.monotonic() + timeout
        with self._changed:
            if self._dropped and not self._broken:
                self._queue(self._notice())
            self._closing = True
            self._changed.notify_all()
            while (self._pending or self._busy) and not self._broken:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)


def _writer() -> Any:
    """How lines reach stdout: straight to its file descriptor (a write that blocks holds no lock the rest of
    beflow needs, so exiting never waits on the reader), or through ``sys.stdout`` when it has none (captured)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, io.UnsupportedOperation, AttributeError):

        def through_python(data: bytes) -> None:
            sys.stdout.write(data.decode("utf-8", errors="surrogateescape"))
            sys.stdout.flush()

        return through_python

    def to_fd(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return to_fd
