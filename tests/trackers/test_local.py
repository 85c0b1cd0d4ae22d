"""The local tracker: the file format, keys, broken files, concurrent writers and claims across processes."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beflow.errors import LockedError, NotFoundError, UsageError
from beflow.run.issue_status import requeue_orphans
from beflow.trackers.issue import Comment, Issue, Status
from beflow.trackers.local import LocalTracker
from beflow.trackers.local_format import COMMENTS_MARKER, IssueFileError, file_name, parse, render
from tests.conftest import git

T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.UTC)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git work tree: the local tracker writes only inside one (beflow.paths.state_dir)."""
    path = tmp_path / "project"
    path.mkdir()
    git(path, "init", "-q")
    return path


@pytest.fixture
def tracker(project: Path) -> LocalTracker:
    return LocalTracker(project / ".beflow" / "issues", project)


def write(tracker: LocalTracker, name: str, text: str) -> Path:
    tracker.directory.mkdir(parents=True, exist_ok=True)
    path = tracker.directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def start_python(code: str, *args: str) -> subprocess.Popen[str]:
    """A real Python process running ``code`` (with beflow importable), its output piped."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# --- the file format -----------------------------------------------------------------------------------------------


def test_a_new_issue_is_a_readable_markdown_file(tracker: LocalTracker) -> None:
    issue = tracker.create("Fix the login crash", body="It crashes on Safari.", labels=["bug"], priority=1)
    assert issue.path == tracker.directory / "0001-fix-the-login-crash.md"
    stamp = issue.created.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert issue.path.read_text() == (
        "---\n"
        "key: 1\n"
        "title: Fix the login crash\n"
        "status: ready\n"
        "priority: 1\n"
        "labels: [bug]\n"
        f"created: '{stamp}'\n"
        f"updated: '{stamp}'\n"
        "---\n"
        "\n"
        "It crashes on Safari.\n"
        "\n"
        f"{COMMENTS_MARKER}\n"
    )


def test_comments_are_written_under_author_and_time_headings(tracker: LocalTracker) -> None:
    issue = tracker.create("Fix the login crash")
    comment = tracker.comment(issue.key, "Only on Safari.", author="alice")
    text = Path(str(issue.path)).read_text()
    stamp = comment.created.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert text.endswith(f"{COMMENTS_MARKER}\n\n### alice · {stamp}\n\nOnly on Safari.\n")
    assert tracker.get("1").comments == [comment]


one_line = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).filter(
    lambda s: s.strip() == s and len(s.splitlines()) == 1
)
#: A label as every tracker keeps it: one line of at most 50 characters, no control characters.
a_label = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=50).filter(
    lambda s: s.strip() == s and len(s.splitlines()) == 1
)
tricky_lines = st.sampled_from(
    ["---", "...", COMMENTS_MARKER, f"\\{COMMENTS_MARKER}", f"{COMMENTS_MARKER}  ", "### bob · 2024-05-01T10:00:00Z",
     "\\### x", "### ", "", "  ", "key: 9", "<!-- x -->"]
)  # fmt: skip
free_text = st.lists(st.one_of(tricky_lines, st.text(st.characters(blacklist_categories=("Cs",))))).map("\n".join)
times = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1), timezones=st.just(dt.UTC))


@settings(max_examples=300, deadline=None)
@given(
    title=one_line,
    body=free_text,
    labels=st.lists(a_label, max_size=4),
    priority=st.integers(0, 1000),
    status=st.sampled_from(Status),
    comments=st.lists(st.tuples(one_line, times, free_text.filter(lambda t: t.strip())), max_size=4),
    created=times,
)
def test_what_is_written_parses_back_the_same(
    tmp_path_factory: pytest.TempPathFactory,
    title: str,
    body: str,
    labels: list[str],
    priority: int,
    status: Status,
    comments: list[tuple[str, dt.datetime, str]],
    created: dt.datetime,
) -> None:
    path = tmp_path_factory.getbasetemp() / "0042-x.md"
    issue = Issue(
        key="42",
        title=title,
        status=status,
        labels=labels,
        priority=priority,
        created=created,
        updated=created,
        body=body,
        comments=[Comment(author=a, created=t, text=c) for a, t, c in comments],
        path=path,
        url=path.absolute().as_uri(),
    )
    assert parse(path, render(issue)) == issue


def test_hand_edits_survive_beflow_writes_and_a_new_title_does_not_rename(tracker: LocalTracker) -> None:
    issue = tracker.create("Fix the login crash", body="Old body.")
    tracker.comment(issue.key, "First.", author="alice")
    path = Path(str(issue.path))
    edited = (
        path.read_text()
        .replace("title: Fix the login crash", "title: Fix the login crash on Safari")
        .replace("Old body.", "New body,\n\nwith a list:\n\n- one\n- two")
        .replace("labels: []", "labels: [bug, safari]")
    )
    edited += "\n### bob · 2024-05-01T12:00:00Z\n\nAdded by hand.\n"
    path.write_text(edited)

    tracker.comment(issue.key, "Second.", author="carol")
    tracker.set_status(issue.key, Status.IN_PROGRESS)

    again = tracker.get(issue.key)
    assert again.path == path and sorted(p.name for p in tracker.directory.iterdir()) == [path.name]
    assert again.title == "Fix the login crash on Safari"
    assert again.body == "New body,\n\nwith a list:\n\n- one\n- two"
    assert again.labels == ["bug", "safari"]
    assert [(c.author, c.text) for c in again.comments] == [
        ("alice", "First."),
        ("bob", "Added by hand."),
        ("carol", "Second."),
    ]
    assert again.status == Status.IN_PROGRESS


def test_a_file_written_by_hand_needs_only_key_title_and_status(tracker: LocalTracker) -> None:
    path = write(
        tracker,
        "0003-by-hand.md",
        """
        ---
        key: 3
        title: Written by hand
        status: ready
        ---
        Just a body.
        """,
    )
    issue = tracker.get("3")
    assert (issue.title, issue.body, issue.labels, issue.priority, issue.comments) == (
        "Written by hand",
        "Just a body.",
        [],
        2,
        [],
    )
    assert issue.created == dt.datetime.fromtimestamp(int(path.stat().st_mtime), dt.UTC)


def test_a_padded_key_written_by_hand_is_decimal(tracker: LocalTracker) -> None:
    write(tracker, "0010-padded.md", "---\nkey: 0010\ntitle: padded\nstatus: open\n---\n")
    assert tracker.get("10").title == "padded"


def test_file_names_are_the_padded_key_and_a_short_form_of_the_title() -> None:
    assert file_name("7", "Fix the login crash!") == "0007-fix-the-login-crash.md"
    assert file_name("12345", "Ünïcödé title") == "12345-unicode-title.md"
    assert file_name("8", "日本語") == "0008-issue.md"
    assert file_name("9", "a very long title that goes on and on and on forever") == (
        "0009-a-very-long-title-that-goes-on-and-on.md"
    )


# --- keys ----------------------------------------------------------------------------------------------------------


def test_keys_are_sequential_and_never_reused(tracker: LocalTracker) -> None:
    keys = [tracker.create(f"issue {n}").key for n in range(3)]
    assert keys == ["1", "2", "3"]
    Path(str(tracker.get("3").path)).unlink()
    assert tracker.create("after a deletion").key == "4"


def test_a_key_written_by_hand_counts_for_the_next_one(tracker: LocalTracker) -> None:
    write(tracker, "0041-hand.md", "---\nkey: 41\ntitle: hand\nstatus: open\n---\n")
    assert tracker.create("next").key == "42"


def test_two_processes_creating_at_once_never_collide(tracker: LocalTracker, project: Path) -> None:
    code = """
        import sys
        from pathlib import Path
        from beflow.trackers.local import LocalTracker
        tracker = LocalTracker(Path(sys.argv[1]), Path(sys.argv[2]))
        for n in range(10):
            tracker.create(f"from {sys.argv[3]} #{n}")
    """
    workers = [start_python(code, str(tracker.directory), str(project), name) for name in ("a", "b")]
    for worker in workers:
        assert worker.wait(timeout=120) == 0, worker.stderr.read() if worker.stderr else ""
    listing = tracker.listing()
    assert listing.problems == []
    assert sorted(int(i.key) for i in listing.issues) == list(range(1, 21))
    assert len(list(tracker.directory.glob("*.md"))) == 20


# --- reading -------------------------------------------------------------------------------------------------------


def test_list_filters_by_status_and_label(tracker: LocalTracker) -> None:
    tracker.create("a", labels=["bug"])
    tracker.create("b", labels=["bug", "ui"], status=Status.OPEN)
    tracker.create("c", labels=["ui"])
    assert [i.title for i in tracker.listing().issues] == ["a", "b", "c"]
    assert [i.title for i in tracker.listing(status=Status.READY).issues] == ["a", "c"]
    assert [i.title for i in tracker.listing(label="ui").issues] == ["b", "c"]
    assert [i.title for i in tracker.listing(status=Status.READY, label="bug").issues] == ["a"]


def test_an_unknown_key_names_keys_close_to_it(tracker: LocalTracker) -> None:
    for title in ("Fix the login crash", "Add dark mode", "Speed up search"):
        tracker.create(title)
    with pytest.raises(NotFoundError) as caught:
        tracker.get("12")
    assert "no issue 12" in caught.value.message
    assert "did you mean: 2 (Add dark mode), 1 (Fix the login crash)" in caught.value.message
    with pytest.raises(NotFoundError, match=r"did you mean: 1 \(Fix the login crash\)"):
        tracker.get("login")
    assert tracker.get("#0002").title == "Add dark mode"


@pytest.mark.parametrize("key", ["¹", "①", "1" * 5000, "0" * 5000 + "2"])
def test_keys_that_only_look_like_numbers_are_not_found_not_a_crash(tracker: LocalTracker, key: str) -> None:
    tracker.create("Fix the login crash")
    tracker.create("Add dark mode")

    if key.endswith("2"):  # leading zeros, however many: still issue 2
        assert tracker.get(key).title == "Add dark mode"
        return
    with pytest.raises(NotFoundError, match="no issue"):
        tracker.get(key)


def test_refresh_sees_hand_edits(tracker: LocalTracker) -> None:
    issue = tracker.create("Fix the login crash")
    path = Path(str(issue.path))
    path.write_text(path.read_text().replace("status: ready", "status: closed"))
    assert tracker.get(issue.key).status == Status.CLOSED


# --- broken files --------------------------------------------------------------------------------------------------

BROKEN = {
    "bad YAML": ("---\nkey: 5\ntitle: Fix: the crash\nstatus: ready\n---\n", 3, "invalid YAML in the front matter"),
    "missing status": ("---\nkey: 5\ntitle: t\n---\n", 1, "status: required key is missing"),
    "bad status": ("---\nkey: 5\ntitle: t\nstatus: redy\n---\n", 4, "status: expected 'open', 'ready'"),
    "unknown key": ("---\nkey: 5\ntitle: t\nstatus: ready\nprioirty: 1\n---\n", 5, "did you mean 'priority'?"),
    "bad key": ("---\nkey: five\ntitle: t\nstatus: ready\n---\n", 2, "key: "),
    "a key of 5000 digits": (f"---\nkey: {'1' * 5000}\ntitle: t\nstatus: ready\n---\n", 2, "number too long to read"),
    "an octal key of 5000 digits": (f"---\nkey: 0{'1' * 5000}\ntitle: t\nstatus: ready\n---\n", 2, "below 2^63"),
    "nested 2000 levels": (f"---\nkey: 5\ntitle: {'[' * 2000}{']' * 2000}\nstatus: ready\n---\n", 3, "too deeply"),
    "a key given twice": (
        "---\nkey: 5\ntitle: t\nstatus: ready\npriority: 1\nstatus: done\n---\n",
        6,
        "the key 'status' is given twice (first at line 4)",
    ),
    "a body over the cap": (
        f"---\nkey: 5\ntitle: t\nstatus: ready\n---\n{'x' * 65_001}\n",
        6,
        "the body is 65,001 characters long; an issue's body is at most 65,000",
    ),
    "no front matter": ("# Fix the crash\n", 1, "expected the file to start with a '---' line"),
    "unclosed front matter": ("---\nkey: 5\ntitle: t\n", 1, "no closing '---' line"),
    "text before a heading": (
        f"---\nkey: 5\ntitle: t\nstatus: ready\n---\nbody\n\n{COMMENTS_MARKER}\n\nstray\n",
        10,
        "must be under a '### <author> · <time>' heading",
    ),
    "bad comment time": (
        f"---\nkey: 5\ntitle: t\nstatus: ready\n---\n{COMMENTS_MARKER}\n### bob · yesterday\nhi\n",
        7,
        "'yesterday' is not an ISO 8601 time",
    ),
    "empty comment": (
        f"---\nkey: 5\ntitle: t\nstatus: ready\n---\n{COMMENTS_MARKER}\n### bob · 2024-05-01T10:00:00Z\n\n",
        7,
        "this comment has no text",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_file_is_reported_with_its_line_and_the_others_still_list(tracker: LocalTracker, case: str) -> None:
    text, line, message = BROKEN[case]
    tracker.create("before")
    path = write(tracker, "0005-broken.md", text)
    tracker.create("after")  # key 6: the broken file's name still reserves 5

    listing = tracker.listing()
    assert [i.key for i in listing.issues] == ["1", "6"]
    [problem] = listing.problems
    assert (problem.path, problem.line) == (path, line)
    assert message in problem.message
    assert problem.render().startswith(f"{path}:{line}: ")

    with pytest.raises(IssueFileError) as caught:  # asking for that issue says what is wrong, not "not found"
        tracker.get("5")
    assert caught.value.message.startswith(f"{path}:{line}: ")
    assert caught.value.exit_code == 2


def test_a_body_of_the_cap_is_read_and_one_over_it_is_not_written(tracker: LocalTracker) -> None:
    # 64,000 characters of a caller's text, and room for the line beflow adds to an agent's follow-up.
    assert len(tracker.create("big", body="y" * 65_000).body) == 65_000

    with pytest.raises(UsageError, match="body: 65,001 characters; at most 65,000"):
        tracker.create("bigger", body="y" * 65_001)
    assert [i.title for i in tracker.listing().issues] == ["big"]


def test_a_file_that_is_not_utf8_is_reported(tracker: LocalTracker) -> None:
    tracker.directory.mkdir(parents=True)
    (tracker.directory / "0001-latin1.md").write_bytes(b"---\nkey: 1\ntitle: caf\xe9\nstatus: ready\n---\n")
    [problem] = tracker.listing().problems
    assert (problem.line, problem.message) == (3, "not UTF-8 text")


def test_two_files_with_the_same_key_report_the_second(tracker: LocalTracker) -> None:
    tracker.create("original")
    copy = write(tracker, "0001-zcopy.md", "---\nkey: 1\ntitle: copy\nstatus: ready\n---\n")
    listing = tracker.listing()
    assert [i.title for i in listing.issues] == ["original"]
    assert listing.problems[0].path == copy
    assert "is also the key of 0001-original.md" in listing.problems[0].message


def test_writing_to_a_broken_issue_changes_nothing(tracker: LocalTracker) -> None:
    path = write(tracker, "0001-broken.md", BROKEN["bad status"][0].replace("key: 5", "key: 1"))
    before = path.read_bytes()
    with pytest.raises(IssueFileError):
        tracker.comment("1", "hello", author="alice")
    assert path.read_bytes() == before


# --- writing -------------------------------------------------------------------------------------------------------


def test_set_status_enforces_the_transition_table(tracker: LocalTracker) -> None:
    issue = tracker.create("Fix it", status=Status.OPEN)
    with pytest.raises(UsageError, match="cannot go from open to in_progress"):
        tracker.set_status(issue.key, Status.IN_PROGRESS)
    assert tracker.get(issue.key).status == Status.OPEN
    moved = tracker.set_status(issue.key, Status.READY, note="Ready for agents.", author="alice")
    assert moved.status == Status.READY
    assert [(c.author, c.text) for c in moved.comments] == [("alice", "Ready for agents.")]


def test_setting_the_same_status_writes_nothing(tracker: LocalTracker) -> None:
    issue = tracker.create("Fix it")
    path = Path(str(issue.path))
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    assert tracker.set_status(issue.key, Status.READY) == tracker.get(issue.key)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_a_new_issue_is_open_or_ready(tracker: LocalTracker) -> None:
    with pytest.raises(UsageError, match="open or ready, not done"):
        tracker.create("x", status=Status.DONE)
    with pytest.raises(UsageError, match=r"title: .*must be one line"):
        tracker.create("two\nlines")


def test_two_processes_commenting_at_once_lose_no_comment(tracker: LocalTracker, project: Path) -> None:
    issue = tracker.create("Busy issue")
    code = """
        import sys
        from pathlib import Path
        from beflow.trackers.local import LocalTracker
        tracker = LocalTracker(Path(sys.argv[1]), Path(sys.argv[2]))
        for n in range(20):
            tracker.comment("1", f"{sys.argv[3]} {n}", author=sys.argv[3])
    """
    workers = [start_python(code, str(tracker.directory), str(project), name) for name in ("alice", "bob")]
    for worker in workers:
        assert worker.wait(timeout=120) == 0, worker.stderr.read() if worker.stderr else ""
    texts = [c.text for c in tracker.get(issue.key).comments]
    assert sorted(texts) == sorted(f"{who} {n}" for who in ("alice", "bob") for n in range(20))
    for who in ("alice", "bob"):  # each writer's comments stay in the order it wrote them
        assert [t for t in texts if t.startswith(who)] == [f"{who} {n}" for n in range(20)]


# --- claims --------------------------------------------------------------------------------------------------------

HOLDER = """
    import sys, time
    from pathlib import Path
    from beflow.trackers.local import LocalTracker
    from beflow.trackers.issue import Status
    tracker = LocalTracker(Path(sys.argv[1]), Path(sys.argv[2]))
    claim = tracker.claim(sys.argv[3], owner="worker")
    if len(sys.argv) > 4:
        tracker.set_status(sys.argv[3], Status(sys.argv[4]))
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder(tracker: LocalTracker, project: Path):
    """Start a process that claims an issue (and optionally sets a status) and holds it until killed."""
    started: list[subprocess.Popen[str]] = []

    def start(key: str, status: str | None = None) -> subprocess.Popen[str]:
        args = [str(tracker.directory), str(project), key, *([status] if status else [])]
        process = start_python(HOLDER, *args)
        started.append(process)
        assert process.stdout is not None
        assert process.stdout.readline() == "held\n", process.stderr.read() if process.stderr else ""
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_a_claim_is_exclusive_and_released_by_its_context(tracker: LocalTracker) -> None:
    issue = tracker.create("Fix it")
    with tracker.claim(issue.key, owner="run-1") as claim:
        assert tracker.holder(issue.key) == claim.info
        with pytest.raises(LockedError, match=rf"issue 1 is claimed by run-1 \(pid {os.getpid()} on "):
            tracker.claim(issue.key, owner="run-2")
        assert tracker.ready() == []
    assert claim.released and tracker.holder(issue.key) is None
    with tracker.claim(issue.key, owner="run-2"):
        pass


def test_a_claim_is_exclusive_across_processes_and_ends_when_its_holder_dies(tracker: LocalTracker, holder) -> None:
    issue = tracker.create("Fix it")
    process = holder(issue.key)
    info = tracker.holder(issue.key)
    assert info is not None and (info.owner, info.pid) == ("worker", process.pid)
    with pytest.raises(LockedError, match=rf"claimed by worker \(pid {process.pid} on "):
        tracker.claim(issue.key, owner="me")

    process.send_signal(signal.SIGKILL)
    process.wait()
    assert tracker.holder(issue.key) is None
    claim = tracker.claim(issue.key, owner="me")
    assert json.loads((tracker.project_dir / ".beflow" / "claims" / "1.json").read_text())["owner"] == "me"
    claim.release()
    assert not (tracker.project_dir / ".beflow" / "claims" / "1.json").exists()


def test_ready_skips_claimed_issues_and_orders_by_priority_then_age(tracker: LocalTracker, holder) -> None:
    tracker.create("normal, older")
    tracker.create("urgent", priority=0)
    tracker.create("not for agents yet", status=Status.OPEN)
    tracker.create("normal, newer")
    tracker.create("urgent but taken", priority=0)
    holder("5")
    assert [i.title for i in tracker.ready()] == ["urgent", "normal, older", "normal, newer"]


def test_an_issue_left_in_progress_by_a_killed_run_is_put_back_to_ready(tracker: LocalTracker, holder) -> None:
    tracker.create("killed run")
    tracker.create("live run")
    killed = holder("1", "in_progress")
    holder("2", "in_progress")
    assert tracker.orphaned() == []

    killed.kill()
    killed.wait()
    assert [i.key for i in tracker.orphaned()] == ["1"]
    [requeued] = requeue_orphans(tracker)
    assert requeued.status == Status.READY
    assert f"it was claimed by worker, pid {killed.pid}" in requeued.comments[-1].text
    assert [i.key for i in tracker.ready()] == ["1"]
    assert tracker.get("2").status == Status.IN_PROGRESS
    assert tracker.orphaned() == []


def test_claiming_an_unknown_issue_is_not_found(tracker: LocalTracker) -> None:
    with pytest.raises(NotFoundError):
        tracker.claim("9", owner="me")


def test_reading_creates_no_state(tracker: LocalTracker, project: Path) -> None:
    assert tracker.listing().issues == [] and tracker.ready() == [] and tracker.holder("1") is None
    assert [p.name for p in project.iterdir()] == [".git"]


@pytest.mark.parametrize(
    ("front", "message"),
    [
        ("labels: &l [a]\ntitle2: *l", ":5: invalid YAML in the front matter: anchors and aliases"),
        ("labels: *nowhere", ":5: invalid YAML in the front matter: anchors and aliases"),
        (
            "labels: " + "[" * 50 + "]" * 50,
            ":5: invalid YAML in the front matter: nested too deeply (more than 8 levels)",
        ),
        ("labels: [" + "a," * 40000 + "b]", ":2: the front matter is longer than 64 KiB"),
    ],
)
def test_front_matter_refuses_aliases_deep_nesting_and_bulk_with_the_line(front: str, message: str) -> None:
    text = f"---\nkey: 1\ntitle: t\nstatus: ready\n{front}\n---\nbody\n"
    with pytest.raises(IssueFileError) as caught:
        parse(Path("0001-t.md"), text)
    assert f"0001-t.md{message}" in caught.value.message


def test_an_issue_file_beyond_the_size_limit_is_a_problem_of_that_file(project: Path) -> None:
    tracker = LocalTracker(project / "issues", project)
    tracker.create(title="fine")
    (project / "issues" / "0002-big.md").write_text("---\nkey: 2\ntitle: big\nstatus: ready\n---\n" + "x" * (5 << 20))
    listing = tracker.listing()
    assert [i.title for i in listing.issues] == ["fine"]
    assert [p.message for p in listing.problems] == ["the file is larger than 4 MiB; beflow does not read it"]


def test_an_index_of_an_earlier_version_with_a_label_refused_now_is_rebuilt(project: Path) -> None:
    import sqlite3

    first = LocalTracker(project / ".beflow" / "issues", project)
    first.create("Labelled", labels=["bug"])
    db = sqlite3.connect(first._index.path)

    def trusted() -> bool:  # a file changed within the last second is parsed again, not trusted to its stamp
        assert first.listing().issues[0].labels == ["bug"]
        return db.execute("SELECT stamp FROM issues").fetchone()[0] != ""

    deadline = time.monotonic() + 10
    while not trusted():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with db:  # the row an earlier beflow wrote, its label allowed then (an escape sequence), its stamp still good
        (text,) = db.execute("SELECT issue FROM issues").fetchone()
        db.execute("UPDATE issues SET issue = ?", (text.replace('"bug"', '"a\\u001b[2Jb"'),))
        db.execute("UPDATE meta SET value = '2' WHERE name = 'version'")
    db.close()

    listing = LocalTracker(project / ".beflow" / "issues", project).listing()
    assert [i.labels for i in listing.issues] == [["bug"]] and listing.problems == []


# --- blockers ------------------------------------------------------------------------------------------------------


def test_blocked_by_reads_back_and_names_each_blocker_with_its_status(tracker: LocalTracker) -> None:
    first = tracker.create("first").key
    second = tracker.create("second").key
    path = write(
        tracker,
        "0003-third.md",
        """
        ---
        key: 3
        title: third
        status: ready
        blocked_by: [1, "#2", 9]
        ---
        """,
    )
    issue = tracker.get("3")
    assert issue.blocked_by == ["1", "2", "9"]
    assert parse(path, render(issue)).blocked_by == ["1", "2", "9"]  # (written back as it was read)
    tracker.set_status(first, Status.CLOSED)
    assert [tuple(b) for b in tracker.blockers(issue)] == [
        ("1", Status.CLOSED, False),
        (second, Status.READY, False),
        ("9", None, False),
    ]
    assert "blocked_by" not in render(tracker.get(first))  # a file without blockers reads as it always did


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("[x]", "blocked_by: expected issue keys (whole numbers, as in [3, 5]), not 'x'"),
        ("[0]", "blocked_by: expected issue keys"),
        ("{a: 1}", "blocked_by: "),
        ("[4]", "blocked_by: issue 4 cannot wait for itself"),
    ],
)
def test_a_blocked_by_that_is_not_issue_keys_names_the_file_line_and_field(
    tracker: LocalTracker, value: str, said: str
) -> None:
    path = write(tracker, "0004-x.md", f"---\nkey: 4\ntitle: x\nstatus: ready\nblocked_by: {value}\n---\n")
    listing = tracker.listing()
    assert listing.issues == []
    (problem,) = listing.problems
    assert (problem.path, problem.line) == (path, 5)
    assert said in problem.message
