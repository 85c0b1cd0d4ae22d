"""The guardrails' decisions (beflow.guardrails), each a pure function, each tested by a table: stalls, budgets,
the budgets' currency, and the sums over runs."""

from __future__ import annotations

import datetime as dt

import pytest

from beflow.config import Limits
from beflow.guardrails import (
    Totals,
    Usage,
    amount,
    currency_code,
    day_budget,
    describe,
    is_stalled,
    run_breach,
    short,
    stall_reason,
    token_count,
    total,
    unheld,
)
from beflow.run.limits import Limiter


@pytest.mark.parametrize(
    ("last_life", "now", "limit", "stalled"),
    [
        (100.0, 100.0, 300, False),
        (100.0, 399.9, 300, False),
        (100.0, 400.0, 300, True),
        (100.0, 1000.0, 300, True),
        (100.0, 90.0, 300, False),  # a clock that went back is no silence
        (0.0, 1.0, 1, True),
    ],
)
def test_an_agent_silent_for_the_limit_has_stalled(last_life: float, now: float, limit: float, stalled: bool) -> None:
    assert is_stalled(last_life, now, limit) is stalled


@pytest.mark.parametrize(
    ("seconds", "last", "words"),
    [
        (
            301.4,
            "Run make test (in_progress)",
            "sent nothing for 301 s (its last activity: Run make test (in_progress))",
        ),
        (5, None, "sent nothing for 5 s (it had shown no activity yet)"),
    ],
)
def test_a_stall_says_how_long_and_what_the_agent_did_last(seconds: float, last: str | None, words: str) -> None:
    assert words in stall_reason(seconds, last) and "limits.stall" in stall_reason(seconds, last)


@pytest.mark.parametrize(
    ("value", "count", "money"),
    [
        (0, 0, 0.0),
        (12, 12, 12.0),
        (-1, None, None),
        (True, None, None),
        ("12", None, None),
        (1.5, None, 1.5),
        (float("nan"), None, None),
        (float("inf"), None, None),
        (10**16, None, None),
        (1e13, None, None),
        (None, None, None),
        ([1], None, None),
    ],
)
def test_only_real_figures_are_taken_from_an_agent(value: object, count: int | None, money: float | None) -> None:
    assert token_count(value) == count
    assert amount(value) == money


@pytest.mark.parametrize(
    ("value", "code"),
    [("USD", "USD"), ("eur", "EUR"), ("US Dollar", None), ("U$D", None), ("ÜSD", None), (840, None), ("", None)],
)
def test_a_currency_is_an_iso_code(value: object, code: str | None) -> None:
    assert currency_code(value) == code


def usage(**fields: object) -> Usage:
    return Usage.of({"updates": 1, **fields})


BREACHES = [
    # limits, usage, outcome (None: within), words
    ({}, usage(cost=100.0, currency="USD", context_peak=10**9), None, ""),
    ({"cost_per_run": 1}, usage(cost=1.0, currency="USD"), None, ""),
    ({"cost_per_run": 1}, usage(cost=1.01, currency="USD"), "over_budget", "raise limits.cost_per_run"),
    ({"cost_per_run": 1}, usage(context_peak=10**9), None, ""),  # no cost reported: none invented
    ({"tokens_per_run": 1000}, usage(context_peak=1000), None, ""),
    ({"tokens_per_run": 1000}, usage(context_peak=1001), "over_budget", "1,001 tokens, past limits.tokens_per_run"),
    ({"tokens_per_run": 1000}, usage(context_peak=10, total_tokens=5000), "over_budget", "5,000 tokens"),
    ({"tokens_per_run": 1000}, usage(input_tokens=600, output_tokens=600), "over_budget", "1,200 tokens"),
    ({"cost_per_run": 1, "currency": "EUR"}, usage(cost=0.1, currency="USD"), "failed", "reports its cost in USD"),
    ({"cost_per_day": 5, "currency": "EUR"}, usage(cost=0.1, currency="USD"), "failed", '"currency": "USD"'),
    ({"tokens_per_run": 5, "currency": "EUR"}, usage(cost=0.1, currency="USD"), None, ""),  # no cost budget to keep
]


@pytest.mark.parametrize(("limits", "used", "outcome", "words"), BREACHES)
def test_a_run_passes_its_budget_only_on_what_the_agent_reported(
    limits: dict[str, object], used: Usage, outcome: str | None, words: str
) -> None:
    breach = run_breach(used, Limits.model_validate(limits))

    assert (breach.outcome if breach else None) == outcome
    if breach is not None:
        # Over a budget: not retried. The wrong currency: every run alike, so a watch holds and retries it once fixed.
        assert words in breach.reason and breach.permanent is (outcome == "over_budget")


@pytest.mark.parametrize(
    ("limit", "spent", "reached"),
    [
        (None, {"USD": 100.0}, None),
        (5, {}, False),
        (5, {"USD": 4.99}, False),
        (5, {"USD": 5.0}, True),
        (5, {"EUR": 9.0}, False),
    ],
)
def test_a_days_spending_reaches_its_budget_in_the_budgets_currency(
    limit: float | None, spent: dict[str, float], reached: bool | None
) -> None:
    budget = day_budget(Totals(cost=spent), Limits(cost_per_day=limit), dt.date(2026, 12, 1))

    assert (budget.reached if budget else None) is reached


def test_sums_keep_currencies_apart_and_count_runs_that_reported_nothing() -> None:
    summed = total(
        [
            usage(total_tokens=1000, cost=0.5, currency="USD"),
            None,
            usage(context_peak=300, cost=2.0, currency="EUR"),
            usage(cost=0.25, currency="USD"),
        ]
    )

    assert (summed.runs, summed.reported, summed.tokens, summed.cost) == (4, 2, 1300, {"USD": 0.75, "EUR": 2.0})
    assert summed.describe() == "1,300 tokens, 2.00 EUR, 0.75 USD over 4 runs"
    assert total([None]).describe() == "no usage reported over 1 run"
    assert total([usage(total_tokens=1)], summed).runs == 5


@pytest.mark.parametrize(
    ("used", "line", "column"),
    [
        (None, None, "-"),
        (Usage(), None, "-"),
        (usage(context_used=10, context_peak=20, context_size=100), "context 10 of 100 tokens, peak 20", "20 tok"),
        (
            usage(total_tokens=3400, input_tokens=3000, output_tokens=400),
            "3,400 tokens (3,000 in, 400 out)",
            "3.4k tok",
        ),
        (usage(cost=0.4, currency="USD", rejected=2), "cost 0.40 USD; 2 invalid values ignored", "0.40 USD"),
    ],
)
def test_usage_reads_as_one_line_and_a_column(used: Usage | None, line: str | None, column: str) -> None:
    assert describe(used) == line
    assert short(used) == column


SESSIONS = [
    # what the last run on the session reported, the resumed run's reports (the session's cumulative cost), then
    # the run's own cost, the session's, what was subtracted, words of the note
    (None, [(0.3, "USD")], 0.3, 0.3, None, None),
    (usage(cost=0.3, currency="USD"), [(0.5, "USD")], 0.2, 0.5, 0.3, None),  # a record from before session_cost
    (usage(cost=0.2, session_cost=0.5, currency="USD"), [(0.6, "USD"), (0.9, "USD")], 0.4, 0.9, 0.5, None),
    (usage(cost=0.5, currency="USD"), [(0.5, "USD")], 0.0, 0.5, 0.5, None),  # nothing spent since
    (usage(cost=0.5, currency="USD"), [(0.1, "USD"), (0.6, "USD")], 0.6, 0.6, None, "the agent counts afresh"),
    (usage(cost=0.5, currency="EUR"), [(0.9, "USD")], 0.9, 0.9, None, "the earlier run reported the session's"),
    (usage(context_peak=10), [(0.4, "USD")], 0.4, 0.4, None, None),  # the earlier run reported no cost
    (usage(cost=0.5, currency="USD"), [], None, None, 0.5, None),  # nor did this one: none invented
]


@pytest.mark.parametrize(("earlier", "reports", "cost", "session", "subtracted", "note"), SESSIONS)
def test_a_resumed_sessions_cost_counts_from_the_earlier_runs_last_figure(
    earlier: Usage | None,
    reports: list[tuple[float, str]],
    cost: float | None,
    session: float | None,
    subtracted: float | None,
    note: str | None,
) -> None:
    """ACP's cost is the session's, cumulative: a run that resumed a session counts what came after the last
    figure the earlier run on it reported, and a figure that cannot include it (lower, another currency) is the
    run's own."""
    used = Usage.resuming(earlier)
    for value, currency in reports:
        used.updates += 1
        used.report_cost(value, currency)

    assert (used.cost, used.session_cost, used.earlier_cost) == (
        pytest.approx(cost) if cost is not None else None,
        session,
        subtracted,
    )
    assert (note in (used.note or "")) if note else used.note is None
    assert used.empty is (not reports)


def test_budgets_and_sums_count_a_resumed_runs_own_cost_and_tokens() -> None:
    """The per-run budget holds the run's share; an issue's sum adds the shares, so the session's cost is counted
    once; the turn's tokens are the turn's own (ACP counts them per turn) and are not subtracted."""
    first = Usage.resuming(None)
    first.updates = 1
    first.report_cost(0.8, "USD")
    first.total_tokens = 1000
    second = Usage.resuming(first)
    second.updates = 1
    second.report_cost(1.5, "USD")
    second.total_tokens = 600

    assert second.cost == pytest.approx(0.7) and second.tokens == 600
    assert run_breach(second, Limits(cost_per_run=1)) is None  # the session's 1.50 is past it, the run's 0.70 not
    summed = total([first, second])
    assert summed.cost == {"USD": pytest.approx(1.5)} and summed.tokens == 1600
    assert describe(second) == (
        "600 tokens; cost 0.70 USD; the resumed session's 1.50 USD, less the earlier runs' 0.80"
    )


#: What is checked when (docs/config.md#limits): during the turn, each usage update (the context in use, the
#: session's cost); when the turn ends, the prompt response's token counts as well.
WHEN_CHECKED = [
    # limits, during the turn (context used), the turn's totals (input, output), breached during, at the end
    ({"tokens_per_run": 1000}, 500, None, None, None),
    ({"tokens_per_run": 1000}, 5000, None, "5,000 tokens", "5,000 tokens"),  # stopped at once
    ({"tokens_per_run": 1000}, 500, (30000, 4000), None, "34,000 tokens"),  # only its end says so
    ({"tokens_per_run": 1000}, None, (30000, 4000), None, "34,000 tokens"),  # an agent that sends no updates
    ({"tokens_per_run": 1000}, 500, (400, 300), None, None),
    # A limit above the context window: only the turn's totals can pass it.
    ({"tokens_per_run": 2_000_000}, 200_000, (2_400_000, 100_000), None, "2,500,000 tokens"),
    ({"cost_per_run": 1}, 500, (30000, 4000), None, None),  # tokens unlimited
    ({}, 10**9, (10**9, 10**9), None, None),
]


@pytest.mark.parametrize(("limits", "context", "turn", "during", "at_end"), WHEN_CHECKED)
def test_tokens_per_run_is_checked_on_the_context_as_it_comes_and_on_the_turns_totals_when_it_ends(
    limits: dict[str, object], context: int | None, turn: tuple[int, int] | None, during: str | None, at_end: str | None
) -> None:
    notices: list[str] = []
    limiter = Limiter(Limits.model_validate(limits), lambda: None, notices.append)
    used = Usage()
    if context is not None:
        used.updates, used.context_used, used.context_peak = 1, context, context
        limiter.check(used)
    seen = limiter.breach
    if turn is not None:
        used.input_tokens, used.output_tokens = turn
    said = limiter.ended(used)

    # None of these agents reported a cost: a cost budget is said not held, on the run's notice too.
    unheld_cost = "the agent reported no cost: limits.cost_per_run was not held"
    assert said == (unheld_cost if "cost_per_run" in limits else None)
    assert notices == ([said] if said else [])

    assert (during is None) is (seen is None) and (during is None or during in seen.reason)  # type: ignore[union-attr]
    assert (at_end is None) is (limiter.breach is None)
    if at_end is not None:
        assert limiter.breach is not None and limiter.breach.outcome == "over_budget" and limiter.breach.permanent
        assert at_end in limiter.breach.reason and "raise limits.tokens_per_run" in limiter.breach.reason


@pytest.mark.parametrize(
    ("limits", "used", "said"),
    [
        ({}, None, None),
        ({"tokens_per_run": 10}, None, None),  # no cost budget: nothing to say
        ({"cost_per_run": 1}, usage(cost=0.5, currency="USD"), None),
        ({"cost_per_run": 1}, usage(cost=0.0, currency="USD"), None),  # a cost of nothing is a cost reported
        ({"cost_per_run": 1}, None, "the agent reported no cost: limits.cost_per_run was not held"),
        ({"cost_per_run": 1}, usage(context_peak=500), "limits.cost_per_run was not held"),
        ({"cost_per_day": 9}, usage(total_tokens=5), "the agent reported no cost: limits.cost_per_day was not held"),
        ({"cost_per_run": 1, "cost_per_day": 9}, None, "limits.cost_per_run and limits.cost_per_day were not held"),
    ],
)
def test_a_cost_budget_the_agent_gave_no_cost_for_is_said_not_held(
    limits: dict[str, object], used: Usage | None, said: str | None
) -> None:
    told = unheld(used, Limits.model_validate(limits))

    assert (told is None) is (said is None) and (said is None or said in (told or ""))
