"""beflow on a real pseudo-terminal, as a person runs it: ``--auto`` and ``watch`` end cleanly (exit codes, what
the screen shows), Ctrl-C typed there stops them, and text from issues and agents cannot drive the terminal."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from beflow.trackers import Status
from tests.support import terminal
from tests.support.projects import AutoProject


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
