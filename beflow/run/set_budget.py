"""Best of N's budget for the whole set (``attempts.max_cost``, in ``limits.currency``; docs/runs.md#best-of-n):
what the candidates (and the reviewer) of one issue cost together, live, and every one of them stopped when it
reaches the budget. A run's own limits are :class:`beflow.run.limits.Limiter`'s; this stops all of the set's at once.
"""

from __future__ import annotations

from beflow.guardrails import Breach, Usage
from beflow.run.limits import Limiter


class SetBudget:
    """One issue's candidates' spending against ``limit`` (None: no budget, nothing is stopped). Each run's turn
    :meth:`join` s with its limiter and reports every :meth:`spent` figure; once the sum of their costs in
    ``currency`` reaches ``limit`` (or one reports its cost in another currency: a budget it does not report cannot
    be kept), every joined run is stopped ``over_budget`` and :attr:`breach` tells the judged run to start no more.
    Runs of one event loop only (the candidates' tasks): nothing here is locked."""

    def __init__(self, limit: float | None, currency: str) -> None:
        self.limit = limit
        self.currency = currency
        self.breach: Breach | None = None
        self._costs: dict[str, float] = {}
        self._running: dict[str, Limiter] = {}

    @property
    def total(self) -> float:
        """What the set's runs cost so far, in :attr:`currency`."""
        return sum(self._costs.values())

    def join(self, run_id: str, limiter: Limiter) -> None:
        """Run ``run_id`` starts its agent under ``limiter``: stopped at once when the budget is already spent."""
        self._running[run_id] = limiter
        if self.breach is not None:
            limiter.stop(self.breach)

    def leave(self, run_id: str) -> None:
        """Run ``run_id``'s agent ended: what it cost stays counted."""
        self._running.pop(run_id, None)

    def spent(self, run_id: str, usage: Usage) -> None:
        """Run ``run_id`` reported ``usage`` (its cost so far, cumulative): the set is stopped when the budget is
        reached."""
        if self.limit is None or usage.cost is None or self.breach is not None:
            return
        if usage.currency is not None and usage.currency != self.currency:
            self._stop(
                f"a candidate reports its cost in {usage.currency} but limits.currency is {self.currency}: "
                "attempts.max_cost cannot be kept, so every candidate was stopped"
            )
            return
        self._costs[run_id] = usage.cost
        if self.total >= self.limit:
            self._stop(
                f"the candidates together cost {self.total:.2f} {self.currency}, reaching attempts.max_cost "
                f"({self.limit:g} {self.currency}): every candidate still running was stopped and no more started"
            )

    def _stop(self, reason: str) -> None:
        self.breach = Breach("over_budget", reason)
        for limiter in list(self._running.values()):
            limiter.stop(self.breach)
