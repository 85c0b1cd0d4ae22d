"""A run record on its page: fields in words, times as times, durations as durations, paths relative to the
repository, long values elided with the whole value one click away; the health line's usage agrees with the lanes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from beflow.records.record import RunRecord
from beflow.web import api
from beflow.web.fields import record_fields
from beflow.web.filters import ELIDE_AT, elide, moment, newest, used_line


def test_a_records_fields_are_in_words_with_times_and_paths_a_person_reads(tmp_path: Path) -> None:
    started = dt.datetime(2026, 12, 6, 9, 0, tzinfo=dt.UTC)
    record = RunRecord(
        id="r1", issue="7", mode="auto", agent="claude", started_at=started, duration=42.0, pid_start=1796196454.85
    )
    record.worktree = str(tmp_path / ".beflow" / "worktrees" / "7")
    record.changed_files = [str(tmp_path / "src" / "a.py"), "/elsewhere/b.py"]
    fields = {f.name: f for f in record_fields(record, tmp_path)}
    assert fields["pid_start"].label == "process started" and fields["pid_start"].kind == "moment"
    assert moment(fields["pid_start"].value) == moment(1796196454.85) and ":" in moment(1796196454.85)
    assert fields["started_at"].label == "started" and fields["started_at"].value == started.timestamp()
    assert fields["duration"].label == "took" and fields["duration"].kind == "duration"
    assert fields["worktree"].value == ".beflow/worktrees/7"
    assert fields["changed_files"].value == ["src/a.py", "/elsewhere/b.py"]  # outside the repository: as it is
    assert "outcome" not in fields and "finished_at" not in fields  # shown elsewhere / not set


def test_a_long_value_is_elided_with_a_visible_marker_and_the_whole_value_on_demand() -> None:
    assert str(elide("short")) == "short"
    long = "<b>" + "x" * 300
    shown = str(elide(long))
    assert shown.startswith('<details class="elided"><summary>&lt;b&gt;')
    assert f"… ({len(long) - ELIDE_AT:,} more characters: show all)" in shown
    assert '<span class="whole">&lt;b&gt;' + "x" * 300 + "</span>" in shown and "<b>" not in shown


def test_a_tails_long_line_shows_its_newest_words() -> None:
    assert newest("a" * 10 + "END", 5) == "…aaEND" and newest("short", 5) == "short"


def lane(tokens: int | None) -> api.Lane:
    usage = api.Usage(tokens=tokens) if tokens is not None else None
    return api.Lane(
        issue="1",
        title="t",
        run="r",
        attempt=1,
        started=0,
        elapsed=1,
        latest="",
        progress=[],
        tail=[],
        cancelling=False,
        usage=usage,
    )


def state(lanes: list[api.Lane], used: api.UsageTotals | None) -> api.State:
    totals = api.Totals(
        running=len(lanes), queued=0, backing_off=0, concurrency=2, ticks=0, next_tick=None, used=used, budget=None
    )
    health = api.Health(
        live=True,
        tracker="local",
        tracker_reachable=None,
        blocked=None,
        config_reloaded=None,
        errors=[],
        rate_limit=None,
        webhooks=api.Webhooks(woke=0, ignored=0, refused={}),
    )
    return api.State(
        project="p",
        lanes=lanes,
        queue=[],
        backoffs=[],
        held=[],
        recent=[],
        totals=totals,
        health=health,
        actions=False,
        time=0,
    )


def test_the_health_line_agrees_with_the_lanes() -> None:
    none_finished = api.UsageTotals(runs=0, reported=0, tokens=0, cost={})
    assert (
        used_line(state([lane(1200), lane(800), lane(None)], none_finished)) == "2,000 tokens so far in 2 running runs"
    )
    assert used_line(state([], none_finished)) == ""  # nothing to say: no "no usage reported over 0 runs"
    finished = api.UsageTotals(runs=3, reported=1, tokens=500, cost={"USD": 0.1})
    assert (
        used_line(state([lane(100)], finished))
        == "500 tokens, 0.10 USD over 3 runs; 100 tokens so far in 1 running run"
    )
