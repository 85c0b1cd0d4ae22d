"""Best of N's budget for the whole set (docs/runs.md#best-of-n), in process: real limiters supervising sessions
that wait until stopped; the set's spending stops all of them at once, and one that joins later at its start."""

from __future__ import annotations

import anyio

from beflow.config import Limits
from beflow.guardrails import Usage
from beflow.run.limits import Limiter
from beflow.run.set_budget import SetBudget


def _usage(cost: float, currency: str = "USD") -> Usage:
    return Usage(cost=cost, currency=currency, updates=1)


def _limiter() -> Limiter:
    return Limiter(Limits(stall=3600), lambda: None)


def test_the_sets_spending_reaching_max_cost_stops_every_running_candidate_and_any_that_starts_later() -> None:
    budget = SetBudget(1.0, "USD")
    first, second, late = _limiter(), _limiter(), _limiter()
    ended: list[str] = []

    async def session(name: str, limiter: Limiter) -> None:
        budget.join(name, limiter)
        result = await limiter.supervise(anyio.sleep_forever)
        budget.leave(name)
        ended.append(f"{name}:{result}")

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(session, "c1", first)
            tasks.start_soon(session, "c2", second)
            await anyio.wait_all_tasks_blocked()
            budget.spent("c1", _usage(0.4))
            budget.spent("c2", _usage(0.5))
            await anyio.wait_all_tasks_blocked()
            assert ended == [] and budget.breach is None  # 0.9 of 1.0: both go on
            budget.spent("c1", _usage(0.5))  # cumulative: c1 now 0.5, the set 1.0

    anyio.run(main)

    assert sorted(ended) == ["c1:None", "c2:None"]
    assert budget.breach is not None and budget.breach.outcome == "over_budget"
    assert "cost 1.00 USD, reaching attempts.max_cost (1 USD)" in budget.breach.reason
    for limiter in (first, second):
        assert limiter.breach == budget.breach
    # A candidate whose lane comes after: stopped before its agent does anything.
    budget.join("c3", late)
    assert anyio.run(late.supervise, anyio.sleep_forever) is None


def test_a_cost_in_another_currency_stops_the_set_and_no_budget_stops_nothing() -> None:
    budget = SetBudget(5.0, "USD")
    limiter = _limiter()
    budget.join("c1", limiter)
    budget.spent("c1", _usage(0.01, "EUR"))
    assert limiter.breach is not None and "reports its cost in EUR but limits.currency is USD" in limiter.breach.reason

    unlimited, free = SetBudget(None, "USD"), _limiter()
    unlimited.join("c1", free)
    unlimited.spent("c1", _usage(1e9))
    assert unlimited.breach is None and free.breach is None
