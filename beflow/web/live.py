"""A running watch, as the HTTP server sees it: its events (the ``--json`` stream, numbered, in a bounded ring)
and its state (the dispatcher's snapshot, taken on the watch's own event loop).

The watch only ever hands an event over (:meth:`Hub.publish`: a lock held for an append, and at most one wake-up
of the server's loop pending): it never waits for the server, a client, or a socket. Each client reads the ring
at its own pace; one that falls behind by more than the ring holds is dropped (it may reconnect, and resume from
what the ring still has).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from anyio.lowlevel import EventLoopToken

    from beflow.config import Project
    from beflow.guardrails import DayBudget, Totals, Usage
    from beflow.mcp.redact import Redactor
    from beflow.run.spending import Ledger
    from beflow.trackers import Tracker
    from beflow.watch.lanes import Snapshot
    from beflow.watch.wake import Wakeup

#: Events the ring keeps for clients that resume (``Last-Event-ID``) or fall behind.
RING = 2000
#: Errors the health panel shows.
ERRORS_KEPT = 10
#: Seconds an action waits, at most, for the watch to look at the tracker after it (a slow tracker: the page
#: then shows the change at the watch's next look).
LOOK_WAIT = 5.0
#: Issues whose latest start was skipped (claimed elsewhere, unreadable) the queue shows, at most.
SKIPS_KEPT = 50


class Dropped(Exception):
    """A client fell further behind than the ring holds: it is disconnected."""


class Stopping(Exception):
    """The server is asked to stop: every event stream ends (before the server's graceful timeout runs out)."""


@dataclass(eq=False)  # each client is its own: hashed by identity
class Subscriber:
    """One SSE client: where it is in the ring, and what wakes it (on the server's loop)."""

    last: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class Hub:
    """The event ring and its subscribers. :meth:`publish` may be called from any thread and never blocks."""

    def __init__(self, ring: int = RING, max_clients: int = 16) -> None:
        self.max_clients = max_clients
        self._ring: deque[tuple[int, dict[str, Any]]] = deque(maxlen=ring)
        self._next = 1
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: set[Subscriber] = set()
        self._wake_pending = False
        #: The server is stopping: streams end, and no new one starts.
        self.stopping = False
        self.errors: deque[str] = deque(maxlen=ERRORS_KEPT)
        self.config_reloaded: float | None = None
        #: ``finished`` events so far: the recent runs the state shows change with them.
        self.finished = 0
        #: Issues the watch skipped (its ``skipped`` events: claimed by another machine, no longer ready, unreadable):
        #: key -> (why, when), until a run of the issue starts or ends here.
        self.skipped: dict[str, tuple[str, float]] = {}
        #: Called on the server's loop when new events came (MCP resource notifications read them with :meth:`since`).
        self.observers: list[Callable[[], None]] = []

    # -- the watch's side -------------------------------------------------------------------------------------------

    def publish(self, event: dict[str, Any]) -> None:
        """Number ``event`` and keep it; wake the server's loop if it is not woken already."""
        with self._lock:
            self._ring.append((self._next, event))
            self._next += 1
            if event.get("event") == "error":
                self.errors.append(str(event.get("message", "")))
            elif event.get("event") == "config_reloaded":
                self.config_reloaded = time.time()
            elif event.get("event") == "finished":
                self.finished += 1
            self._note_skip(event)
            loop, wake = self._loop, not self._wake_pending and self._loop is not None
            if wake:
                self._wake_pending = True
        if wake and loop is not None:
            with contextlib.suppress(RuntimeError):  # the server's loop is closed: nobody to tell
                loop.call_soon_threadsafe(self._fan_out)

    def _note_skip(self, event: dict[str, Any]) -> None:
        kind, key = event.get("event"), event.get("issue")
        if not isinstance(key, str):
            return
        if kind == "skipped":
            self.skipped.pop(key, None)
            self.skipped[key] = (str(event.get("reason", "")), time.time())
            while len(self.skipped) > SKIPS_KEPT:
                self.skipped.pop(next(iter(self.skipped)))
        elif kind in ("dispatched", "started", "finished"):
            self.skipped.pop(key, None)

    def skips(self) -> dict[str, tuple[str, float]]:
        with self._lock:
            return dict(self.skipped)

    def forget(self, keys: set[str]) -> None:
        """Skips the state shows otherwise (an issue the tracker cannot read is shown as such, and its ``skipped``
        is not shown again once it can be read)."""
        with self._lock:
            for key in keys & self.skipped.keys():
                del self.skipped[key]

    # -- the server's side ------------------------------------------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._loop = loop

    def _fan_out(self) -> None:
        with self._lock:
            self._wake_pending = False
        for subscriber in list(self._subscribers):
            subscriber.wake.set()
        for observer in list(self.observers):
            observer()

    def stop(self) -> None:
        """On the server's loop, when it is asked to stop: every event stream ends now (a stream left open would
        hold the server's shutdown until its timeout cancels it, loudly)."""
        self.stopping = True
        for subscriber in list(self._subscribers):
            subscriber.wake.set()

    @property
    def newest(self) -> int:
        with self._lock:
            return self._next - 1

    def since(self, last: int) -> tuple[int, list[dict[str, Any]]]:
        """Events after id ``last``: ``(missed, events)``, ``missed`` the count of those the ring no longer holds.
        A ``last`` ahead of the ring (from before a restart) starts over from what the ring holds."""
        with self._lock:
            if not self._ring:
                return 0, []
            first = self._ring[0][0]
            if last >= self._next:
                last = first - 1
            missed = max(0, first - 1 - last)
            # (ids run on without a gap: the newest ``wanted`` entries, read from the ring's end — a client that
            # keeps up costs what it reads, not the whole ring, on every event)
            wanted = min(len(self._ring), self._next - 1 - max(last, first - 1))
            newest = list(itertools.islice(reversed(self._ring), wanted))
            return missed, [{"id": i, **e} for i, e in reversed(newest)]

    def subscribe(self, last: int | None) -> Subscriber:
        if self.stopping:
            raise Stopping("the server is stopping")
        if len(self._subscribers) >= self.max_clients:
            raise OverflowError(f"{self.max_clients} event streams are open already")
        subscriber = Subscriber(self.newest if last is None else last)
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    @property
    def clients(self) -> int:
        return len(self._subscribers)

    async def next_batch(self, subscriber: Subscriber, behind: int) -> tuple[int, list[dict[str, Any]]]:
        """The subscriber's next events (waiting for some); :class:`Dropped` when it is more than ``behind``
        events behind the newest (a reader that does not keep up)."""
        while True:
            if self.stopping:
                raise Stopping("the server is stopping")
            missed, events = self.since(subscriber.last)
            if events:
                if self.newest - subscriber.last > behind and subscriber.last != 0:
                    raise Dropped(f"{self.newest - subscriber.last} events behind")
                subscriber.last = events[-1]["id"]
                return missed, events
            subscriber.wake.clear()
            await subscriber.wake.wait()


class Said:
    """Each event as the streams send it (serialized and masked), made once for every client that sends it: five
    pages open are one serialization an event, not five. One a server (its hub numbers the events), used on its loop
    only."""

    def __init__(self, keep: int = 256) -> None:
        self.keep = keep
        self._texts: dict[int, tuple[object, str]] = {}

    def text(self, redact: Redactor, event: dict[str, Any]) -> str:
        """``event`` (with its ``id``) as an SSE message, masked by ``redact``."""
        identifier = event["id"]
        kept = self._texts.get(identifier)
        if kept is not None and kept[0] is redact:  # (a config reload's new secrets: masked again)
            return kept[1]
        body = {k: v for k, v in event.items() if k != "id"}
        text = f"id: {identifier}\ndata: {redact.text(json.dumps(body, ensure_ascii=False, default=str))}\n\n"
        self._texts[identifier] = (redact, text)
        while len(self._texts) > self.keep:
            del self._texts[next(iter(self._texts))]
        return text


@dataclass(frozen=True)
class LaneData:
    key: str
    run_id: str | None
    attempt: int
    started: float
    latest: str
    progress: str
    cancelling: bool
    reason: str | None
    #: The run's latest reported usage (its ``usage`` events, then its ``finished`` event's).
    usage: Usage | None = None
    #: The review round it runs (0: the issue's first run).
    round: int = 0


@dataclass(frozen=True)
class WatchData:
    """The dispatcher's state, copied on its loop: plain values the server's threads may read."""

    lanes: list[LaneData]
    queue: list[tuple[str, str, int]]
    backoffs: list[tuple[str, int, float, str]]
    tick: int
    next_tick: float
    concurrency: int
    interval: float
    blocked: str | None
    #: How to fix what holds dispatching back (the check's fix).
    blocked_fix: str | None
    tracker: Any
    #: What the watch's finished runs used, the day against ``limits.cost_per_day``, and whether that holds
    #: dispatching back (``budget_reached``).
    used: Totals | None = None
    budget: DayBudget | None = None
    budget_held: bool = False
    #: Issues the tracker could not read at its last listing, with why (GitHub: a hostile label, say).
    unreadable: dict[str, str] = field(default_factory=dict)
    #: Whether the watch's last look at the tracker succeeded (None: not looked yet).
    tracker_reachable: bool | None = None
    #: The ticks whose look at the tracker is done.
    surveyed: int = 0
    #: Ready issues held back for their blockers, and why.
    held: dict[str, str] = field(default_factory=dict)


class Watching(Protocol):
    """What the server reads of a running watch (:class:`beflow.watch.dispatcher.Dispatcher` is one): its state, never
    its machinery."""

    project: Project
    tracker: Tracker
    ledger: Ledger
    wakeup: Wakeup | None

    def snapshot(self) -> Snapshot: ...


class WatchSource:
    """A running watch, asked on its own event loop (it is single-threaded there)."""

    def __init__(self, dispatcher: Watching, hub: Hub) -> None:
        self.dispatcher = dispatcher
        self.hub = hub
        self.token: EventLoopToken | None = None

    def attach(self) -> None:
        """Called on the watch's loop before it starts."""
        from anyio.lowlevel import current_token

        self.token = current_token()

    def _copy(self) -> WatchData:

        snapshot = self.dispatcher.snapshot()
        tracker = self.dispatcher.tracker
        return WatchData(
            lanes=[
                LaneData(
                    r.key,
                    r.run_id,
                    r.attempt,
                    r.started,
                    r.latest,
                    r.progress,
                    r.cancelling,
                    r.reason,
                    r.usage,
                    r.round,
                )
                for r in snapshot.running
            ],
            queue=[(i.key, i.title, i.priority) for i in snapshot.queue],
            backoffs=[(b.key, b.attempt, b.due, b.reason) for b in snapshot.backoffs],
            tick=snapshot.tick,
            next_tick=snapshot.next_tick,
            concurrency=self.dispatcher.project.config.watch.concurrency,
            interval=self.dispatcher.project.config.watch.interval,
            blocked=snapshot.blocked,
            blocked_fix=snapshot.blocked_fix,
            tracker=tracker,
            used=snapshot.used,
            budget=snapshot.budget,
            budget_held=self.dispatcher.ledger.holding,
            unreadable=dict(snapshot.unreadable),
            tracker_reachable=snapshot.tracker_reachable,
            surveyed=snapshot.surveyed,
            held=dict(snapshot.held),
        )

    def data(self) -> WatchData | None:
        """The state, from a thread that is not the watch's loop; None before the watch started or after it ended."""
        import anyio.from_thread

        if self.token is None:
            return None
        try:
            return anyio.from_thread.run_sync(self._copy, token=self.token)
        except RuntimeError:  # the loop has ended
            return None

    def looked(self, wait: float = LOOK_WAIT) -> None:
        """Wake the watch and wait (``wait`` seconds at most) until it has looked at the tracker since: what an
        action just wrote is then in the state the page reads next (a new issue in the queue, its new order)."""
        before = self.data()
        if before is None:
            return
        self.refresh()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            now = self.data()
            if now is None or now.surveyed > before.tick:  # a tick that started after the write has looked
                return
            time.sleep(0.02)

    def refresh(self) -> None:
        """Look at the tracker now (``POST /api/v1/refresh``): the dispatcher's wait ends at once."""
        from beflow.watch.wake import REFRESH

        self._wake(REFRESH)

    def hooked(self, forge: str) -> None:
        """A verified webhook of ``forge`` says something changed: the dispatcher looks now (``/hooks/<forge>``)."""
        from beflow.watch.wake import HOOKED

        self._wake(f"{HOOKED} ({forge})")

    def _wake(self, reason: str) -> None:
        import anyio.from_thread

        if self.token is None:
            return

        def wake() -> None:
            if self.dispatcher.wakeup is not None:
                self.dispatcher.wakeup.set(reason)

        with contextlib.suppress(RuntimeError):  # the watch has ended
            anyio.from_thread.run_sync(wake, token=self.token)
