"""``beflow issues ...``: every command's output and exit code, as a person and a script see them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import git


@pytest.fixture
def three(repo: Path, beflow) -> Path:
    """A repository with issues 1 (ready, bug, priority 1), 2 (open) and 3 (ready)."""
    assert beflow("issues", "new", "Fix the login crash", "--label", "bug", "--priority", "1").exit_code == 0
    assert beflow("issues", "new", "Add dark mode", "--status", "open").exit_code == 0
    assert beflow("issues", "new", "Speed up search", "--body", "It takes 3 s.").exit_code == 0
    return repo


def test_new_says_the_key_and_the_file(repo: Path, beflow) -> None:
    result = beflow("issues", "new", "Fix the login crash", "--label", "bug", "-l", "auth", "--priority", "1")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Created issue 1 (ready): .beflow/issues/0001-fix-the-login-crash.md\n"
    text = (repo / ".beflow" / "issues" / "0001-fix-the-login-crash.md").read_text()
    assert "labels: [bug, auth]\n" in text and "priority: 1\n" in text


def test_new_reads_the_body_from_a_file_or_stdin(repo: Path, beflow, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "crash.md").write_text("Steps:\n\n1. log in\n")
    assert beflow("issues", "new", "Crash", "--body-file", "crash.md").exit_code == 0
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("From stdin.\n"))
    assert beflow("issues", "new", "Other", "--body-file", "-", "--status", "open").exit_code == 0
    first = json.loads(beflow("issues", "show", "1", "--json").stdout)
    second = json.loads(beflow("issues", "show", "2", "--json").stdout)
    assert (first["body"], second["body"], second["status"]) == ("Steps:\n\n1. log in", "From stdin.", "open")


def test_new_refuses_bad_usage_and_changes_nothing(repo: Path, beflow) -> None:
    both = beflow("issues", "new", "X", "--body", "a", "--body-file", "README.md")
    assert (both.exit_code, both.stderr) == (2, "error: give --body or --body-file, not both\n")
    assert beflow("issues", "new", "X", "--status", "done").exit_code == 2
    assert beflow("issues", "new", "X", "--priority", "-1").exit_code == 2
    assert beflow("issues", "new", "X", "--body-file", "missing.md").exit_code == 2
    assert not (repo / ".beflow" / "issues").exists()


def on_disk(directory: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``directory``: its modification time and content; but SQLite's shared memory of the issue
    index, which any reader changes (``issues list`` too)."""
    files = [p for p in sorted(directory.rglob("*")) if p.is_file() and not p.name.endswith("-shm")]
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in files}


def test_outside_a_git_repository_no_issue_is_filed_and_nothing_is_written(tmp_path: Path, beflow, monkeypatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)

    result = beflow("issues", "new", "Fix the login crash")

    # As `beflow init` refuses there: exit 2, the same words, nothing on disk.
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: {plain} is not inside a git repository; nothing was written",
        f"fix: Make it one first: cd {plain} && git init && git add -A && git commit -m 'first commit'",
    ]
    assert list(plain.iterdir()) == []
    assert beflow("init").stderr == result.stderr


def test_outside_a_git_repository_the_issues_already_there_are_read_not_written(
    tmp_path: Path, beflow, monkeypatch
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    git(plain, "init", "-q")
    assert beflow("issues", "new", "Fix the login crash").exit_code == 0
    assert beflow("issues", "new", "Add dark mode", "--status", "open").exit_code == 0
    shutil.rmtree(plain / ".git")  # (a checkout whose .git went away: the issues stay)
    assert "Fix the login crash" in beflow("issues", "list").stdout
    before = on_disk(plain)

    for args in (
        ["new", "Speed up search"],
        ["comment", "1", "a comment"],
        ["close", "1"],
        ["reopen", "2"],
        ["set-status", "2", "ready"],
    ):
        result = beflow("issues", *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stderr.startswith(f"error: {plain} is not inside a git repository; nothing was written\n")
        assert on_disk(plain) == before, args
    assert beflow("issues", "show", "1").exit_code == 0


def test_list_shows_a_table_by_key(three: Path, beflow) -> None:
    result = beflow("issues", "list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["KEY", "STATUS", "PRI", "TITLE", "LABELS", "UPDATED", "(UTC)"]
    assert lines[2].split()[:7] == ["1", "ready", "1", "Fix", "the", "login", "crash"]
    assert "bug" in lines[2]
    assert lines[3].split()[:3] == ["2", "open", "2"]
    assert lines[4].split()[:3] == ["3", "ready", "2"]
    assert result.stderr == ""


def test_list_filters_and_says_when_nothing_matches(three: Path, beflow) -> None:
    ready = beflow("issues", "list", "--status", "ready", "--json")
    assert [i["key"] for i in json.loads(ready.stdout)["issues"]] == ["1", "3"]
    bugs = beflow("issues", "list", "--label", "bug", "--json")
    assert [i["title"] for i in json.loads(bugs.stdout)["issues"]] == ["Fix the login crash"]
    none = beflow("issues", "list", "--status", "done", "--label", "ui")
    assert (none.exit_code, none.stdout) == (0, "No issues with status done and label 'ui'.\n")
    assert beflow("issues", "list", "--status", "finished").exit_code == 2


def test_list_in_a_new_project_says_how_to_start(repo: Path, beflow) -> None:
    result = beflow("issues", "list")
    assert (result.exit_code, result.stdout) == (
        0,
        'No issues yet. File one with: beflow issues new "Fix the login crash"\n',
    )
    assert json.loads(beflow("issues", "list", "--json").stdout) == {"issues": [], "problems": []}


def test_list_json_is_every_field(three: Path, beflow) -> None:
    [first, *_] = json.loads(beflow("issues", "list", "--json").stdout)["issues"]
    assert set(first) == {"key", "title", "status", "labels", "priority", "created", "updated", "body", "comments",
                          "path", "url", "id", "blocked_by", "rank"}  # fmt: skip
    assert first["created"].endswith("Z") and first["url"].startswith("file://")


def test_a_broken_file_is_reported_and_the_others_still_list(three: Path, beflow) -> None:
    broken = three / ".beflow" / "issues" / "0002-add-dark-mode.md"
    broken.write_text(broken.read_text().replace("status: open", "status: opne"))
    result = beflow("issues", "list")
    assert result.exit_code == 0
    assert [line.split()[0] for line in result.stdout.splitlines()[2:]] == ["1", "3"]
    assert "warning: 1 problem in issue files (not listed):" in result.stderr
    assert f"{broken}:4: status: expected 'open', 'ready'" in result.stderr
    as_json = json.loads(beflow("issues", "list", "--json").stdout)
    assert as_json["problems"][0]["line"] == 4 and as_json["problems"][0]["path"] == str(broken)

    shown = beflow("issues", "show", "2")
    assert shown.exit_code == 2
    assert shown.stderr.startswith(f"error: {broken}:4: status: expected")
    assert "fix: Fix the file at that line" in shown.stderr


def test_show_prints_the_issue_with_its_comments(three: Path, beflow) -> None:
    assert beflow("issues", "comment", "3", "Profiling shows the index is rebuilt.").exit_code == 0
    result = beflow("issues", "show", "3")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "3 · Speed up search"
    assert lines[1] == "status: ready   priority: 2"
    assert lines[3] == "file: .beflow/issues/0003-speed-up-search.md"
    assert lines[5] == "It takes 3 s."
    assert lines[7] == "Comments (1)"
    assert lines[9].startswith("Test User · ") and lines[9].endswith(" UTC")
    assert lines[10] == "Profiling shows the index is rebuilt."


def test_show_json_has_the_comments_and_the_claim(three: Path, beflow) -> None:
    shown = json.loads(beflow("issues", "show", "#1", "--json").stdout)
    assert (shown["key"], shown["labels"], shown["comments"], shown["claim"]) == ("1", ["bug"], [], None)


def test_an_unknown_key_exits_1_and_names_close_keys(three: Path, beflow) -> None:
    for command in (["show", "13"], ["comment", "13", "hi"], ["close", "13"], ["reopen", "13"]):
        result = beflow("issues", *command)
        assert result.exit_code == 1, command
        assert "no issue 13" in result.stderr
        assert "did you mean: 3 (Speed up search), 1 (Fix the login crash)" in result.stderr
    by_title = beflow("issues", "show", "search")
    assert by_title.exit_code == 1 and "did you mean: 3 (Speed up search)" in by_title.stderr


def test_comment_uses_git_user_name_or_author(three: Path, beflow) -> None:
    result = beflow("issues", "comment", "1", "Seen on Safari too.")
    assert (result.exit_code, result.stdout) == (0, "Commented on issue 1 as Test User.\n")
    named = beflow("issues", "comment", "1", "Confirmed.", "--author", "QA bot", "--json")
    assert json.loads(named.stdout)["comment"]["author"] == "QA bot"
    authors = [c["author"] for c in json.loads(beflow("issues", "show", "1", "--json").stdout)["comments"]]
    assert authors == ["Test User", "QA bot"]


def test_rework_on_an_issue_not_yet_in_review_says_so_and_leaves_it_where_it_is(three: Path, beflow) -> None:
    result = beflow("issues", "comment", "2", "Also the high-contrast theme.", "--rework")
    assert result.exit_code == 0
    assert result.stdout == (
        "Asked for rework on issue 2 as Test User. It is open, not in review: its first review round will answer it.\n"
    )
    assert json.loads(beflow("issues", "show", "2", "--json").stdout)["status"] == "open"


def test_close_and_reopen(three: Path, beflow) -> None:
    closed = beflow("issues", "close", "1", "--note", "Duplicate of 3.")
    assert (closed.exit_code, closed.stdout) == (0, "Issue 1 (Fix the login crash): ready → closed\n")
    again = beflow("issues", "close", "1")
    assert (again.exit_code, again.stdout) == (0, "Issue 1 is already closed; nothing changed.\n")
    reopened = beflow("issues", "reopen", "1", "--json")
    assert json.loads(reopened.stdout) == {
        "key": "1",
        "title": "Fix the login crash",
        "previous": "closed",
        "status": "ready",
        "changed": True,
    }
    shown = json.loads(beflow("issues", "show", "1", "--json").stdout)
    assert [c["text"] for c in shown["comments"]] == ["Duplicate of 3."]


def test_set_status_follows_the_transition_table(three: Path, beflow) -> None:
    moved = beflow("issues", "set-status", "2", "ready")
    assert (moved.exit_code, moved.stdout) == (0, "Issue 2 (Add dark mode): open → ready\n")
    refused = beflow("issues", "set-status", "2", "done")
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[0] == (
        "error: issue 2: cannot go from ready to done (from ready it can go to: open, in_progress, closed)"
    )


def test_set_priority_moves_an_issue_in_the_queue(three: Path, beflow) -> None:
    moved = beflow("issues", "set-priority", "2", "0")
    assert (moved.exit_code, moved.stdout) == (0, "Issue 2 (Add dark mode): priority 2 → 0\n")
    again = beflow("issues", "set-priority", "2", "0", "--json")
    assert json.loads(again.stdout) == {"key": "2", "title": "Add dark mode", "previous": 0, "priority": 0}
    refused = beflow("issues", "set-priority", "2", "-1")
    assert refused.exit_code == 2 and "PRIORITY" in refused.stderr


def test_every_command_has_help_with_an_example(repo: Path, beflow) -> None:
    for command in (
        [],
        ["list"],
        ["show"],
        ["new"],
        ["comment"],
        ["close"],
        ["reopen"],
        ["set-status"],
        ["set-priority"],
    ):
        result = beflow("issues", *command, "--help")
        assert result.exit_code == 0, command
        assert "Example:  beflow issues" in result.stdout, command


def test_two_beflow_processes_filing_issues_at_once_get_distinct_keys(repo: Path, beflow_process, beflow) -> None:
    processes = [beflow_process("issues", "new", f"issue {n}", cwd=repo) for n in range(6)]
    outputs = [p.communicate(timeout=120) for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs
    keys = sorted(int(out.split()[2]) for out, _ in outputs)
    assert keys == [1, 2, 3, 4, 5, 6]
    assert json.loads(beflow("issues", "list", "--json").stdout)["problems"] == []


def test_list_on_an_80_column_pipe_wraps_no_title(repo: Path, beflow, monkeypatch: pytest.MonkeyPatch) -> None:
    title = "Document ensure_str and ensure_text in the README, with an example for each"
    assert beflow("issues", "new", title, "--label", "docs").exit_code == 0
    monkeypatch.setenv("COLUMNS", "80")

    lines = beflow("issues", "list").stdout.splitlines()

    (row,) = [line for line in lines if line.lstrip().startswith("1 ")]
    assert title in row and "docs" in row
    assert len(lines) == 3  # the header, its rule, the issue


def test_list_writes_its_rows_without_building_an_issue(three: Path, beflow, monkeypatch: pytest.MonkeyPatch) -> None:
    """`issues list` streams from the tracker's index: 100k issues list in constant memory."""
    monkeypatch.setattr("beflow.trackers.local_files.RACY_NS", -(10**12))  # (files just written are trusted at once)
    table, listing = beflow("issues", "list").stdout, beflow("issues", "list", "--json").stdout
    from beflow.trackers.issue import Issue

    monkeypatch.setattr(Issue, "model_validate_json", lambda *a, **k: pytest.fail("an issue was built"))
    monkeypatch.setattr(Issue, "__init__", lambda *a, **k: pytest.fail("an issue was built"))
    monkeypatch.setattr("rich.table.Table.add_row", lambda *a, **k: pytest.fail("a table held in memory"))
    assert beflow("issues", "list").stdout == table
    assert beflow("issues", "list", "--json").stdout == listing
    assert [i["key"] for i in json.loads(listing)["issues"]] == ["1", "2", "3"]


def test_new_does_not_ask_git_who_the_user_is(repo: Path, beflow, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of a new issue names who filed it (a comment does): `issues new` starts no git process for it."""
    monkeypatch.setattr(
        "beflow.repository.authors.user_name", lambda *a, **k: pytest.fail("asked git for the user's name")
    )
    result = beflow("issues", "new", "Fix the login crash")
    assert result.exit_code == 0, result.stderr


def test_bad_values_are_named_by_operation_and_field_and_change_nothing(repo: Path, beflow) -> None:
    """The CLI's typed calls explain bad values exactly as the MCP server's callers see them."""
    cases = {
        ("issues", "new", "   "): 'error: issue.new: title: expected at least 1 character (got "   ")\n',
        ("issues", "new", "X", "--priority", "1001"): "error: issue.new: priority: expected a number of at most 1000 "
        "(got 1001)\n",
        ("issues", "list", "--label", "x" * 101): "error: issue.list: label: expected at most 100 characters "
        f'(got "{"x" * 78}…)\n',
        ("issues", "show", " "): 'error: issue.show: key: expected at least 1 character (got " ")\n',
        ("issues", "comment", "1", " "): 'error: issue.comment: text: expected at least 1 character (got " ")\n',
        ("runs", "show", " "): 'error: run.show: id: expected at least 1 character (got " ")\n',
    }
    for argv, stderr in cases.items():
        result = beflow(*argv)
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", stderr), argv
    assert not (repo / ".beflow" / "issues").exists()


def test_list_says_why_a_ready_issue_is_held_for_its_blockers(three: Path, beflow) -> None:
    path = next((three / ".beflow" / "issues").glob("0003-*.md"))
    path.write_text(path.read_text().replace("priority: 2", "priority: 2\nblocked_by: [1, 2]"))
    lines = beflow("issues", "list").stdout.splitlines()
    assert lines[4].split()[:2] == ["3", "ready"]
    assert "· blocked by 1 (ready), 2 (open)" in lines[4]
    assert "blocked" not in lines[2] + lines[3]
    listed = json.loads(beflow("issues", "list", "--json").stdout)["issues"]
    assert [i["blocked_by"] for i in listed] == [[], [], ["1", "2"]]


def test_review_shows_the_branch_and_comments_a_line_or_the_whole_change_through_the_registry(
    repo: Path, beflow
) -> None:
    from tests.ops.test_reviews import in_review

    in_review(repo)
    shown = beflow("issues", "review", "1")
    assert shown.exit_code == 0, shown.stderr
    assert "beflow/1 at " in shown.stdout and "app.py  modified  +2 -1" in shown.stdout
    said = beflow("issues", "review", "1", "rename \x1b[31mvalue", "--path", "app.py", "--line", "3", "--author", "ann")
    assert (said.exit_code, said.stdout) == (0, "comment 1 on issue 1: the next review round answers it.\n")
    assert beflow("issues", "review", "1", "and the whole change", "--json").exit_code == 0
    view = json.loads(beflow("issues", "review", "1", "--json").stdout)
    first, whole = view["comments"]
    assert (first["author"], first["path"], first["line"], whole["path"]) == ("ann", "app.py", 3, None)
    text = beflow("issues", "review", "1").stdout
    assert "ann · " in text and "on app.py:3" in text and "waiting for a review round" in text
    assert "\x1b" not in text  # (a terminal escape in a comment is shown, never acted on)
    # Refused as the API refuses, nothing kept: a line the diff does not show, a line without its text, no such file.
    assert beflow("issues", "review", "1", "x", "--path", "app.py", "--line", "99").exit_code == 2
    assert beflow("issues", "review", "1", "--path", "app.py").exit_code == 2
    missing = beflow("issues", "review", "1", "x", "--path", "nope.py")
    assert missing.exit_code != 0 and "does not change 'nope.py'" in missing.stderr
    assert beflow("issues", "review", "2", "not in review").exit_code != 0
    assert len(json.loads(beflow("issues", "review", "1", "--json").stdout)["comments"]) == 2
