"""``run.json``: the run record, its id, and the secrets masked in its words (never in its paths and ids)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import beflow
from beflow.records.record import Consumed, RunRecord, new_run_id, now
from beflow.records.store import RunStore


def test_a_run_id_is_sortable_readable_and_safe() -> None:
    run_id = new_run_id("owner/repo#12")

    assert re.fullmatch(r"\d{8}-\d{6}-owner-repo-12-[0-9a-f]{8}-[0-9a-f]{4}", run_id)
    assert new_run_id("7") != new_run_id("7")


def test_the_words_of_a_rounds_feedback_are_masked_in_its_record(repo: Path) -> None:
    secret = "s3cr3t-value"
    store = RunStore(repo, mask=lambda text: text.replace(secret, "••••"))
    record = RunRecord(id="20240101-000000-1-abcd", issue="1", mode="watch", agent="a", started_at=now(), round=1)
    record.feedback = [Consumed(id="review:1", kind="review", author="bo", excerpt=f"use {secret} here")]
    store.create(record, "prompt")

    assert secret not in (store.directory(record.id) / "run.json").read_text()
    assert RunStore(repo).get(record.id).feedback[0].excerpt == "use •••• here"


def test_secrets_are_masked_in_a_records_words_never_in_its_paths_and_ids(repo: Path) -> None:
    path_secret = str(repo / "app")  # an injected server's env value may well be a path
    store = RunStore(repo, mask=lambda text: text.replace(path_secret, "••••"))
    record = RunRecord(id="20240101-000000-1-abcd", issue="1", mode="attend", agent="a", started_at=now())
    record.checkout = path_secret
    record.final_message = f"I looked in {path_secret}"
    record.changed_files = [f"M\t{path_secret}/x"]
    store.create(record, "prompt")

    saved = RunStore(repo).get(record.id)
    assert saved.checkout == path_secret
    assert saved.final_message == "I looked in ••••"
    assert saved.changed_files == ["M\t••••/x"]


def test_the_docs_describe_every_field_of_the_run_record() -> None:
    """docs/runs.md names each field of run.json, usage's included."""
    from beflow.guardrails import Usage

    text = (Path(beflow.__file__).parent / "docs" / "runs.md").read_text()

    fields = [*RunRecord.model_fields, *(field.name for field in dataclasses.fields(Usage))]
    assert [name for name in fields if f"`{name}`" not in text] == []
