"""What a watch's runs used, and its day's spending against ``limits.cost_per_day``: the figures the dispatcher
keeps and its view and events show (the decisions are :mod:`beflow.guardrails`')."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterable

from beflow.config import Limits
from beflow.guardrails import DayBudget, Totals, Usage, day_budget, total
from beflow.records.record import RunRecord
from beflow.records.store import RunStore


def today() -> dt.date:
    """The local calendar day: a day's budget resets at the user's midnight."""
    return dt.datetime.now().astimezone().date()


def day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time()).astimezone()


class Ledger:
    """The usage of a watch's runs (those it ran, summed as they finish) and of the day's runs of the project's
    watches (from their records: all of the day's on a new day, then at each look those written since)."""

    def __init__(self, day: Callable[[], dt.date] = today) -> None:
        self.day = day
        self.watch = Totals()  # what this watch's runs used since it started
        self._today: dt.date | None = None
        self._spent = Totals()  # the day's finished watch runs, this process's and others'
        self._counted: set[str] = set()
        #: Each of the day's ``run.json`` as it was when last read (its mtime, size, inode): only a new or
        #: rewritten one is read again.
        self._seen: dict[str, tuple[int, int, int]] = {}
        #: Whether dispatching is held by the day's budget (as last said).
        self.holding = False

    def refresh(self, store: RunStore) -> None:
        """Count the day's watch runs that finished since the last look, from their records: on a new day (and
        the first time) every record of the day (this watch's before a restart, other watch processes'); then,
        at each look, only the records written since (a run another watch process of the project finished
        meanwhile counts too). Blocking: from a worker thread."""
        day = self.day()
        if day != self._today:
            self._today, self._counted, self._seen, self._spent = day, set(), {}, Totals()
        records = store.started_since(day_start(day), wanted=self._changed)
        self._count(r for r in records if r.mode == "watch" and r.finished)

    def _changed(self, path: str) -> bool:
        """Whether ``path`` is new or was written since it was last read (a finished run's record is rewritten)."""
        try:
            info = os.stat(path)
        except OSError:
            return False
        now = (info.st_mtime_ns, info.st_size, info.st_ino)
        if self._seen.get(path) == now:
            return False
        self._seen[path] = now
        return True

    def _count(self, records: Iterable[RunRecord]) -> None:
        fresh = [r for r in records if r.id not in self._counted]
        if fresh:
            self._counted.update(r.id for r in fresh)
            self._spent = total((r.usage for r in fresh), self._spent)

    def finished(self, record: RunRecord) -> None:
        """A run of this watch ended: it counts for the watch and for its day."""
        self.watch = total([record.usage], self.watch)
        if self._today is not None and record.started_at >= day_start(self._today):
            self._count([record])

    def budget(self, limits: Limits, running: Iterable[Usage | None]) -> DayBudget | None:
        """The day against ``limits.cost_per_day``, the runs still going counted with what they reported so far."""
        day = self._today or self.day()
        live = total(running)
        spent = Totals(self._spent.runs, self._spent.reported, self._spent.tokens, dict(self._spent.cost))
        for currency, value in live.cost.items():
            spent.cost[currency] = spent.cost.get(currency, 0.0) + value
        return day_budget(spent, limits, day)
