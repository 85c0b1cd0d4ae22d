"""The guardrails of an unattended run, as pure functions: when an agent's silence is a stall, what a run used
(tokens and cost, as the agent reports them over ACP), when a run or a watch's day passes its budget, and the
sums over an issue's runs or a watch's. No I/O here: each is tested by a table (tests/test_guardrails.py);
:mod:`beflow.run.limits` applies them to a run while it goes.

Nothing here invents a figure: a run whose agent reports no cost has none, and a budget in a currency the agent
does not report is refused, never converted.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, TypeAdapter
from pydantic import dataclasses as pydantic_dataclasses

from beflow.config import Limits
from beflow.events import UsageFigures

#: The largest token count and cost beflow takes from an agent: anything beyond is a broken or hostile agent's
#: number, not a measurement (a context window of 10^15 tokens does not exist), and is ignored.
MAX_TOKENS = 10**15
MAX_COST = 1e12


@pydantic_dataclasses.dataclass(config=ConfigDict(extra="ignore"))
class Usage:
    """What one run used, as its agent reported it: ACP's ``usage_update`` notifications (the context in use,
    the window's size, the session's cumulative cost) and the token counts of the prompt's response. A field the
    agent never sent stays ``None``. (A dataclass, not a model: the stream's reader sets its fields for every
    update, thousands a run, and a model's checked assignment costs five times as much.)

    Its JSON is a run record's (``run.json``): every field, null or not. The events tell it as
    :class:`beflow.events.UsageFigures` (the figures sent, and their tokens) and the dashboard as
    ``beflow.web.api.Usage`` (the figures it shows): three public shapes of one thing, each JSON of its own."""

    #: Tokens in the agent's context at its latest update, the most at any update, and the window's size.
    context_used: int | None = None
    context_peak: int | None = None
    context_size: int | None = None
    #: The turn's token counts, from the prompt's response (``usage``), when the agent sends them.
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    thought_tokens: int | None = None
    cached_read_tokens: int | None = None
    cached_write_tokens: int | None = None
    #: The run's own cost, in ``currency`` (ISO 4217, as the agent said it): what budgets and sums count. ACP's
    #: cost is the session's, cumulative (``session_cost``, at the latest update); a run that resumed an earlier
    #: run's session counts only what came after that run's last figure (``earlier_cost``).
    cost: float | None = None
    currency: str | None = None
    session_cost: float | None = None
    earlier_cost: float | None = None
    earlier_currency: str | None = None
    #: How many usage updates were read, and how many values in them were not valid (negative, not a number,
    #: beyond :data:`MAX_TOKENS`) and were ignored.
    updates: int = 0
    rejected: int = 0
    #: Something worth knowing about the figures (the agent changed currency mid-run).
    note: str | None = None

    @property
    def tokens(self) -> int | None:
        """The tokens the run is known to have used: the turn's total when the agent sent it (or input plus
        output), else the most the context held (a lower bound: everything in it was read at least once)."""
        if self.total_tokens is not None:
            return self.total_tokens
        if self.input_tokens is not None and self.output_tokens is not None:
            return self.input_tokens + self.output_tokens
        return self.context_peak

    @property
    def empty(self) -> bool:
        return self.updates == 0 and self.tokens is None and self.cost is None

    @classmethod
    def resuming(cls, earlier: Usage | None) -> Usage:
        """The usage of a run that resumes the session ``earlier`` (the last run on it) reported on: its cost
        counts from that run's last figure of the session's cost."""
        usage = cls()
        if earlier is not None and earlier.currency is not None:
            figure = earlier.session_cost if earlier.session_cost is not None else earlier.cost  # (older records)
            usage.earlier_cost, usage.earlier_currency = figure, earlier.currency
        return usage

    def report_cost(self, session_cost: float, currency: str) -> None:
        """The agent reported the session's cumulative cost: the run's own share of it becomes ``cost``."""
        earlier = self.earlier_cost
        if earlier is not None and currency != self.earlier_currency:
            self.note = (
                f"the earlier run reported the session's cost in {self.earlier_currency}, this one in {currency}: "
                "nothing could be subtracted, the session's whole cost is counted"
            )
            self.earlier_cost = self.earlier_currency = None
        elif earlier is not None and session_cost < earlier:
            # A cumulative figure that includes the earlier runs' is never below theirs: this agent counts afresh.
            self.note = (
                f"the session's cost ({session_cost:.2f} {currency}) fell below what the earlier run reported "
                f"({earlier:.2f}): the agent counts afresh, and its figures are this run's own"
            )
            self.earlier_cost = self.earlier_currency = None
        if self.currency is not None and currency != self.currency:
            self.note = f"the agent changed its cost's currency from {self.currency} to {currency} during the run"
        self.session_cost, self.currency = session_cost, currency
        # (rounded: 0.5 - 0.3 is no 0.20000000000000004 in a record)
        self.cost = round(session_cost - self.earlier_cost, 10) if self.earlier_cost is not None else session_cost

    @classmethod
    def of(cls, data: dict[str, Any]) -> Usage:
        """A ``Usage`` from its JSON (a record, an event): unknown keys ignored, values checked."""
        return _USAGE.validate_python(data)


_USAGE: TypeAdapter[Usage] = TypeAdapter(Usage)


def token_count(value: object) -> int | None:
    """A token count an agent sent, or None when it is not one (a string, a float, a bool, negative, huge)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > MAX_TOKENS:
        return None
    return value


def amount(value: object) -> float | None:
    """A cost an agent sent, or None when it is not one (a string, NaN, infinite, negative, huge)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > MAX_COST:
        return None
    return number


def currency_code(value: object) -> str | None:
    """An ISO 4217 code as an agent sent it (``"usd"`` is ``USD``), or None when it is not one."""
    if not isinstance(value, str) or len(value) != 3 or not value.isascii() or not value.isalpha():
        return None
    return value.upper()


# -- stalls ---------------------------------------------------------------------------------------------------------


def silent_for(last_life: float, now: float) -> float:
    """Seconds since the agent last showed life (a message, a tool call, a line of output)."""
    return max(0.0, now - last_life)


def is_stalled(last_life: float, now: float, limit: float) -> bool:
    """Whether an agent silent since ``last_life`` has stalled at ``now`` (``limit``: ``limits.stall``)."""
    return silent_for(last_life, now) >= limit


def stall_reason(seconds: float, last_activity: str | None) -> str:
    """Why a stalled run was stopped, as the record and the issue's comment say it."""
    doing = f"its last activity: {last_activity}" if last_activity else "it had shown no activity yet"
    return (
        f"the agent sent nothing for {seconds:.0f} s ({doing}); stopped as stalled (limits.stall is the longest "
        "silence allowed)"
    )


# -- budgets --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Breach:
    """A run that passed one of its limits: how it ends and why (``permanent``: no retry this round)."""

    outcome: Literal["stalled", "over_budget", "failed"]
    reason: str
    permanent: bool = True


def currency_mismatch(currency: str | None, limits: Limits) -> tuple[str, str] | None:
    """A cost budget in a currency the agent does not report cannot be kept: what is wrong, naming the currency the
    agent did report, and the fix (nothing is converted); None when the budgets can be kept."""
    if not _cost_budgeted(limits) or currency is None or currency == limits.currency:
        return None
    return (
        f"limits.currency is {limits.currency} but the agent reports its cost in {currency}: a budget it does not "
        "report cannot be kept",
        f'set "limits": {{"currency": "{currency}"}} (and the budgets in {currency}) in the config',
    )


def currency_breach(usage: Usage, limits: Limits) -> Breach | None:
    """A run whose agent reports its cost in another currency than the budgets': a configuration error. Not
    permanent: every run would fail on it alike, so a watch holds dispatching until the config is fixed, then
    retries the run."""
    wrong = currency_mismatch(usage.currency, limits)
    if wrong is None:
        return None
    problem, fix = wrong
    return Breach("failed", f"{problem}. Fix: {fix}", permanent=False)


def run_breach(usage: Usage, limits: Limits) -> Breach | None:
    """Whether a run has passed ``limits.cost_per_run`` or ``limits.tokens_per_run`` (or reports its cost in
    another currency than the budgets'): the breach, else None."""
    wrong = currency_breach(usage, limits)
    if wrong is not None:
        return wrong
    if limits.cost_per_run is not None and usage.cost is not None and usage.cost > limits.cost_per_run:
        return Breach(
            "over_budget",
            f"the run cost {usage.cost:.2f} {usage.currency}, past limits.cost_per_run "
            f"({limits.cost_per_run:g} {limits.currency}); not retried. To allow more, raise limits.cost_per_run "
            "in the config, then make the issue ready again",
        )
    tokens = usage.tokens
    if limits.tokens_per_run is not None and tokens is not None and tokens > limits.tokens_per_run:
        return Breach(
            "over_budget",
            f"the run used {tokens:,} tokens, past limits.tokens_per_run ({limits.tokens_per_run:,}); not retried. "
            "To allow more, raise limits.tokens_per_run in the config, then make the issue ready again",
        )
    return None


def unheld(usage: Usage | None, limits: Limits) -> str | None:
    """What the cost budgets could not hold because the run's agent reported no cost (nothing is estimated):
    said on the run's notice, its record and the issue's comment, so that nobody believes a budget protects them;
    None when there is no cost budget or the agent reported a cost."""
    budgets = [name for name in ("cost_per_run", "cost_per_day") if getattr(limits, name) is not None]
    if not budgets or (usage is not None and usage.cost is not None):
        return None
    named = " and ".join(f"limits.{name}" for name in budgets)
    return f"the agent reported no cost: {named} {'was' if len(budgets) == 1 else 'were'} not held"


def _cost_budgeted(limits: Limits) -> bool:
    return limits.cost_per_run is not None or limits.cost_per_day is not None


@dataclass(frozen=True)
class DayBudget:
    """Where a watch's day stands against ``limits.cost_per_day``."""

    spent: float
    limit: float
    currency: str
    day: dt.date

    @property
    def reached(self) -> bool:
        return self.spent >= self.limit

    def describe(self) -> str:
        return (
            f"{self.spent:.2f} {self.currency} spent on {self.day.isoformat()}, limits.cost_per_day is "
            f"{self.limit:g} {self.currency}: no run is dispatched until tomorrow or until the limit is raised in "
            "the config"
        )


def day_budget(spent: Totals, limits: Limits, day: dt.date) -> DayBudget | None:
    """The day's spending against ``limits.cost_per_day`` (None when there is no such limit)."""
    if limits.cost_per_day is None:
        return None
    return DayBudget(spent.cost.get(limits.currency, 0.0), limits.cost_per_day, limits.currency, day)


# -- sums -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Totals:
    """Usage summed over runs: how many, the tokens of those that reported any, the cost per currency (costs in
    different currencies are never added up)."""

    runs: int = 0
    reported: int = 0
    tokens: int = 0
    cost: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """``12,345 tokens, 0.42 USD over 3 runs`` (what is known: no figure the agents did not send)."""
        parts = []
        if self.reported:
            parts.append(f"{self.tokens:,} tokens")
        parts += [f"{value:.2f} {currency}" for currency, value in sorted(self.cost.items())]
        used = ", ".join(parts) if parts else "no usage reported"
        return f"{used} over {self.runs} run{'s' if self.runs != 1 else ''}"


def total(usages: Iterable[Usage | None], start: Totals | None = None) -> Totals:
    """The sum of runs' usage, added to ``start`` (a run without any counts as a run, adds nothing)."""
    base = start or Totals()
    runs, reported, tokens, cost = base.runs, base.reported, base.tokens, dict(base.cost)
    for usage in usages:
        runs += 1
        if usage is None:
            continue
        if usage.tokens is not None:
            reported += 1
            tokens += usage.tokens
        if usage.cost is not None and usage.currency is not None:
            cost[usage.currency] = cost.get(usage.currency, 0.0) + usage.cost
    return Totals(runs, reported, tokens, cost)


def event_data(usage: Usage | None) -> dict[str, Any] | None:
    """What the ``usage`` and ``finished`` events carry (``--json``): the figures the agent sent, none invented —
    those :class:`beflow.events.UsageFigures` names, in its order (the tokens they make last)."""
    if usage is None or usage.empty:
        return None
    figures = ((name, getattr(usage, name)) for name in UsageFigures.model_fields)
    return {name: value for name, value in figures if value is not None}


def describe(usage: Usage | None) -> str | None:
    """One line of what a run used, for ``runs show``, the issue's comment and the views; None when the agent
    reported nothing."""
    if usage is None or usage.empty:
        return None
    parts = []
    if usage.context_used is not None:
        window = f" of {usage.context_size:,}" if usage.context_size else ""
        peak = f", peak {usage.context_peak:,}" if usage.context_peak not in (None, usage.context_used) else ""
        parts.append(f"context {usage.context_used:,}{window} tokens{peak}")
    if usage.total_tokens is not None or usage.input_tokens is not None:
        split = ""
        if usage.input_tokens is not None and usage.output_tokens is not None:
            split = f" ({usage.input_tokens:,} in, {usage.output_tokens:,} out)"
        parts.append(f"{usage.tokens or 0:,} tokens{split}")
    if usage.cost is not None:
        parts.append(f"cost {usage.cost:.2f} {usage.currency}")
        if usage.earlier_cost is not None and usage.session_cost is not None:
            parts.append(
                f"the resumed session's {usage.session_cost:.2f} {usage.currency}, less the earlier runs' "
                f"{usage.earlier_cost:.2f}"
            )
    if usage.rejected:
        parts.append(f"{usage.rejected} invalid value{'s' if usage.rejected != 1 else ''} ignored")
    if usage.note:
        parts.append(usage.note)
    return "; ".join(parts) if parts else None


def short(usage: Usage | None) -> str:
    """The ``runs list`` column and the watch's view: ``12.3k tok 0.42 USD``, ``-`` when nothing was reported."""
    if usage is None or usage.empty:
        return "-"
    parts = []
    if usage.tokens is not None:
        parts.append(f"{_compact(usage.tokens)} tok")
    if usage.cost is not None:
        parts.append(f"{usage.cost:.2f} {usage.currency}")
    return " ".join(parts) or "-"


def _compact(count: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)
