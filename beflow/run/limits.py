"""A run's limits while it runs: the agent's silence watched (``limits.stall``) and its reported usage held to
the budgets (``limits.cost_per_run``, ``limits.tokens_per_run``, the budgets' currency). The decisions are
:mod:`beflow.guardrails`'; this is the clock and the cancellation around acpx.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from beflow.config import Limits
from beflow.guardrails import Breach, Usage, event_data, is_stalled, run_breach, silent_for, stall_reason, unheld

T = TypeVar("T")

#: The longest the watchdog sleeps between two looks at the clock (it wakes sooner when a stall falls due).
LOOK_EVERY = 1.0


@dataclass(frozen=True)
class Stall:
    """How long the agent was silent and what it was doing last."""

    silent_for: float
    last_activity: str | None


class Limiter:
    """Watches one agent session: :meth:`alive` on every line of the ACP stream, :meth:`check` on its reported
    usage as it comes, :meth:`ended` on the turn's totals; :meth:`supervise` runs the session and stops it when a
    limit is passed (``breach`` says which)."""

    def __init__(
        self,
        limits: Limits,
        latest: Callable[[], str | None],
        notice: Callable[[str], None] = lambda message: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self._notice = notice
        limited = (limits.cost_per_run, limits.tokens_per_run, limits.cost_per_day)
        self._budgeted = any(limit is not None for limit in limited)  # else nothing to check, thousands of times
        self._latest = latest
        self._clock = clock
        self.last_life = clock()
        self.breach: Breach | None = None
        self.stall: Stall | None = None
        self._scope: anyio.CancelScope | None = None

    def alive(self) -> None:
        """The agent showed life: a message, a tool call, a line of output (a running tool call's included), each a
        line of the ACP stream. The agent's own stderr is not: an agent stuck retrying may log for hours."""
        self.last_life = self._clock()

    def check(self, usage: Usage) -> None:
        """The agent reported usage: stop the session at once when it passed a budget."""
        if self._budgeted and self.breach is None and usage.updates:
            breach = run_breach(usage, self.limits)
            if breach is not None:
                self._trip(breach)

    def ended(self, usage: Usage) -> str | None:
        """The turn ended: its own token counts (the prompt's response, which arrive only now) are held to the
        budgets too (nothing is left to stop; a run past one ends ``over_budget`` all the same). Returns what the
        cost budgets could not hold, the agent having reported no cost, and says it (:func:`guardrails.unheld`)."""
        if self._budgeted and self.breach is None:
            self.breach = run_breach(usage, self.limits)
        said = unheld(None if usage.empty else usage, self.limits)
        if said is not None:  # a cost budget is no protection against such an agent: said so
            self._notice(said)
        return said

    def stop(self, breach: Breach) -> None:
        """Stop the session for a limit decided elsewhere (best of N's budget for the set), unless one already did."""
        if self.breach is None:
            self._trip(breach)

    def _trip(self, breach: Breach) -> None:
        self.breach = breach
        if self._scope is not None:
            self._scope.cancel()

    async def supervise(self, body: Callable[[], Awaitable[T]]) -> T | None:
        """``body()``'s result, or None when a limit stopped it (cancelled: acpx and the agent are stopped as on
        any cancellation). Errors of the body and cancellations from outside go on as they are."""
        self._scope = scope = anyio.CancelScope()
        self.last_life = self._clock()
        if self.breach is not None:
            return None
        done: list[T] = []
        failure: Exception | None = None
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._watch)
            try:
                with scope:
                    done.append(await body())
            except Exception as error:  # raised as it is below, not wrapped in the task group's ExceptionGroup
                failure = error
            finally:
                tasks.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return done[0] if done and self.breach is None else None

    async def _watch(self) -> None:
        stall = self.limits.stall
        while self.breach is None:
            now = self._clock()
            if is_stalled(self.last_life, now, stall):
                silent = silent_for(self.last_life, now)
                self.stall = Stall(round(silent, 1), self._latest())
                self._trip(Breach("stalled", stall_reason(silent, self.stall.last_activity), permanent=False))
                return
            await anyio.sleep(min(LOOK_EVERY, self.last_life + stall - now))


class UsageEvents:
    """A run's ``usage`` events: one when the agent reports new figures, at most one every ``every`` seconds (an
    agent that sends thousands of updates floods neither the views nor ``--json``); ``finished`` carries the last
    figures whatever was left out here."""

    def __init__(
        self, emit: Callable[..., None], every: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._emit = emit
        self._every = every
        self._clock = clock
        self._last = -float("inf")
        self._said: dict[str, Any] | None = None

    def seen(self, usage: Usage) -> None:
        now = self._clock()
        if now - self._last < self._every:
            return
        data = event_data(usage)
        if data is None or data == self._said:
            return
        self._last, self._said = now, data
        self._emit("usage", **data)
