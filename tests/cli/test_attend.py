"""``beflow --attend KEY`` at a real terminal: acpx's permission prompt is answered by the person, the managed
``.acpxrc.json`` is put back byte for byte (after Ctrl-C and a closed terminal too), one attended run per
checkout, and the record and the tracker say what happened."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.support import terminal
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

#: A prior .acpxrc.json that is not JSON and not UTF-8: only an exact restore gets it back.
ODD_PRIOR = b'{"defaultAgent": "x",\n  // a comment acpx would choke on\n\xff\xfe trailing\r\n'


@pytest.fixture
def attended(auto_project: AutoProject) -> Iterator[AutoProject]:
    """The project with an odd prior ``.acpxrc.json`` (mode 0640) and the terminals its test starts."""
    target = auto_project.directory / ".acpxrc.json"
    target.write_bytes(ODD_PRIOR)
    target.chmod(0o640)
    yield auto_project


@pytest.fixture
def terminals() -> Iterator[list[terminal.Terminal]]:
    started: list[terminal.Terminal] = []
    yield started
    for term in started:
        term.close()


def attend(project: AutoProject, key: str, terminals: list[terminal.Terminal], **env: str) -> terminal.Terminal:
    term = terminal.start("--attend", key, cwd=project.directory, env=env)
    terminals.append(term)
    return term


def assert_prior_restored(project: AutoProject) -> None:
    target = project.directory / ".acpxrc.json"
    assert target.read_bytes() == ODD_PRIOR
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def wait_for_prompt_turn(record: Path, timeout: float = 30.0) -> None:
    """Until the test agent has received its prompt (it then sleeps, and acpx waits for it)."""
    eventually(
        lambda: (
            record.exists()
            and any(json.loads(line)["method"] == "session/prompt" for line in record.read_text().splitlines())
        ),
        "the agent got its prompt",
        timeout,
    )


def test_the_person_answers_the_permission_prompt_and_the_agent_goes_on(
    attended: AutoProject, terminals: list[terminal.Terminal], no_leftover_processes: None
) -> None:
    key = attended.new_issue("ask out.txt written with permission", "mcp", title="write out.txt")
    term = attend(attended, key, terminals)

    term.expect(r"\[permission\] Allow Write out\.txt \[edit\]\? \(y/N\)")
    # While the run is live, acpx reads the injected servers from the checkout's .acpxrc.json.
    live = json.loads((attended.directory / ".acpxrc.json").read_text())
    assert [s["name"] for s in live["mcpServers"]] == ["docs", "tools"]
    term.type("y\r")

    assert term.wait() == 0
    assert (attended.directory / "out.txt").read_text() == "written with permission"
    assert "permission granted: wrote out.txt" in term.text
    assert "mcp servers: docs, tools" in term.text
    assert_prior_restored(attended)

    record = attended.only_record()
    assert (record.mode, record.outcome, record.exit_code) == ("attend", "succeeded", 0)
    assert record.checkout == str(attended.directory)
    assert record.branch is None and record.commit is None
    assert record.changed_files == ["A\tout.txt"]
    # Uncommitted before the run (the project's own files and the prior .acpxrc.json): never the agent's.
    assert record.dirty_before == ["?\t.acpxrc.json", "?\t.beflow/config.json", "?\t.mcp.json"]
    assert record.mcp_servers == ["docs", "tools"]
    assert record.restored == [f"restored {attended.directory / '.acpxrc.json'} to its content before the run"]
    assert attended.secrets_in_records() == []

    issue = attended.issue(key)
    assert issue.status == Status.REVIEW
    assert "**succeeded**" in issue.comments[-1].text
    assert "files changed (1): `out.txt`" in issue.comments[-1].text
    assert "attend session in the checkout" in issue.comments[-1].text


def test_nothing_is_committed(attended: AutoProject, terminals: list[terminal.Terminal]) -> None:
    head = (attended.directory / ".git" / "HEAD").read_text()
    key = attended.new_issue("write out.txt hi")
    assert attend(attended, key, terminals).wait() == 0
    assert attended.branches() == ["main"]
    assert (attended.directory / ".git" / "HEAD").read_text() == head
    assert "A\tout.txt" in attended.only_record().changed_files


def test_a_denied_permission_writes_nothing(attended: AutoProject, terminals: list[terminal.Terminal]) -> None:
    key = attended.new_issue("ask out.txt nope")
    term = attend(attended, key, terminals)
    term.expect(r"\(y/N\)")
    term.type("n\r")
    assert term.wait() == 0  # the person's decision, not a failed run
    assert "permission denied: out.txt not written" in term.text
    assert not (attended.directory / "out.txt").exists()
    assert_prior_restored(attended)
    record = attended.only_record()
    assert (record.outcome, record.exit_code, record.changed_files) == ("no_changes", 5, [])
    assert "a permission it asked for was denied (attend.permissions: approve-reads)" in (record.stop_reason or "")
    assert attended.issue(key).status == Status.REVIEW


def test_the_terminal_is_warned_when_acpxrc_is_not_ignored(
    attended: AutoProject, terminals: list[terminal.Terminal]
) -> None:
    key = attended.new_issue("say hello")
    term = attend(attended, key, terminals)
    assert term.wait() == 0
    assert f"{attended.directory / '.acpxrc.json'} is not git-ignored" in term.text
    assert f"add this line to {attended.directory / '.gitignore'}:\n    .acpxrc.json\n" in term.text


def test_no_warning_once_acpxrc_is_ignored(attended: AutoProject, terminals: list[terminal.Terminal]) -> None:
    (attended.directory / ".gitignore").write_text(".acpxrc.json\n")
    key = attended.new_issue("say hello")
    term = attend(attended, key, terminals)
    assert term.wait() == 0
    assert "git-ignored" not in term.text


@pytest.mark.parametrize("stop", ["ctrl-c", "hang-up"])
def test_stopping_mid_run_restores_acpxrc_and_leaves_no_process(
    attended: AutoProject,
    terminals: list[terminal.Terminal],
    tmp_path: Path,
    stop: str,
    no_leftover_processes: None,
) -> None:
    agent_log = tmp_path / "agent.jsonl"
    key = attended.new_issue("sleep 60", "write late.txt too late")
    term = attend(attended, key, terminals, ACP_TEST_RECORD=str(agent_log))
    wait_for_prompt_turn(agent_log)
    assert b"mcpServers" in (attended.directory / ".acpxrc.json").read_bytes()

    if stop == "ctrl-c":
        term.type("\x03")
        assert term.wait(timeout=30) == 130
        assert "interrupted by SIGINT" in term.text
    else:
        term.hang_up()
        assert term.wait(timeout=30) == 130

    assert_prior_restored(attended)
    assert not (attended.directory / "late.txt").exists()
    record = attended.only_record()
    assert record.outcome == "cancelled"
    assert record.stop_reason == f"cancelled by {'SIGINT' if stop == 'ctrl-c' else 'SIGHUP'}"
    assert attended.issue(key).status == Status.READY  # back in the queue
    assert not list((Path(os.environ["BEFLOW_HOME"]) / "journal").glob("*.json"))


def test_an_open_issue_tried_by_hand_and_stopped_stays_open(
    attended: AutoProject, terminals: list[terminal.Terminal], tmp_path: Path
) -> None:
    """Stopping an attended session leaves the issue where it was: an `open` issue does not join the queue of
    unattended runs because someone tried it by hand."""
    agent_log = tmp_path / "agent.jsonl"
    key = attended.new_issue("sleep 60", status=Status.OPEN)
    term = attend(attended, key, terminals, ACP_TEST_RECORD=str(agent_log))
    wait_for_prompt_turn(agent_log)

    term.type("\x03")

    assert term.wait(timeout=30) == 130
    assert attended.only_record().outcome == "cancelled"
    assert attended.issue(key).status == Status.OPEN
    assert_prior_restored(attended)


def test_a_second_attended_run_in_the_checkout_refuses_at_once(
    attended: AutoProject, terminals: list[terminal.Terminal], tmp_path: Path, beflow
) -> None:
    agent_log = tmp_path / "agent.jsonl"
    first = attended.new_issue("sleep 60", title="first")
    second = attended.new_issue("write second.txt no", title="second")
    term = attend(attended, first, terminals, ACP_TEST_RECORD=str(agent_log))
    wait_for_prompt_turn(agent_log)

    started = time.monotonic()
    result = beflow("--attend", second)
    assert time.monotonic() - started < 5
    assert result.exit_code == 1
    assert f"an attended run is already going on in {attended.directory}: issue {first} (run " in result.stderr
    assert "one attended run per checkout at a time" in result.stderr
    assert attended.issue(second).status == Status.READY  # nothing changed for the refused run
    assert [r.issue for r in attended.records()] == [first]

    term.type("\x03")
    assert term.wait(timeout=30) == 130
    assert_prior_restored(attended)


def test_a_closed_issue_is_not_attended(auto_project: AutoProject, beflow) -> None:
    key = auto_project.new_issue("say hi")
    auto_project.tracker.set_status(key, Status.CLOSED)
    result = beflow("--attend", key)
    assert result.exit_code == 1
    assert f"issue {key} is closed" in result.stderr
    assert auto_project.records() == []


def test_a_broken_mcp_file_stops_before_anything_changes(auto_project: AutoProject, beflow) -> None:
    (auto_project.directory / ".mcp.json").write_text('{"mcpServers": {"bad": {"type": "stdio"}}}')
    key = auto_project.new_issue("say hi")
    result = beflow("--attend", key)
    assert result.exit_code == 2
    assert ".mcp.json" in result.stderr and "bad" in result.stderr
    assert auto_project.issue(key).status == Status.READY
    assert auto_project.records() == []
    assert not (auto_project.directory / ".acpxrc.json").exists()


def test_attend_permissions_in_config_decide_what_is_asked(
    attended: AutoProject, terminals: list[terminal.Terminal]
) -> None:
    attended.configure(attend={"permissions": "approve-all"})
    key = attended.new_issue("ask out.txt no prompt needed")
    term = attend(attended, key, terminals)
    assert term.wait() == 0
    assert "(y/N)" not in term.text
    assert (attended.directory / "out.txt").read_text() == "no prompt needed"
    assert "permissions: approve-all" in term.text


def test_without_a_terminal_beflow_says_nobody_can_be_asked(attended: AutoProject, beflow_process) -> None:
    key = attended.new_issue("ask out.txt nobody to ask")
    process = beflow_process("--attend", key, cwd=attended.directory)
    _, stderr = process.communicate(timeout=60)
    assert "stdin or stderr is not a terminal: acpx cannot ask you" in stderr
    assert not (attended.directory / "out.txt").exists()
    assert_prior_restored(attended)
    assert attended.only_record().exit_code == 5


def test_an_agent_that_commits_everything_in_the_checkout_leaves_the_injected_file_out(
    attended: AutoProject, terminals: list[terminal.Terminal]
) -> None:
    key = attended.new_issue("write out.txt hi", "run git add -A && git commit -q -m agent")
    assert attend(attended, key, terminals).wait() == 0
    committed = attended.branch_files("main")
    assert "out.txt" in committed and ".acpxrc.json" not in committed
    assert_prior_restored(attended)
    assert (attended.directory / ".git" / "info" / "exclude").read_text().count("acpxrc") == 0


def test_an_agent_that_is_not_logged_in_is_named_as_the_cause_in_the_record_and_on_the_issue(
    attended: AutoProject, beflow_process
) -> None:
    """acpx says why on the terminal only; beflow starts the agent again to say it in the record too."""
    key = attended.new_issue("say never")
    process = beflow_process("--attend", key, cwd=attended.directory, env={"ACP_TEST_AUTH": "required"})
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == 1
    record = attended.only_record()
    assert record.outcome == "failed"
    assert (record.stop_reason or "").startswith("acpx exit 1: ")
    assert "is not logged in: Authentication required. Fix: Log in with the agent's own command" in (
        record.stop_reason or ""
    )
    assert "is not logged in: Authentication required" in stderr
    assert "is not logged in: Authentication required" in attended.issue(key).comments[-1].text
    assert_prior_restored(attended)


def test_a_nul_byte_in_the_issue_is_replaced_and_the_session_runs(attended: AutoProject, beflow_process) -> None:
    key = attended.tracker.create(title="nul", body="acp-test: say hello\nbad \x00 byte", status=Status.READY).key
    process = beflow_process("--attend", key, cwd=attended.directory)
    _, stderr = process.communicate(timeout=60)

    assert process.returncode == 0, stderr
    assert "failed unexpectedly" not in stderr
    assert attended.only_record().outcome == "no_changes"
    assert attended.issue(key).status == Status.REVIEW
    assert_prior_restored(attended)


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` that nobody (root included) can create files in: immutable for root, mode 0555 otherwise."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(directory)], check=True)
        undo = ["chattr", "-i", str(directory)]
    else:
        directory.chmod(0o555)
        undo = ["chmod", "755", str(directory)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


def test_a_read_only_checkout_is_refused_before_anything_is_written(
    attended: AutoProject, beflow, isolated_home: Path
) -> None:
    key = attended.new_issue("say hello")
    (attended.directory / ".beflow" / "runs").mkdir(exist_ok=True)

    with read_only(attended.directory):
        result = beflow("--attend", key)

    assert result.exit_code == 2, result.stderr
    assert f"--attend cannot run here: {attended.directory} is read-only" in result.stderr
    assert "nothing was changed" in result.stderr
    assert attended.records() == []
    assert attended.issue(key).status == Status.READY
    assert not list((isolated_home / "journal").glob("*"))
    assert_prior_restored(attended)
    # And once it is writable again, the same command works, with nothing to restore first.
    assert "restore" not in beflow("--attend", key).stderr
