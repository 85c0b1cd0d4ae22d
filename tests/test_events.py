"""The event kinds: one list in beflow/events.py, which the docs' tables and the ``--json`` streams follow."""

from __future__ import annotations

import re
from pathlib import Path

import beflow
from beflow.events import IDLE, RUN_EVENTS, WATCH_EVENTS

MODES = Path(beflow.__file__).parent / "docs" / "modes.md"


def event_tables(text: str) -> list[set[str]]:
    """The first column of every ``| event | fields | when |`` table, in the order of the page."""
    tables: list[set[str]] = []
    current: set[str] | None = None
    for line in text.splitlines():
        if re.match(r"\|\s*event\s*\|\s*fields\s*\|\s*when\s*\|", line):
            current = set()
            tables.append(current)
        elif current is not None and line.startswith("|"):
            match = re.match(r"\|\s*`([a-z_]+)`\s*\|", line)
            if match:
                current.add(match.group(1))
        else:
            current = None
    return tables


def test_the_docs_list_exactly_the_events_beflow_emits() -> None:
    auto, watch = event_tables(MODES.read_text(encoding="utf-8"))
    assert auto == RUN_EVENTS | {IDLE}
    assert watch == WATCH_EVENTS


def test_each_table_is_read_apart_and_ends_with_its_last_row() -> None:
    table = "| event | fields | when |\n|---|---|---|\n| `{}` | `x` | now |\n"
    text = table.format("dispatched") + "\nprose with `finished` in it\n\n" + table.format("stopping")
    assert event_tables(text) == [{"dispatched"}, {"stopping"}]
