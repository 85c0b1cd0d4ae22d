"""The line an event gets in the log of ``watch`` (a fleet's too): its time, its kind, its issue, and its payload in
words a person reads (``used: context 1,000 of 200,000 tokens; cost 0.50 USD``), never a Python ``{'runs': 1}``.
``--json`` prints the events as they are."""

from __future__ import annotations

import time
from typing import Any

from beflow import guardrails
from beflow.events import Budget, RunEvent, WatchEvent


def event_line(event: WatchEvent | RunEvent) -> str:
    """``12:03:04 finished         7      run=…, outcome=succeeded, reason=… — used: … — the watch so far: …``."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event.time))
    return f"{stamp} {event.type:<16} {event.issue or '':<6} {details(event)}".rstrip()


def details(event: WatchEvent | RunEvent) -> str:
    """The payload's fields as ``name=value`` (what scripts reading the log match on), and its figures in words."""
    fields = event.data.fields()
    said: list[str] = []
    if isinstance(event.data, Budget):  # reached, its message says the figures; cleared, they are said here
        spent, limit, currency = (fields.pop(name, None) for name in ("spent", "limit", "currency"))
        if event.type == "budget_cleared" and spent is not None and limit is not None:
            said.append(f"today {spent:.2f} of {limit:g} {currency}")
    if (usage := fields.pop("usage", None)) is not None:
        said.insert(0, f"used: {guardrails.describe(guardrails.Usage.of(usage)) or 'nothing reported'}")
    if (used := fields.pop("watch_used", None)) is not None:
        totals = guardrails.Totals(used["runs"], used["reported"], used["tokens"], dict(used["cost"]))
        said.append(f"the watch so far: {totals.describe()}")
    if (by := fields.get("by")) is not None and by in str(fields.get("reason", "")):
        del fields["by"]  # the reason already names who took the issue
    named = ", ".join(f"{name}={_value(value)}" for name, value in fields.items() if value is not None)
    return " — ".join([named, *said] if named else said)  # (a run's usage in words has commas and semicolons)


def _value(value: Any) -> str:
    """A field's value as words: a list as its items (``servers=tools, docs``), a mapping as ``key value`` pairs."""
    if isinstance(value, list):
        return ", ".join(_value(item) for item in value)
    if isinstance(value, dict):
        return ", ".join(f"{key} {_value(item)}" for key, item in value.items())
    return str(value)
