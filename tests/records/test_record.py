"""Run records in ``.beflow/runs/<run-id>/``: ``run.json`` and its artifacts, listed and found by id."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import secrets
from pathlib import Path

import pytest

import beflow
from beflow.errors import NotFoundError
from beflow.paths import slug
from beflow.records.record import CappedLog, RunRecord, RunStore, new_run_id, now


def record(run_id: str, issue: str = "1", **fields: object) -> RunRecord:
    return RunRecord(id=run_id, issue=issue, mode="auto", agent="codex", started_at=now(), **fields)


@pytest.fixture
def store(repo: Path) -> RunStore:
    return RunStore(repo)


def test_a_run_id_is_sortable_readable_and_safe() -> None:
    run_id = new_run_id("owner/repo#12")

    assert re.fullmatch(r"\d{8}-\d{6}-owner-repo-12-[0-9a-f]{8}-[0-9a-f]{4}", run_id)
    assert new_run_id("7") != new_run_id("7")


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
    with pytest.raises(NotFoundError, match="no run 'latest'"):
        store.get("latest")


def test_runs_started_within_the_same_second_are_ordered_by_start_time(store: RunStore) -> None:
    first = record("20260101-000000-1-ffff")
    second = record("20260101-000000-1-0000")  # sorts first by name, but started later
    assert second.started_at > first.started_at
    store.create(first, "")
    store.create(second, "")

    assert [r.id for r in store.records()] == [second.id, first.id]
    assert store.get("latest").id == second.id


def test_a_capped_log_keeps_whole_lines_up_to_its_limit_then_says_how_much_it_left_out(tmp_path: Path) -> None:
    path = tmp_path / "hooks" / "x.log"
    with CappedLog(path, 20, redact=lambda line: line.replace(b"secret", b"***"), below=tmp_path) as log:
        log.write(b"$ cmd\n")
        log.lines(b"a secret")
        log.lines(b"more output than fits")
        log.lines(b"ok")  # it would fit, but comes after what was left out
        log.close(b"[exit 0]\n")
    assert (
        path.read_bytes() == b"$ cmd\na ***\n[beflow: output beyond 20 bytes was not kept: 25 more bytes]\n[exit 0]\n"
    )


def test_a_capped_log_given_many_lines_at_once_keeps_those_that_fit_whole(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    with CappedLog(path, 12, redact=lambda data: data.replace(b"secret", b"***"), below=tmp_path) as log:
        log.lines(b"secret\ntwo\nthree\nfour")
        log.close()
    assert path.read_bytes() == b"***\ntwo\n[beflow: output beyond 12 bytes was not kept: 11 more bytes]\n"


def test_finished_records_are_read_once_to_find_the_running_ones(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.records import record as records

    monkeypatch.setattr(records, "_FINISHED", {})
    finished = [RunRecord(id=f"2024-{n}", issue=str(n), mode="auto", agent="a", started_at=now()) for n in range(5)]
    for record in finished:
        record.close("succeeded", "done")
        store.create(record, "prompt")
    alive = RunRecord(id="2024-alive", issue="9", mode="watch", agent="a", started_at=now())
    store.create(alive, "prompt")
    (store.project_dir / ".beflow" / records.FINISHED_RUNS).unlink()  # as an earlier version left them
    reads: list[bytes] = []
    real = RunRecord.model_validate_json

    def counting(data: bytes) -> RunRecord:
        reads.append(data)
        return real(data)

    monkeypatch.setattr(RunRecord, "model_validate_json", counting)
    assert [r.id for r in store.running()] == ["2024-alive"] and len(reads) == 6
    reads.clear()
    assert [r.id for r in store.running()] == ["2024-alive"] and len(reads) == 1
    monkeypatch.setattr(records, "_FINISHED", {})  # another process: the finished runs were noted for it
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


def test_a_store_with_a_mask_writes_and_reads_back_every_secret_masked(tmp_path: Path) -> None:
    from beflow.records.record import PROGRESS_FILE, ProgressNote

    secret = "s3cr3t-value"
    store = RunStore(tmp_path, mask=lambda text: text.replace(secret, "••••"))
    record = RunRecord(id="20240101-000000-1-abcd", issue="1", mode="auto", agent="a", started_at=now())
    store.create(record, f"prompt with {secret}")
    record.final_message = f"final {secret}"
    store.save(record)
    store.add_progress(record.id, ProgressNote(time=now(), text=f"note {secret}", actor="agent"))
    # A line another process wrote unmasked: read back masked, and rewritten masked once the run is done.
    with (store.directory(record.id) / PROGRESS_FILE).open("a") as handle:
        handle.write(ProgressNote(time=now(), text=f"raw {secret}", actor="agent").model_dump_json() + "\n")
    assert [n.text for n in store.progress(record.id)] == ["note ••••", "raw ••••"]
    (store.directory(record.id) / "prompt.md").write_text(f"prompt with {secret}")
    store.mask_files(record.id)

    assert not [p for p in store.directory(record.id).rglob("*") if p.is_file() and secret in p.read_text()]
    assert RunStore(tmp_path).get(record.id).final_message == "final ••••"


def test_the_words_of_a_rounds_feedback_are_masked_in_its_record(tmp_path: Path) -> None:
    from beflow.records.record import Consumed

    secret = "s3cr3t-value"
    store = RunStore(tmp_path, mask=lambda text: text.replace(secret, "••••"))
    record = RunRecord(id="20240101-000000-1-abcd", issue="1", mode="watch", agent="a", started_at=now(), round=1)
    record.feedback = [Consumed(id="review:1", kind="review", author="bo", excerpt=f"use {secret} here")]
    store.create(record, "prompt")

    assert secret not in (store.directory(record.id) / "run.json").read_text()
    assert RunStore(tmp_path).get(record.id).feedback[0].excerpt == "use •••• here"


def test_secrets_are_masked_in_a_records_words_never_in_its_paths_and_ids(tmp_path: Path) -> None:
    path_secret = str(tmp_path / "app")  # an injected server's env value may well be a path
    store = RunStore(tmp_path, mask=lambda text: text.replace(path_secret, "••••"))
    record = RunRecord(id="20240101-000000-1-abcd", issue="1", mode="attend", agent="a", started_at=now())
    record.checkout = path_secret
    record.final_message = f"I looked in {path_secret}"
    record.changed_files = [f"M\t{path_secret}/x"]
    store.create(record, "prompt")

    saved = RunStore(tmp_path).get(record.id)
    assert saved.checkout == path_secret
    assert saved.final_message == "I looked in ••••"
    assert saved.changed_files == ["M\t••••/x"]


def test_the_docs_describe_every_field_of_the_run_record() -> None:
    """docs/runs.md names each field of run.json, usage's included."""
    from beflow.guardrails import Usage

    text = (Path(beflow.__file__).parent / "docs" / "runs.md").read_text()

    fields = [*RunRecord.model_fields, *(field.name for field in dataclasses.fields(Usage))]
    assert [name for name in fields if f"`{name}`" not in text] == []
