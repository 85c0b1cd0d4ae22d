"""What holds a watch's dispatching back as a whole: a configuration problem every run would hit (a cost budget in
another currency than the agent reports included), and the day's spending at ``limits.cost_per_day``. Each is said
once when it starts holding, and again when dispatching resumes, instead of failing (or refusing) the issues one
by one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from beflow import guardrails
from beflow.config import Project
from beflow.errors import ConfigError
from beflow.events import WatchEmit, WatchEventKind
from beflow.records.record import RunRecord
from beflow.run import preflight
from beflow.run.spending import Ledger
from beflow.trackers import Tracker
from beflow.trackers.base import ChecksSetup


def currency_error(project: Project, records: Iterable[RunRecord]) -> ConfigError | None:
    """The configuration error of runs that failed because their agent reports its cost in another currency than
    ``limits.currency`` (``--auto``: each of them failed alike, and the fix is the config's), naming the file and
    the field; None when no run did."""
    for record in records:
        usage = record.usage
        wrong = guardrails.currency_mismatch(usage.currency, project.config.limits) if usage is not None else None
        if wrong is not None:
            problem, fix = wrong
            return ConfigError(f"{project.config_name}: {problem}", fix=fix)
    return None


class Holds:
    """One watch's holds, told through ``emit`` (the dispatcher's)."""

    def __init__(self, emit: WatchEmit) -> None:
        self.emit = emit
        #: Why dispatching is held back (a configuration problem every run would hit), if it is.
        self.blocked: str | None = None
        self.blocked_by: ConfigError | None = None
        #: The currency a run's agent reported its cost in when it was not ``limits.currency``, and that agent:
        #: every run would fail on it, so dispatching is held until the config is fixed (or the agent changed).
        self.wrong_currency: tuple[str, object] | None = None

    def config_ready(self, project: Project, *, idle: bool = False, tracker: Tracker | None = None) -> bool:
        """Whether runs can start: a prompt or `.mcp.json` that would fail every run alike — or the tracker's setup
        (:class:`~beflow.trackers.base.ChecksSetup`) — holds dispatching back (reported once, and again when the
        problem changes) instead of failing the issues one by one."""
        try:
            preflight.check(project, idle=idle)
            if isinstance(tracker, ChecksSetup):
                tracker.check_setup()
            held = self.currency_held(project)
            if held is not None:
                raise held
        except ConfigError as error:
            self.blocked_by = error
            if error.message != self.blocked:
                self.blocked = error.message
                self.emit("error", message=f"not dispatching until this is fixed: {error.message}")
            return False
        self.blocked_by = None
        if self.blocked is not None:
            self.blocked = None
            self.emit("config_reloaded", path=str(project.config_path), message="dispatching again")
        return True

    def budget_reached(self, ledger: Ledger, budget: guardrails.DayBudget | None) -> bool:
        """Whether the day's spending has reached ``limits.cost_per_day``: said once when it is, and again when
        dispatching resumes (a new day, a raised limit)."""
        reached = budget is not None and budget.reached
        if reached != ledger.holding:
            ledger.holding = reached
            kind: WatchEventKind = "budget_reached" if reached else "budget_cleared"
            figures: dict[str, Any] = {"message": budget.describe() if budget and reached else "dispatching again"}
            if budget is not None:
                figures.update(spent=round(budget.spent, 6), limit=budget.limit, currency=budget.currency)
            self.emit(kind, **figures)
        return reached

    def currency_held(self, project: Project) -> ConfigError | None:
        """Why no run can keep the budgets, when a run's agent reported its cost in another currency than
        ``limits.currency``; None once the config is fixed (the currency, no cost budget, another agent)."""
        if self.wrong_currency is None:
            return None
        currency, agent = self.wrong_currency
        config = project.config
        wrong = guardrails.currency_mismatch(currency, config.limits) if agent == config.agent else None
        if wrong is None:
            self.wrong_currency = None
            return None
        problem, fix = wrong
        return ConfigError(f"{problem}; every run would fail on it", fix=f"{fix} (beflow watch reloads it)")
