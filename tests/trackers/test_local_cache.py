"""The local tracker does work in proportion to what changed: unchanged files are not parsed again (in one process,
nor in the next one, through the index), and one issue is read by its file name without a scan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beflow.trackers import local, local_files, local_index
from beflow.trackers.issue import Status
from beflow.trackers.local import LocalTracker
from tests.conftest import git

#: More issues than a handful (the index once waited for this many changes before it was rewritten).
MANY = 18


@pytest.fixture
def tracker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalTracker:
    # Files written a moment ago are never trusted to their stamp; here "a moment" is nothing, so the cache is used
    # at once (the racy window has its own test).
    monkeypatch.setattr(local_files, "RACY_NS", -(10**12))
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")  # the local tracker writes only inside a git work tree (beflow.paths.state_dir)
    return LocalTracker(project / ".beflow" / "issues", project)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file parsed, in order."""
    seen: list[Path] = []
    real = local_files.parse

    def counting(path: Path, text: str, **kwargs: object) -> local.Issue:
        seen.append(path)
        return real(path, text, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(local_files, "parse", counting)
    return seen


def fresh_process(monkeypatch: pytest.MonkeyPatch, tracker: LocalTracker) -> LocalTracker:
    """The same tracker as another beflow process sees it: nothing parsed in memory yet."""
    return LocalTracker(tracker.directory, tracker.project_dir)


def test_an_unchanged_file_is_parsed_once(tracker: LocalTracker, parses: list[Path]) -> None:
    for n in range(5):
        tracker.create(f"issue {n}")
    tracker.listing()
    parses.clear()
    assert [i.title for i in tracker.listing().issues] == [f"issue {n}" for n in range(5)]
    assert tracker.ready() and parses == []


def test_a_hand_edit_is_seen_even_at_the_same_size(tracker: LocalTracker, parses: list[Path]) -> None:
    issue = tracker.create("Fix the crash")
    assert tracker.listing().issues[0].status == Status.READY
    path = Path(str(issue.path))
    text = path.read_text()
    with path.open("r+") as handle:  # in place, same size: only the stamp's times (and ctime) tell
        handle.write(text.replace("status: ready", "status: close"))
    parses.clear()
    [problem] = tracker.listing().problems
    assert "status" in problem.message and parses == [path]


def test_a_new_process_reads_unchanged_issues_from_the_index(
    tracker: LocalTracker, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(MANY + 2):
        tracker.create(f"issue {n}", body=f"body {n}", labels=["a", "b"])
    tracker.comment("3", "a comment", author="alice")
    before = tracker.listing().issues
    assert (tracker.project_dir / ".beflow" / "tracker" / local_index.INDEX_NAME).is_file()
    other = fresh_process(monkeypatch, tracker)
    parses.clear()
    after = other.listing().issues
    assert parses == []
    assert [i.model_dump() for i in after] == [i.model_dump() for i in before]


def test_the_index_never_hides_an_edit(
    tracker: LocalTracker, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(MANY + 2):
        tracker.create(f"issue {n}")
    tracker.listing()
    path = Path(str(tracker.get("4").path))
    path.write_text(path.read_text().replace("issue 3", "renamed by hand"))
    other = fresh_process(monkeypatch, tracker)
    parses.clear()
    assert other.get("4").title == "renamed by hand"
    assert other.listing().issues[3].title == "renamed by hand" and parses == [path]


def test_a_damaged_index_is_ignored(tracker: LocalTracker, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(MANY + 2):
        tracker.create(f"issue {n}")
    tracker.listing()
    index = tracker.project_dir / ".beflow" / "tracker" / local_index.INDEX_NAME
    index.write_text('{"version": 1, "directory": "' + str(tracker.directory) + '", "entries": {"0001-issue-0.md": 7}}')
    assert len(fresh_process(monkeypatch, tracker).listing().issues) == MANY + 2


def test_one_issue_is_read_by_its_file_name_without_a_scan(
    tracker: LocalTracker, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(20):
        tracker.create(f"issue {n}")
    other = fresh_process(monkeypatch, tracker)
    monkeypatch.setattr(LocalTracker, "_scan", lambda self: pytest.fail("a scan"))
    parses.clear()
    assert other.get("#0007").title == "issue 6"
    other.set_status("7", Status.CLOSED)
    assert other.get("7").status == Status.CLOSED
    assert {p.name for p in parses} == {"0007-issue-6.md"}


def test_a_file_just_written_is_read_again_until_its_stamp_can_be_trusted(
    tracker: LocalTracker, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_files, "RACY_NS", 3600 * 10**9)
    tracker.create("new")
    tracker.listing()
    parses.clear()
    tracker.listing()
    assert len(parses) == 1


def test_reading_a_big_tracker_parses_nothing_that_did_not_change(
    tracker: LocalTracker, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracker.directory.mkdir(parents=True)
    (tracker.project_dir / ".beflow" / ".gitignore").write_text("*\n")
    for key in range(1, 301):
        (tracker.directory / f"{key:04d}-x.md").write_text(f"---\nkey: {key}\ntitle: x\nstatus: done\n---\n")
    assert len(tracker.listing().issues) == 300 and len(parses) == 300
    os.utime(tracker.directory / "0150-x.md")  # touched: read again, found the same
    other = fresh_process(monkeypatch, tracker)
    parses.clear()
    assert other.ready() == [] and [p.name for p in parses] == ["0150-x.md"]
    assert other.create("next").key == "301"


def test_an_index_rewritten_by_a_long_lived_process_keeps_every_issue(
    tracker: LocalTracker, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(5):
        tracker.create(f"old {n}")
    tracker.listing()  # the index holds the five
    for n in range(MANY):
        tracker.create(f"new {n}")
    tracker.listing()  # enough changed for this process to write the index again: with every issue
    other = fresh_process(monkeypatch, tracker)
    parses.clear()
    assert len(other.listing().issues) == 5 + MANY and parses == []


def test_a_listing_streams_from_the_index_without_building_an_issue(
    tracker: LocalTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(MANY):
        tracker.create(f"issue {n}", body=f"body {n}", labels=["a"] if n % 2 else ["b", "c"])
    tracker.comment("3", "a comment", author="alice")
    (tracker.directory / "0099-broken.md").write_text("no front matter\n")
    whole = tracker.listing()
    other = fresh_process(monkeypatch, tracker)
    monkeypatch.setattr(local.Issue, "model_validate_json", lambda *a, **k: pytest.fail("an issue was built"))
    monkeypatch.setattr(local.Issue, "__init__", lambda *a, **k: pytest.fail("an issue was built"))
    stream = other.stream()
    assert "".join(stream.json_chunks()) == whole.model_dump_json()
    assert [(r.key, r.title, r.labels, r.updated) for r in stream.rows()] == [
        (i.key, i.title, i.labels, i.updated) for i in whole.issues
    ]
    assert [r.key for r in other.stream(label="a").rows()] == [i.key for i in whole.issues if "a" in i.labels]
    [problem] = stream.problems
    assert problem.path.name == "0099-broken.md"


def test_a_streamed_listing_of_no_issues_is_still_a_listing(tracker: LocalTracker) -> None:
    assert "".join(tracker.stream().json_chunks()) == local.Listing().model_dump_json()


def test_an_index_of_another_tracker_directory_is_rebuilt_not_trusted(
    tracker: LocalTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(3):
        tracker.create(f"issue {n}")
    tracker.listing()
    moved = LocalTracker(tracker.project_dir / "elsewhere", tracker.project_dir)
    moved.directory.mkdir()
    (moved.directory / "0001-x.md").write_text("---\nkey: 1\ntitle: elsewhere\nstatus: open\n---\n")
    assert [i.title for i in moved.listing().issues] == ["elsewhere"]
    with pytest.raises(local.NotFoundError):
        moved.get("2")
    assert [i.title for i in fresh_process(monkeypatch, tracker).listing().issues] == ["issue 0", "issue 1", "issue 2"]


def test_reading_creates_no_state_where_there_is_none(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "issues").mkdir(parents=True)
    (project / "issues" / "0001-x.md").write_text("---\nkey: 1\ntitle: x\nstatus: ready\n---\n")
    tracker = LocalTracker(project / "issues", project)
    assert [i.title for i in tracker.listing().issues] == ["x"] and tracker.get("1").title == "x"
    assert "".join(tracker.stream().json_chunks()).startswith('{"issues":[{"key":"1"')
    assert sorted(p.name for p in project.iterdir()) == ["issues"]


def test_two_trackers_writing_the_index_at_once_both_see_every_issue(
    tracker: LocalTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    tracker.directory.mkdir(parents=True)
    for key in range(1, 201):
        (tracker.directory / f"{key:04d}-x.md").write_text(f"---\nkey: {key}\ntitle: x {key}\nstatus: done\n---\n")
    (tracker.project_dir / ".beflow" / ".gitignore").write_text("*\n")
    results: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:  # each its own connection: as two beflow processes
            results.append(len(LocalTracker(tracker.directory, tracker.project_dir).listing().issues))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and results == [200] * 4
    assert len(fresh_process(monkeypatch, tracker).listing().issues) == 200


def test_a_new_key_counts_a_file_named_by_hand_without_a_number(tracker: LocalTracker) -> None:
    tracker.create("first")
    (tracker.directory / "my-issue.md").write_text("---\nkey: 41\ntitle: by hand\nstatus: open\n---\n")
    assert tracker.create("next").key == "42"


def test_an_index_damaged_while_in_use_is_rebuilt(tracker: LocalTracker) -> None:
    for n in range(MANY):
        tracker.create(f"issue {n}")
    assert len(tracker.listing().issues) == MANY
    index = tracker.project_dir / ".beflow" / "tracker" / local_index.INDEX_NAME
    for suffix in ("-wal", "-shm", ""):  # (written over in place: this process's connection still has it open)
        path = index.with_name(index.name + suffix)
        if path.exists():
            path.write_bytes(b"\0garbage" * 4096)
    assert len(tracker.listing().issues) == MANY
    assert "".join(tracker.stream().json_chunks()) == tracker.listing().model_dump_json()
    tracker.create("one more")
    assert len(tracker.listing().issues) == MANY + 1
    assert tracker.get("3").title == "issue 2"
    assert [i.title for i in LocalTracker(tracker.directory, tracker.project_dir).ready()][-1] == "one more"


def test_one_tracker_read_from_several_threads_while_another_writes(tracker: LocalTracker) -> None:
    """A watch's tick and its runs' steps use one tracker from worker threads at once."""
    import threading

    for n in range(MANY):
        tracker.create(f"issue {n}")
    errors: list[BaseException] = []
    counts: list[int] = []

    def read() -> None:
        try:
            for _ in range(10):
                with tracker.reading_once():
                    counts.append(len(tracker.listing().issues))
                    tracker.ready()
        except BaseException as error:
            errors.append(error)

    def write() -> None:
        try:
            for n in range(10):
                tracker.create(f"more {n}")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=read) for _ in range(3)] + [threading.Thread(target=write)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(MANY <= count <= MANY + 10 for count in counts)
    assert len(tracker.listing().issues) == MANY + 10
