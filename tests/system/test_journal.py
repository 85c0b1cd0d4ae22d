"""``beflow.system.journal``: entries written durably and ``0600`` before a risky step, read as untrusted, told apart
by whether their owner still runs, quarantined when damaged; and what was found meanwhile, saved aside for a while."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from beflow.system import journal as journal_module
from beflow.system.files import NotRegularError
from beflow.system.journal import SAVED_DAYS, Damaged, Journal, Owned, SavedAside, this_process


class Note(Owned):
    secret: str
    count: int = 0


@pytest.fixture
def journal(tmp_path: Path) -> Journal[Note]:
    return Journal(tmp_path / "journal", Note, limit=4096)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def mine(**fields: object) -> Note:
    owner = this_process()
    return Note(pid=owner.pid, pid_start=owner.pid_start, secret="s3cr3t-value", **fields)


def test_an_entry_is_written_0600_and_durably_whatever_the_umask_and_read_back(
    journal: Journal[Note], monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(stat.S_IFMT(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    previous = os.umask(0)
    try:
        path = journal.write("one", mine(count=3))
    finally:
        os.umask(previous)

    assert path == journal.directory / "one.json" and mode_of(path) == 0o600  # it may hold secrets
    assert stat.S_IFREG in synced and stat.S_IFDIR in synced  # the bytes, and the rename
    entry = journal.read(path)
    assert entry is not None and (entry.pid, entry.count, entry.secret) == (os.getpid(), 3, "s3cr3t-value")
    assert entry.pid_start is not None and entry.owner_alive()
    assert journal.read(journal.path("none")) is None


def test_an_entry_of_an_earlier_version_without_a_start_time_is_owned_by_its_pid_alone(
    journal: Journal[Note],
) -> None:
    journal.directory.mkdir()
    journal.path("old").write_text(f'{{"secret": "x", "pid": {os.getpid()}}}')
    entry = journal.read(journal.path("old"))
    assert entry is not None and entry.pid_start is None and entry.owner_alive()


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("symlink", "it is a symlink"),  # never followed, even to a valid entry
        ("fifo", "it is a FIFO"),  # never opened: it would block for ever
        ("directory", "it is a directory"),
        ("too large", "it is larger than 4096 bytes"),
        ("empty", "it is empty"),
        ("truncated", "it is not valid JSON (cut short, or overwritten)"),
        ("wrong field", "invalid field(s): count, pid"),
    ],
)
def test_a_damaged_entry_says_why_without_quoting_it(
    journal: Journal[Note], tmp_path: Path, damage: str, why: str
) -> None:
    whole = mine().model_dump_json()
    journal.directory.mkdir()
    path = journal.path("bad")
    if damage == "symlink":
        (tmp_path / "elsewhere.json").write_text(whole)
        path.symlink_to(tmp_path / "elsewhere.json")
    elif damage == "fifo":
        os.mkfifo(path)
    elif damage == "directory":
        path.mkdir()
    elif damage == "too large":
        path.write_text(whole + " " * 4096)
    elif damage == "empty":
        path.write_text("\n")
    elif damage == "truncated":
        path.write_text(whole[:-10])
    else:
        path.write_text('{"pid": "s3cr3t-value", "pid_start": null, "secret": "s3cr3t-value", "count": "many"}')

    with pytest.raises(Damaged) as raised:
        journal.read(path)

    assert raised.value.why == why and "s3cr3t" not in str(raised.value)
    # What was read is handed on for salvage; what could not be opened, or was too large, is not read at all.
    assert (raised.value.raw is None) == (damage in ("symlink", "fifo", "directory", "too large"))


def test_entries_are_listed_by_prefix_damaged_ones_as_none_and_live_ones_by_their_owner(
    journal: Journal[Note],
) -> None:
    started = this_process().pid_start
    assert started is not None
    journal.write("repo-1", mine())
    journal.write("repo-2", mine().model_copy(update={"pid": dead_pid()}))
    journal.write("repo-3", mine().model_copy(update={"pid_start": started - 60}))  # this pid, another process
    journal.write("other-1", mine(count=7))
    journal.path("repo-4").write_text("{")
    (journal.directory / "repo-5.changed").write_text("[]")  # not an entry

    listed = journal.entries("repo-")

    assert [(path.name, entry is None) for path, entry in listed] == [
        ("repo-1.json", False),
        ("repo-2.json", False),
        ("repo-3.json", False),
        ("repo-4.json", True),
    ]
    assert [entry.count for entry in journal.live()] == [7, 0]  # other-1, repo-1: sorted by name
    assert len(journal.live("repo-")) == 1 and journal.live("nothing-") == []


@pytest.mark.parametrize("state", ["missing", "a file"])
def test_no_directory_lists_no_entries(tmp_path: Path, state: str) -> None:
    if state == "a file":
        (tmp_path / "journal").write_text("a file where the directory should be")
    journal = Journal(tmp_path / "journal", Note, limit=4096)
    assert journal.paths() == [] and journal.entries() == [] and journal.live() == []


def test_a_damaged_entry_is_quarantined_out_of_every_later_look_and_a_done_one_dropped(
    journal: Journal[Note],
) -> None:
    kept = journal.write("kept", mine())
    bad = journal.path("bad")
    bad.write_text("{ s3cr3t-value")
    os.chmod(bad, 0o600)

    moved = journal.quarantine(bad)

    assert moved.parent == journal.damaged and moved.name.startswith("bad-") and moved.suffix == ".json"
    assert moved.read_text() == "{ s3cr3t-value" and mode_of(moved) == 0o600
    assert mode_of(journal.damaged) == 0o700  # it may hold secrets: the user's alone
    assert not bad.exists() and journal.paths() == [kept]
    journal.drop(kept)
    journal.drop(kept)  # dropping twice is harmless
    assert journal.paths() == []


def test_what_is_saved_aside_is_0600_and_pruned_after_its_days(tmp_path: Path) -> None:
    home = tmp_path / "beflow-home"
    saved = SavedAside(home)
    fresh = saved.save("fresh.json", b"found during the run")
    old = saved.save("old.json", b"found long ago")
    weeks_ago = time.time() - SAVED_DAYS * 86400 - 60
    os.utime(old, (weeks_ago, weeks_ago))
    (saved.directory / "a-directory").mkdir()
    os.utime(saved.directory / "a-directory", (weeks_ago, weeks_ago))

    assert fresh == home / "saved" / "fresh.json" and mode_of(fresh) == 0o600
    assert saved.prune() == [old]
    assert sorted(path.name for path in saved.directory.iterdir()) == ["a-directory", "fresh.json"]
    assert saved.prune(now=time.time() + SAVED_DAYS * 86400 + 60) == [fresh]


def test_a_saved_directory_replaced_by_a_link_is_never_written_through_nor_pruned(tmp_path: Path) -> None:
    home, documents = tmp_path / "beflow-home", tmp_path / "documents"
    home.mkdir()
    documents.mkdir()
    thesis = documents / "thesis.tex"
    thesis.write_text("the user's")
    weeks_ago = time.time() - SAVED_DAYS * 86400 - 60
    os.utime(thesis, (weeks_ago, weeks_ago))
    (home / "saved").symlink_to(documents)
    saved = SavedAside(home)

    assert saved.prune() == []
    with pytest.raises(NotRegularError, match="saved is a symlink"):
        saved.save("found.json", b"x")
    assert sorted(path.name for path in documents.iterdir()) == ["thesis.tex"]


def test_stamps_sort_as_time_goes() -> None:
    first = journal_module.stamp()
    time.sleep(0.001)
    assert first < journal_module.stamp() and first.endswith("Z") and len(first) == len("20240101T120000123456Z")
