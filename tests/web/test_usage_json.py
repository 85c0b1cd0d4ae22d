"""What a run used is told in three shapes, each public: the run's record (``guardrails.Usage``, every figure and
the reader's own counts), the ``--json`` events and ``/api/v1/events`` (``events.UsageFigures``: the figures the
agent sent, and the tokens they make), and the dashboard's state and lists (``api.Usage``: the figures it shows,
absent ones null). The bytes of each are pinned here, so that a change to any of the shapes is a decision."""

from __future__ import annotations

import dataclasses
import json

from beflow import guardrails
from beflow.cli.common import json_text
from beflow.events import RunEvent, UsageFigures, WatchEvent
from beflow.records.record import RunRecord
from beflow.trackers.issue import utc_now
from beflow.web import api

FIGURES = (
    '{"context_used": 2500, "context_peak": 3000, "context_size": 100000, "input_tokens": 1200, "output_tokens": 340, '
    '"cost": 0.4, "currency": "USD", "session_cost": 0.65, "earlier_cost": 0.25, "earlier_currency": "USD", '
    '"tokens": 1540}'
)


def resumed() -> guardrails.Usage:
    """A run that resumed a session whose earlier run reported 0.25 USD, with an invalid value ignored."""
    usage = guardrails.Usage.resuming(guardrails.Usage(cost=0.25, currency="USD", session_cost=0.25))
    usage.context_used, usage.context_peak, usage.context_size = 2500, 3000, 100_000
    usage.input_tokens, usage.output_tokens = 1200, 340
    usage.updates, usage.rejected = 4, 1
    usage.report_cost(0.65, "USD")
    return usage


def test_the_json_events_carry_the_figures_the_agent_sent_and_their_tokens() -> None:
    figures = guardrails.event_data(resumed())
    assert figures is not None
    usage = RunEvent("usage", "r1", "7", RunEvent.of("usage", "r1", "7", **figures).data, 1.5)
    assert json_text(usage.to_json()) == '{"event": "usage", "run": "r1", "issue": "7", "time": 1.5, ' + FIGURES[1:]
    finished = RunEvent.of("finished", "r1", "7", outcome="succeeded", usage=figures)
    finished = dataclasses.replace(finished, time=2.0)
    assert json_text(finished.to_json()) == (
        '{"event": "finished", "run": "r1", "issue": "7", "time": 2.0, "outcome": "succeeded", "usage": '
        + FIGURES
        + "}"
    )
    used = {"runs": 1, "reported": 1, "tokens": 1540, "cost": {"USD": 0.4}}
    lane = WatchEvent.of("finished", "7", run="r1", outcome="succeeded", usage=figures, watch_used=used)
    assert json_text(dataclasses.replace(lane, time=3.0).to_json()) == (
        '{"event": "finished", "issue": "7", "time": 3.0, "run": "r1", "outcome": "succeeded", "usage": '
        + FIGURES
        + ', "watch_used": {"runs": 1, "reported": 1, "tokens": 1540, "cost": {"USD": 0.4}}}'
    )
    assert guardrails.event_data(guardrails.Usage(updates=0)) is None  # nothing reported: no usage field at all


def shown(usage: guardrails.Usage) -> str:
    figures = api.Usage.of(usage)
    assert figures is not None
    return figures.model_dump_json()


def test_the_api_shows_the_figures_of_the_dashboard_with_the_absent_ones_null() -> None:
    assert shown(resumed()) == (
        '{"context_used":2500,"context_size":100000,"tokens":1540,"input_tokens":1200,"output_tokens":340,'
        '"cost":0.4,"currency":"USD"}'
    )
    assert shown(guardrails.Usage(context_used=10, updates=1)) == (
        '{"context_used":10,"context_size":null,"tokens":null,"input_tokens":null,"output_tokens":null,'
        '"cost":null,"currency":null}'
    )
    assert api.Usage.of(guardrails.Usage()) is None
    record = RunRecord(id="r1", issue="7", mode="auto", agent="a", started_at=utc_now(), usage=resumed())
    assert json.loads(api.RecentRun.of(record).model_dump_json())["usage"] == json.loads(shown(resumed()))


def test_a_record_keeps_every_figure_and_the_readers_counts() -> None:
    record = RunRecord(id="r1", issue="7", mode="auto", agent="a", started_at=utc_now(), usage=resumed())
    usage = record.model_dump_json().partition('"usage":')[2]
    assert usage.startswith(
        '{"context_used":2500,"context_peak":3000,"context_size":100000,"input_tokens":1200,"output_tokens":340,'
        '"total_tokens":null,"thought_tokens":null,"cached_read_tokens":null,"cached_write_tokens":null,"cost":0.4,'
        '"currency":"USD","session_cost":0.65,"earlier_cost":0.25,"earlier_currency":"USD","updates":4,"rejected":1,'
        '"note":null}'
    )


def test_the_three_shapes_name_the_same_figures() -> None:
    """The event's figures are the record's less the reader's own counts, plus the tokens they make; the API's
    are some of the event's. A figure added to one and not the others fails here, not in a client."""
    record = {f.name for f in dataclasses.fields(guardrails.Usage)}
    event = set(UsageFigures.model_fields)
    assert event == record - {"updates", "rejected", "note"} | {"tokens"}
    assert set(api.Usage.model_fields) < event
