"""The event kinds: one list in beflow/events.py, which the docs' tables and the ``--json`` streams follow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

import beflow
from beflow.events import IDLE, RUN_EVENTS, RUN_PAYLOADS, WATCH_EVENTS, WATCH_PAYLOADS, RunEvent, WatchEvent

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


def documented_fields(text: str) -> list[dict[str, set[str]]]:
    """Each event table's rows: event → the field names its ``fields`` column names."""
    tables: list[dict[str, set[str]]] = []
    current: dict[str, set[str]] | None = None
    for line in text.splitlines():
        if re.match(r"\|\s*event\s*\|\s*fields\s*\|\s*when\s*\|", line):
            current = {}
            tables.append(current)
        elif current is not None and line.startswith("|"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            match = re.fullmatch(r"`([a-z_]+)`", cells[0])
            if match:
                named = re.sub(r"\(.*?\)", "", cells[1])  # what a parenthesis says is an example, not a field
                current[match.group(1)] = set(re.findall(r"`([a-z_]+)`", named))
        else:
            current = None
    return tables


def test_every_field_the_docs_name_is_a_field_of_its_events_payload() -> None:
    auto, watch = documented_fields(MODES.read_text(encoding="utf-8"))
    for table, payloads in ((auto, RUN_PAYLOADS), (watch, WATCH_PAYLOADS)):
        for kind, fields in table.items():
            if kind == IDLE:
                continue
            assert fields <= set(payloads[kind].model_fields), (kind, fields - set(payloads[kind].model_fields))


def test_an_event_with_a_field_its_kind_does_not_have_is_refused() -> None:
    with pytest.raises(ValidationError, match="lates"):
        RunEvent.of("activity", "r1", "1", lates="typo")
    with pytest.raises(ValidationError, match="attempt"):
        WatchEvent.of("dispatched", "1")


def test_json_carries_the_fields_set_in_the_order_they_were_always_printed() -> None:
    finished = RunEvent.of(
        "finished", "r1", "1", outcome="succeeded", reason="done", commit="abc", changed=2, usage={"cost": 0.5}
    )
    assert list(finished.to_json()) == [
        "event",
        "run",
        "issue",
        "time",
        "outcome",
        "reason",
        "commit",
        "changed",
        "usage",
    ]
    assert finished.to_json()["usage"] == {"cost": 0.5}  # the figures sent, none invented
    started = RunEvent.of("started", "r1", "1", mode="attend", checkout="/c", permissions="approve-reads", servers=[])
    assert list(started.to_json())[4:] == ["mode", "checkout", "permissions", "servers"]
    assert RunEvent.of("finished", "r1", "1", outcome="failed", reason=None).to_json()["reason"] is None
    assert json.dumps(WatchEvent.of("stopping", running=2).to_json()).endswith('"running": 2}')
