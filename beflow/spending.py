"""What a watch's runs used, and its day's spending against ``limits.cost_per_day``: the figures the dispatcher
keeps and its view and events show (the decisions are :mod:`beflow.guardrails`')."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from beflow.config import Limits
from beflow.guardrails import DayBudget, Totals, Usage, day_budget, total
from beflow.records import RunRecord, RunStore


def last_on_session(records: Iterable[RunRecord], session: str) -> Usage | None:
    """What the latest of ``records`` (newest first) on the ACP session ``session`` reported of the session's
    cost; None when none did. A run that resumes the session counts its cost from there."""
    for record in records:
        on_it = session in (record.session, record.resumed_session)
        if on_it and record.usage is not None and record.usage.cost is not None:
            return record.usage
    return None


def today() -> dt.date:
    """The local calendar day: a day's budget resets at the user's midnight."""
    return dt.datetime.now().astimezone().date()


def day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time()).astimezone()


class Ledger:
    """The usage of a watch's runs (those it ran, summed as they finish) and of the day's runs of the project's
    watches (from their records, read once a day, then kept up as runs finish)."""

    def __init__(self, day: Callable[[], dt.date] = today) -> None:
        self._day = day
        self.watch = Totals()  # what this watch's runs used since it started
        self._today: dt.date | None = None
        self._spent = Totals()  # the day's finished watch runs, this process's and others'
        self._counted: set[str] = set()
        #: Whether dispatching is held by the day's budget (as last said).
        self.holding = False

    def refresh(self, store: RunStore) -> None:
        """On a new day (and the first time), read the day's records: runs of other watchers, and of this one
        before a restart, count too. Blocking: from a worker thread."""
        day = self._day()
        if day == self._today:
            return
        records = [r for r in store.started_since(day_start(day)) if r.mode == "watch" and r.finished]
        self._today, self._counted = day, {r.id for r in records}
        self._spent = total(r.usage for r in records)

    def finished(self, record: RunRecord) -> None:
        """A run of this watch ended: it counts for the watch and for its day."""
        self.watch = total([record.usage], self.watch)
        if record.id not in self._counted and self._today is not None and record.started_at >= day_start(self._today):
            self._counted.add(record.id)
            self._spent = total([record.usage], self._spent)

    def budget(self, limits: Limits, running: Iterable[Usage | None]) -> DayBudget | None:
        """The day against ``limits.cost_per_day``, the runs still going counted with what they reported so far."""
        day = self._today or self._day()
        live = total(running)
        spent = Totals(self._spent.runs, self._spent.reported, self._spent.tokens, dict(self._spent.cost))
        for currency, value in live.cost.items():
            spent.cost[currency] = spent.cost.get(currency, 0.0) + value
        return day_budget(spent, limits, day)
