"""Blocking work off the event loop, and back onto it.

A git step is synchronous (:func:`beflow.system.proc.run_blocking`) and takes seconds on a big repository; the local
tracker waits up to 30 s for an issue's lock. Done on the event loop, either would stall every other run's output,
the watch's dispatching and beflow's own signal handling. So they run in worker threads (:func:`blocking`), and what
such a step says — a run's events, a watch's cancellation of a run — is handed back to the loop
(:func:`on_the_loop`), where displays, cancel scopes and the dispatcher's bookkeeping stay single-threaded.

A git command ends by :data:`beflow.repository.git.GIT_TIMEOUT` at the latest (and a signal to beflow stops it at
once), so a cancellation waits at most that long for a step in a worker thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

T = TypeVar("T")

#: Set in the worker threads of :func:`blocking` while they run a step.
_worker = threading.local()


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread."""

    def step() -> T:
        _worker.active = True
        try:
            return fn(*args, **kwargs)
        finally:
            _worker.active = False

    return await anyio.to_thread.run_sync(step)


async def shielded(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`blocking` for a step that must not be cut in two (a run's record and its tracker told that it started,
    or how it ended): a pending cancellation goes on at the next checkpoint, after it."""
    with anyio.CancelScope(shield=True):
        done = await blocking(fn, *args, **kwargs)
    return done


def on_the_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the event loop: from a worker thread of :func:`blocking`, handed to the loop and waited for;
    on the loop already (or with no loop at all), called at once."""
    if getattr(_worker, "active", False):
        return anyio.from_thread.run_sync(fn, *args)
    return fn(*args)


def looped(sink: Callable[[T], None]) -> Callable[[T], None]:
    """``sink``, always called on the event loop (a display, a dispatcher's listener)."""

    def on_loop(value: T) -> None:
        on_the_loop(sink, value)

    return on_loop


class Batched(Generic[T]):
    """A blocking read many threads ask for at once (five pages reading the state after the same event), made once
    for all who asked while the one before it ran: each asker gets a reading that began after it asked — never an
    older one (an action's change is in it) — and a burst of askers costs two readings at most, not one each."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._changed = threading.Condition()
        self._begun = 0  # readings started
        self._done = 0  # the latest reading finished
        self._running = False
        #: Askers waiting for a reading now (what a test waits on).
        self.waiting = 0
        self._result: tuple[T | None, BaseException | None] = (None, None)

    def __call__(self) -> T:
        with self._changed:
            wanted = self._begun + 1  # the first reading that begins after this call
            while self._done < wanted:
                if not self._running:
                    self._running, self._begun = True, self._begun + 1
                    break
                self.waiting += 1
                self._changed.wait()
                self.waiting -= 1
            else:
                return self._give(self._result)
            mine = self._begun
        result: tuple[T | None, BaseException | None]
        try:
            result = (self._read(), None)
        except BaseException as error:  # (handed to every asker of this reading, as their own call would)
            result = (None, error)
        with self._changed:
            self._result, self._done, self._running = result, mine, False
            self._changed.notify_all()
        return self._give(result)

    @staticmethod
    def _give(result: tuple[T | None, BaseException | None]) -> T:
        value, error = result
        if error is not None:
            raise error
        return value  # type: ignore[return-value]  # (None only with an error)
