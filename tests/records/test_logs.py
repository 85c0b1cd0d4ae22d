"""The files of a run's record: capped logs, and the progress lines masked as they are written and read back."""

from __future__ import annotations

from pathlib import Path

from beflow.records.logs import PROGRESS_FILE, CappedLog
from beflow.records.record import ProgressNote, RunRecord, now
from beflow.records.store import RunStore


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


def test_a_store_with_a_mask_writes_and_reads_back_every_secret_masked(repo: Path) -> None:

    secret = "s3cr3t-value"
    store = RunStore(repo, mask=lambda text: text.replace(secret, "••••"))
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
    assert RunStore(repo).get(record.id).final_message == "final ••••"
