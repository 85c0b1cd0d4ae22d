"""The local tracker's index is a cache, never the truth: held by another process (an exclusive transaction) or
read-only, beflow reads the issue files instead and never fails; a row edited in the index is never what a run
reads."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.faults.conftest import beflow_run
from tests.support.projects import AutoProject

#: Holds the index in an exclusive transaction until its stdin closes; says "held" once it has the lock.
HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
db.execute("UPDATE meta SET value = value")
print("held", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")
"""


def index_of(project: AutoProject) -> Path:
    return project.directory / ".beflow" / "tracker" / "index.sqlite"


@pytest.fixture
def held(auto_project: AutoProject) -> Iterator[subprocess.Popen[str]]:
    """The project's index (built by a first listing) held by another process, exclusively, for the whole test."""
    assert beflow_run(auto_project, "issues", "list").code == 0
    assert index_of(auto_project).exists()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(index_of(auto_project))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    yield holder
    holder.communicate("")


def test_a_held_index_lists_from_the_files(auto_project: AutoProject, held: subprocess.Popen[str]) -> None:
    first = auto_project.new_issue("say one", title="first")
    second = auto_project.new_issue("say two", title="second")  # (new files: the index would have to be written)
    started = time.monotonic()
    done = beflow_run(auto_project, "issues", "list")
    assert done.code == 0, done.stderr
    assert "locked" not in done.stderr
    assert "first" in done.stdout and "second" in done.stdout
    assert time.monotonic() - started < 15
    assert beflow_run(auto_project, "issues", "show", second).code == 0
    assert first


def test_watch_runs_an_issue_while_the_index_is_held(
    auto_project: AutoProject, no_leftover_processes: None, held: subprocess.Popen[str]
) -> None:
    key = auto_project.new_issue("write out.txt hi", title="write out")
    done = beflow_run(auto_project, "watch", "--once")
    assert done.code == 0, done.stderr
    assert "locked" not in done.stderr
    assert auto_project.only_record().outcome == "succeeded"
    assert auto_project.issue(key).status == Status.REVIEW


def test_a_read_only_index_is_left_alone_and_the_files_are_read(auto_project: AutoProject) -> None:
    assert beflow_run(auto_project, "issues", "list").code == 0
    index = index_of(auto_project)
    before = index.read_bytes()
    index.chmod(0o444)
    auto_project.new_issue("say two", title="second")
    done = beflow_run(auto_project, "issues", "list")
    assert done.code == 0, done.stderr
    assert "second" in done.stdout
    assert index.exists() and stat.S_IMODE(index.stat().st_mode) == 0o444
    assert index.read_bytes() == before
    assert os.access(index, os.R_OK)


def test_a_poisoned_index_row_is_never_what_a_run_or_issues_show_reads(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    """Another process of the user (an agent, say) rewrites an issue's row in the index and keeps its stamp: the
    run, and `issues show`, read the file."""
    key = auto_project.new_issue("write out.txt from the file", title="the file's title")
    # A stamp is trusted once the file is a moment old (its ctime): until then it is parsed anyway.
    path = next((auto_project.directory / ".beflow" / "issues").glob(f"{int(key):04d}-*.md"))
    deadline = time.monotonic() + 5
    while time.time_ns() - path.stat().st_ctime_ns <= 1_000_000_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert beflow_run(auto_project, "issues", "list").code == 0  # the row, under the file's stamp

    db = sqlite3.connect(index_of(auto_project), isolation_level=None)
    (text,) = db.execute("SELECT issue FROM issues WHERE key = ?", (int(key),)).fetchone()
    poisoned = json.loads(text)
    poisoned["title"] = "poisoned title"
    poisoned["body"] = "acp-test: write out.txt from the poisoned row"
    db.execute("UPDATE issues SET issue = ?, title = ? WHERE key = ?", (json.dumps(poisoned), "poisoned", int(key)))
    db.close()

    shown = beflow_run(auto_project, "issues", "show", key)
    assert shown.code == 0 and "the file's title" in shown.stdout and "poisoned" not in shown.stdout

    done = beflow_run(auto_project, "--auto", key)
    assert done.code == 0, done.stderr
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.title == "the file's title"
    assert auto_project.branch_files(record.branch or "")["out.txt"] == "from the file"
