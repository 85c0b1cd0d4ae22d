"""The run records of a project in ``.beflow/runs/``: written, listed newest first, found by id, and read no more
than a question needs."""

from __future__ import annotations

import datetime as dt
import secrets
from pathlib import Path

import pytest

from beflow.errors import NotFoundError
from beflow.paths import slug
from beflow.records.record import RunRecord, now
from beflow.records.store import RunStore


def record(run_id: str, issue: str = "1", **fields: object) -> RunRecord:
    return RunRecord(id=run_id, issue=issue, mode="auto", agent="codex", started_at=now(), **fields)


@pytest.fixture
def store(repo: Path) -> RunStore:
    return RunStore(repo)


def test_a_record_is_written_with_its_prompt_and_read_back(repo: Path, store: RunStore) -> None:
    run = record("20260101-000000-1-aaaa", mcp_servers=["docs"], changed_files=["A\tx.txt"])

    directory = store.create(run, "Do the thing.\n")
    store.write(run.id, "hooks/after_create.log", "$ make\nok\n")

    assert directory == repo / ".beflow" / "runs" / run.id
    assert (directory / "prompt.md").read_text() == "Do the thing.\n"
    assert (directory / "hooks" / "after_create.log").read_text() == "$ make\nok\n"
    assert store.get(run.id) == run
    assert not store.get(run.id).finished
    # beflow's state never shows up in the repository's git status.
    assert (repo / ".beflow" / ".gitignore").exists()


def test_runs_are_listed_newest_first_and_unreadable_ones_skipped(store: RunStore) -> None:
    for run_id in ("20260101-000000-1-aaaa", "20260102-000000-2-bbbb", "20260103-000000-1-cccc"):
        store.create(record(run_id), "")
    broken = store.root / "20260104-000000-3-dddd"
    broken.mkdir()
    (broken / "run.json").write_text("{not json")

    assert [r.id for r in store.records()] == [
        "20260103-000000-1-cccc",
        "20260102-000000-2-bbbb",
        "20260101-000000-1-aaaa",
    ]


def test_a_run_is_found_by_id_prefix_or_latest(store: RunStore) -> None:
    for run_id in ("20260101-000000-1-aaaa", "20260102-000000-2-bbbb"):
        store.create(record(run_id), "")

    assert store.get("20260101").id == "20260101-000000-1-aaaa"
    assert store.get("latest").id == "20260102-000000-2-bbbb"
    with pytest.raises(NotFoundError, match="ambiguous: 20260101-000000-1-aaaa, 20260102-000000-2-bbbb"):
        store.get("2026")
    with pytest.raises(NotFoundError, match=r"no run '20260102-000000-2-bbbx' \(did you mean 20260102-000000-2-bbbb"):
        store.get("20260102-000000-2-bbbx")


def test_an_ambiguous_prefix_names_five_runs_and_how_many_more(store: RunStore) -> None:
    for day in range(1, 9):
        store.create(record(f"202601{day:02d}-000000-1-aaaa"), "")

    with pytest.raises(NotFoundError) as caught:
        store.get("2026")

    assert caught.value.message.endswith("20260105-000000-1-aaaa and 3 more")
    assert caught.value.fix == "Give more of the run's id (`beflow runs list` shows them)."


def test_no_runs_yet(store: RunStore) -> None:
    assert store.records() == []
    with pytest.raises(NotFoundError) as caught:
        store.get("latest")

    assert caught.value.message == f"no runs yet in {store.project_dir}, so no run 'latest'"
    assert caught.value.fix is not None and caught.value.fix.startswith("`beflow --auto` runs every ready issue")


def test_runs_started_within_the_same_second_are_ordered_by_start_time(store: RunStore) -> None:
    first = record("20260101-000000-1-ffff")
    second = record("20260101-000000-1-0000")  # sorts first by name, but started later
    assert second.started_at > first.started_at
    store.create(first, "")
    store.create(second, "")

    assert [r.id for r in store.records()] == [second.id, first.id]
    assert store.get("latest").id == second.id


def test_finished_records_are_read_once_to_find_the_running_ones(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.records import store as stores

    monkeypatch.setattr(stores, "_FINISHED", {})
    finished = [RunRecord(id=f"2024-{n}", issue=str(n), mode="auto", agent="a", started_at=now()) for n in range(5)]
    for record in finished:
        record.close("succeeded", "done")
        store.create(record, "prompt")
    alive = RunRecord(id="2024-alive", issue="9", mode="watch", agent="a", started_at=now())
    store.create(alive, "prompt")
    (store.project_dir / ".beflow" / stores.FINISHED_RUNS).unlink()  # as an earlier version left them
    reads: list[bytes] = []
    real = RunRecord.model_validate_json

    def counting(data: bytes) -> RunRecord:
        reads.append(data)
        return real(data)

    monkeypatch.setattr(RunRecord, "model_validate_json", counting)
    assert [r.id for r in store.running()] == ["2024-alive"] and len(reads) == 6
    reads.clear()
    assert [r.id for r in store.running()] == ["2024-alive"] and len(reads) == 1
    monkeypatch.setattr(stores, "_FINISHED", {})  # another process: the finished runs were noted for it
    reads.clear()
    assert [r.id for r in store.running()] == ["2024-alive"] and len(reads) == 1
    alive.close("failed", "it failed")
    store.save(alive)
    assert store.running() == [] and store.close_orphans() == []
    assert {r.outcome for r in store.records()} == {"succeeded", "failed"}


def _run_at(store: RunStore, start: dt.datetime, issue: str, *, late: float = 0.0) -> RunRecord:
    """A finished record whose id says ``start`` and whose start time is ``late`` seconds after it."""
    run = record(f"{start:%Y%m%d-%H%M%S}-{slug(issue, max_length=24)}-{secrets.token_hex(2)}", issue)
    run.started_at = start + dt.timedelta(seconds=late)
    store.create(run, "prompt")
    return run


def test_the_newest_runs_and_one_issues_runs_are_read_without_reading_every_record(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for n in range(60):  # an hour apart: the ids alone order them
        _run_at(store, first + dt.timedelta(hours=n), str(n % 6 + 1))
    every = store.records()
    reads: list[bytes] = []
    real = RunRecord.model_validate_json

    def counting(data: bytes, *args: object, **kwargs: object) -> RunRecord:
        reads.append(data)
        return real(data, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(RunRecord, "model_validate_json", counting)
    assert [r.id for r in store.records(limit=5)] == [r.id for r in every[:5]] and len(reads) == 5
    reads.clear()
    assert [r.id for r in store.records(["3"])] == [r.id for r in every if r.issue == "3"] and len(reads) == 10
    reads.clear()
    assert store.records(["3"], limit=2) == [r for r in every if r.issue == "3"][:2] and len(reads) == 2
    assert store.get("latest").id == every[0].id


def test_the_newest_runs_are_ordered_by_their_start_even_within_a_second_or_late_to_their_id(
    store: RunStore,
) -> None:
    first = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    _run_at(store, first, "1", late=1.5)  # its id says it is older than 3; its record says it started later
    _run_at(store, first, "2", late=0.2)
    _run_at(store, first + dt.timedelta(seconds=1), "3")
    _run_at(store, first - dt.timedelta(hours=1), "a/b")
    odd = record("kept-by-hand", "4")
    odd.started_at = first + dt.timedelta(days=1)
    store.create(odd, "prompt")
    every = store.records()
    assert [r.issue for r in every] == ["4", "1", "3", "2", "a/b"]
    for limit in range(1, 6):
        assert [r.id for r in store.records(limit=limit)] == [r.id for r in every[:limit]]
    assert [r.issue for r in store.records(["a/b"])] == ["a/b"]
