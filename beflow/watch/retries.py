"""A watch's series of attempts: how many times each issue has run, and which issues are backing off until when.

The dispatcher asks what attempt comes next and whether an issue may start now; after each run it hands the
record here, and :func:`beflow.run.policy.after_run` decides (done, retry later, give up). A watcher that has not run
an issue yet takes up its series from its run records (:func:`beflow.run.policy.recall`), so that a restarted watcher,
another watcher or ``--once`` from cron goes on counting where the last run stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from beflow.config import Watch
from beflow.records.record import RunRecord
from beflow.records.store import RunStore
from beflow.run.policy import Next, after_run, recall


@dataclass
class Backoff:
    key: str
    attempt: int  # the attempt that will run when it is due
    due: float
    reason: str


class Retries:
    """The attempts and backoffs of one watch, due by ``clock`` (the wall clock: run records keep wall times)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.attempts: dict[str, int] = {}
        self.backoffs: dict[str, Backoff] = {}

    def backing_off(self, key: str, now: float) -> bool:
        backoff = self.backoffs.get(key)
        return backoff is not None and backoff.due > now

    def start(self, key: str) -> int:
        """The attempt a run of ``key`` starting now is: its backoff, if it had one, is over."""
        self.backoffs.pop(key, None)
        return self.attempts.get(key, 0) + 1

    def waiting(self) -> list[Backoff]:
        """The backoffs, soonest due first."""
        return sorted(self.backoffs.values(), key=lambda b: b.due)

    def recall(self, store: RunStore, keys: list[str], watch: Watch) -> None:
        """Take up the retry count and backoff of the issues among ``keys`` this watch has not run yet from their
        run records."""
        keys = [key for key in keys if key not in self.attempts]
        if not keys:
            return
        latest: dict[str, RunRecord] = {}
        for record in store.records(keys):  # newest first
            if record.issue in keys and record.issue not in latest and record.outcome not in ("running", "cancelled"):
                latest[record.issue] = record
        for key in keys:
            last = latest.get(key)
            recalled = recall(last, watch)
            self.attempts[key] = recalled.attempts
            if recalled.retry is not None and last is not None:
                attempt, due = recalled.retry
                self.backoffs[key] = Backoff(key, attempt, due, last.stop_reason or "")

    def after(self, record: RunRecord, watch: Watch) -> Next:
        """What follows ``record``'s run, written into the series (a retry's backoff, a new series after giving up)."""
        key = record.issue
        step = after_run(
            record.outcome,
            record.attempt,
            permanent=record.permanent,
            reason=record.stop_reason or "",
            watch=watch,
        )
        if step.action == "done":
            self.attempts[key] = 0
        elif step.action == "retry":
            self.attempts[key] = record.attempt
            self.backoffs[key] = Backoff(key, step.attempt, self.clock() + step.delay, record.stop_reason or "")
        elif step.action == "give_up":
            self.attempts.pop(key, None)  # a person who fixes the cause and reopens it starts a fresh series
        return step
