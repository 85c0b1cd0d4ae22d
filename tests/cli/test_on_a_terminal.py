"""beflow on a real pseudo-terminal, as a person runs it: ``--auto`` and ``watch`` end cleanly (exit codes, what
the screen shows), Ctrl-C typed there stops them, and text from issues and agents cannot drive the terminal."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.support import terminal
from tests.support.projects import AutoProject
from tests.support.waiting import eventually


@pytest.fixture
def terminals() -> Iterator[list[terminal.Terminal]]:
    started: list[terminal.Terminal] = []
    yield started
    for term in started:
        term.close()


def start(project: AutoProject, terminals: list[terminal.Terminal], *args: str) -> terminal.Terminal:
    term = terminal.start("--config", str(project.config_path), *args, cwd=project.directory)
    terminals.append(term)
    return term


def test_auto_ends_cleanly_and_shows_the_outcome(
    auto_project: AutoProject, terminals: list[terminal.Terminal], no_leftover_processes: None
) -> None:
    key = auto_project.new_issue("write out.txt hi", title="write out")
    term = start(auto_project, terminals, "--auto", key)
    assert term.wait() == 0, term.text
    assert f"■ issue {key}: succeeded" in term.text
    assert "failed unexpectedly" not in term.text
    assert auto_project.only_record().outcome == "succeeded"
    assert auto_project.issue(key).status == Status.REVIEW


def test_auto_stopped_by_ctrl_c_exits_130_and_says_so(
    auto_project: AutoProject, terminals: list[terminal.Terminal], no_leftover_processes: None
) -> None:
    key = auto_project.new_issue("sleep 60", title="long")
    term = start(auto_project, terminals, "--auto", key)
    term.expect(rf"▶ issue {key}: run ")
    term.type("\x03")
    assert term.wait(timeout=30) == 130, term.text
    assert f"■ issue {key}: cancelled" in term.text
    assert "failed unexpectedly" not in term.text
    assert auto_project.only_record().outcome == "cancelled"
    assert auto_project.issue(key).status == Status.READY
    assert not list((Path(os.environ["BEFLOW_HOME"]) / "journal").glob("*.json"))  # the managed file put back


def elapsed_shown(text: str, key: str) -> set[int]:
    """The elapsed times the live view has drawn for issue ``key`` (its rows read ``KEY  [ATTEMPT]  12s  ...``)."""
    return {int(seconds) for seconds in re.findall(rf"(?m)^\s*{re.escape(key)}\s+(?:\d+\s+)?(\d+)s\b", text)}


@pytest.mark.parametrize("command", ["--auto", "watch"])
def test_the_live_view_ticks_while_the_agent_is_silent(
    auto_project: AutoProject, terminals: list[terminal.Terminal], command: str, no_leftover_processes: None
) -> None:
    # The agent says one thing, then nothing for a while: the view's elapsed time goes on counting regardless.
    key = auto_project.new_issue("say thinking", "sleep 7", "write out.txt hi", title="quiet")
    term = start(auto_project, terminals, *([command, key] if command == "--auto" else [command]))
    term.expect(r"thinking")
    silent_from = max(elapsed_shown(term.text, key), default=0)
    term.expect(rf"(?m)^\s*{re.escape(key)}\s+(?:\d+\s+)?{silent_from + 4}s\b", timeout=15)
    if command == "watch":
        term.expect(rf"finished\s+{key}\s+")
        term.type("\x03")
    assert term.wait(timeout=30) in (0, 130), term.text
    assert auto_project.only_record().outcome == "succeeded"


@pytest.mark.parametrize("command", ["--auto", "watch"])
def test_a_closed_terminal_stops_a_run_cleanly_with_no_crash_log(
    auto_project: AutoProject, terminals: list[terminal.Terminal], command: str, no_leftover_processes: None
) -> None:
    # Closing the window hangs the terminal up: the live view can no longer be drawn, nor taken down.
    key = auto_project.new_issue("sleep 60", title="long")
    term = start(auto_project, terminals, *([command, key] if command == "--auto" else [command]))
    eventually(auto_project.records, "the run started")  # at once: stopped before its worktree is made
    term.hang_up()
    assert term.wait(timeout=30) == 130
    assert not (Path(os.environ["BEFLOW_HOME"]) / "logs").exists()
    # Closed as it stopped, not left `running` for the next command to close.
    assert auto_project.only_record().outcome == "cancelled"
    assert auto_project.issue(key).status == Status.READY


def test_watch_runs_an_issue_and_ctrl_c_stops_it_cleanly(
    auto_project: AutoProject, terminals: list[terminal.Terminal], no_leftover_processes: None
) -> None:
    key = auto_project.new_issue("write out.txt hi", title="write out")
    term = start(auto_project, terminals, "watch")
    term.expect(rf"finished\s+{key}\s+.*outcome=succeeded")
    term.expect(r"Ctrl-C stops")
    term.type("\x03")
    assert term.wait(timeout=30) == 130, term.text
    assert "failed unexpectedly" not in term.text
    assert auto_project.only_record().outcome == "succeeded"
    assert auto_project.issue(key).status == Status.REVIEW
    assert not list((Path(os.environ["BEFLOW_HOME"]) / "journal").glob("*.json"))
    # The live view was put away: the cursor is shown again (rich hid it while the view was live).
    assert term.output.rfind(b"\x1b[?25h") > term.output.rfind(b"\x1b[?25l")


def test_watch_once_on_a_terminal_exits_0(
    auto_project: AutoProject, terminals: list[terminal.Terminal], no_leftover_processes: None
) -> None:
    key = auto_project.new_issue("write out.txt hi", title="write out")
    term = start(auto_project, terminals, "watch", "--once")
    assert term.wait() == 0, term.text
    assert "failed unexpectedly" not in term.text
    assert re.search(rf"finished\s+{key}\s+run=\S+, outcome=succeeded", term.text)
    assert auto_project.only_record().outcome == "succeeded"


def test_watch_lines_say_what_the_runs_used_in_words(
    auto_project: AutoProject, terminals: list[terminal.Terminal], no_leftover_processes: None
) -> None:
    key = auto_project.new_issue("usage 1234 200000 0.02 USD", "write out.txt hi", title="write out")
    term = start(auto_project, terminals, "watch", "--once")
    assert term.wait() == 0, term.text
    found = re.search(rf"finished\s+{key}\s+run=\S+, outcome=succeeded, reason=[^—]+ — (.*)", term.text)
    assert found, term.text
    assert found.group(1).rstrip() == (
        "used: context 1,234 of 200,000 tokens; cost 0.02 USD — the watch so far: 1,234 tokens, 0.02 USD over 1 run"
    )
    assert "{'" not in term.text and "watch_used=" not in term.text


#: What an issue, a comment or an agent may write to take over a terminal: an OSC 52 clipboard write, clear-screen,
#: a C1 CSI (U+009B, a CSI on its own) and a right-to-left override.
HOSTILE = "\x1b]52;c;c2VjcmV0\x07 \x1b[2J\x1b[H \x9b31m \u202ereversed"
#: How it is shown instead.
SHOWN = "^[]52;c;c2VjcmV0^G ^[[2J^[[H <U+009B>31m <U+202E>reversed"
#: Bytes that must never reach the terminal raw.
RAW = (b"\x1b]52", b"\x1b[2J", b"\x1b[H", "\x9b".encode(), "\u202e".encode())


def assert_nothing_raw(output: bytes) -> None:
    assert [raw for raw in RAW if raw in output] == []


def hostile_issue(project: AutoProject) -> str:
    key = project.tracker.create(title=f"title {HOSTILE}", body=f"body {HOSTILE}", labels=["ok"]).key
    project.tracker.comment(key, f"comment {HOSTILE}", author="mallory")
    return key


def test_issues_show_and_list_render_controls_visibly_on_a_terminal(
    auto_project: AutoProject, terminals: list[terminal.Terminal]
) -> None:
    key = hostile_issue(auto_project)
    term = start(auto_project, terminals, "issues", "show", key)
    assert term.wait() == 0, term.text
    assert_nothing_raw(term.output)
    for where in ("title", "body", "comment"):
        assert f"{where} {SHOWN}" in term.text

    term = start(auto_project, terminals, "issues", "list")
    assert term.wait() == 0, term.text
    assert_nothing_raw(term.output)
    assert "<U+202E>" in term.text


def test_issues_show_and_list_render_controls_visibly_in_a_pipe(auto_project: AutoProject) -> None:
    key = hostile_issue(auto_project)
    for args in (["issues", "show", key], ["issues", "list"]):
        done = subprocess.run(
            [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), *args],
            cwd=auto_project.directory,
            capture_output=True,
            check=True,
        )
        assert_nothing_raw(done.stdout)
        assert f"title {SHOWN}".encode() in done.stdout


def test_json_keeps_the_text_exact(auto_project: AutoProject) -> None:
    key = hostile_issue(auto_project)
    done = subprocess.run(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "issues", "show", key, "--json"],
        cwd=auto_project.directory,
        capture_output=True,
        check=True,
    )
    issue = json.loads(done.stdout)
    assert issue["title"] == f"title {HOSTILE}"
    assert issue["comments"][-1]["text"] == f"comment {HOSTILE}"
    assert b"\x1b" not in done.stdout  # JSON escapes it


def test_an_agents_words_are_shown_visibly_by_auto_and_runs_show(
    auto_project: AutoProject, terminals: list[terminal.Terminal]
) -> None:
    said = "done \\u001b]52;c;c2VjcmV0\\u0007 \\u001b[2J \\u202ereversed"
    key = auto_project.new_issue(f"say {said}", "write out.txt hi", f"say {said}", title=f"t {HOSTILE}")
    term = start(auto_project, terminals, "--auto", key)
    assert term.wait() == 0, term.text
    assert_nothing_raw(term.output)
    assert f"issue {key}: succeeded" in term.text

    run = auto_project.only_record().id
    assert "\x1b]52" in (auto_project.only_record().final_message or "")
    term = start(auto_project, terminals, "runs", "show", run)
    assert term.wait() == 0, term.text
    assert_nothing_raw(term.output)
    assert "done ^[]52;c;c2VjcmV0^G ^[[2J <U+202E>reversed" in term.text
    assert f"t {SHOWN}" in term.text
