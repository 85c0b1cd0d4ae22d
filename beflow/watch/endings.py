"""What a run's end changes in a watch: the runs it shows as recent, what its runs used (its ledger, and a hold when
the agent reports in another currency than the budgets'), the ``finished`` event, and the issue's next attempt (a
retry after its backoff, or giving up: the decisions are :mod:`beflow.run.policy`'s, through
:class:`~beflow.watch.retries.Retries`)."""

from __future__ import annotations

import dataclasses
from collections import deque

from beflow import guardrails
from beflow.config import Config, Watch
from beflow.events import WatchEmit
from beflow.records.record import RunRecord
from beflow.run.spending import Ledger
from beflow.watch.holds import Holds
from beflow.watch.retries import Retries

#: The finished runs a watch shows (its view, the dashboard's recent runs).
RECENT = 20


class Endings:
    """A watch's side of its runs' ends."""

    def __init__(self, ledger: Ledger, holds: Holds, retries: Retries, emit: WatchEmit) -> None:
        self.ledger = ledger
        self.holds = holds
        self.retries = retries
        self.emit = emit
        self.recent: deque[RunRecord] = deque(maxlen=RECENT)

    def finished(self, record: RunRecord, finished: list[RunRecord], config: Config) -> None:
        """``record`` ended: counted, shown, told (``finished``, with what it and the watch used)."""
        finished.append(record)
        self.recent.appendleft(record)
        self.ledger.finished(record)
        usage = record.usage
        if usage is not None and guardrails.currency_mismatch(usage.currency, config.limits) is not None:
            self.holds.wrong_currency = (usage.currency or "", config.agent)
        used = guardrails.event_data(record.usage)
        self.emit(
            "finished",
            record.issue,
            run=record.id,
            outcome=record.outcome,
            reason=record.stop_reason,
            **({"round": record.round} if record.round else {}),
            **({"usage": used} if used else {}),
            watch_used=dataclasses.asdict(self.ledger.watch),
        )

    def next_attempt(self, record: RunRecord, settings: Watch) -> None:
        """The issue's next attempt after ``record``: a retry scheduled, or given up (said), or none."""
        step = self.retries.after(record, settings)
        if step.action == "retry":
            self.emit("retry_scheduled", record.issue, attempt=step.attempt, delay=step.delay)
        elif step.action == "give_up":
            self.emit("failed", record.issue, reason=step.reason)
