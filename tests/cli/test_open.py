"""``beflow --open KEY``: the agent's native client, started in the checkout with the issue's prompt.

The real clients need accounts and the network; stand-ins with their names on PATH record the argv, the cwd and
what they found, and exit with a chosen code.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from beflow.trackers import Status
from tests.support import terminal
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

#: A native client stand-in: records what it was given and what it found, then exits with $STANDIN_EXIT.
STANDIN = """#!{python}
import hashlib, json, os, signal, sys, time
acpxrc = ".acpxrc.json"
seen = {{
    "name": os.path.basename(sys.argv[0]),
    "args": sys.argv[1:],
    "cwd": os.getcwd(),
    "acpxrc": hashlib.sha256(open(acpxrc, "rb").read()).hexdigest() if os.path.exists(acpxrc) else None,
    "sigint_ignored": signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
}}
with open(os.environ["STANDIN_LOG"], "a") as log:
    log.write(json.dumps(seen) + "\\n")
if os.environ.get("STANDIN_WRITE"):
    open(os.environ["STANDIN_WRITE"], "w").write("written by the client\\n")
time.sleep(float(os.environ.get("STANDIN_SLEEP", "0")))
sys.exit(int(os.environ.get("STANDIN_EXIT", "0")))
"""

CLIENTS = ["claude", "codex", "gemini", "opencode", "cursor-agent", "my-client"]


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin directory of stand-in clients, first on PATH; their log is ``standins.jsonl`` beside it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in CLIENTS:
        path = bin_dir / name
        path.write_text(STANDIN.format(python=sys.executable))
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "standins.jsonl"))
    return tmp_path / "standins.jsonl"


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def project(auto_project: AutoProject) -> AutoProject:
    """MCP injection is on (auto_project enables it): --open must still leave .acpxrc.json alone."""
    return auto_project


@pytest.mark.parametrize(
    ("agent", "client", "before_prompt"),
    [
        ("claude", "claude", []),
        ("codex", "codex", []),
        ("gemini", "gemini", ["-i"]),
        ("opencode", "opencode", ["--prompt"]),
        ("cursor", "cursor-agent", []),
    ],
)
def test_the_native_client_gets_the_prompt_in_the_checkout(
    project: AutoProject, standins: Path, beflow, agent: str, client: str, before_prompt: list[str]
) -> None:
    project.configure(agent=agent)
    key = project.new_issue("say hi", title="Fix the parser")

    result = beflow("--open", key)

    assert result.exit_code == 0, result.stderr
    (call,) = calls(standins)
    assert call["name"] == client
    assert call["args"][:-1] == before_prompt
    prompt = call["args"][-1]
    assert prompt.startswith(f"You are working on issue {key} of this repository")
    assert "# Fix the parser" in prompt and "acp-test: say hi" in prompt
    assert "a person is with you" in prompt and "beflow commits" not in prompt
    assert call["cwd"] == str(project.directory)
    assert call["acpxrc"] is None  # nothing injected, even with mcp.enabled
    assert not (project.directory / ".acpxrc.json").exists()


def test_beflow_exits_with_the_clients_exit_code(
    project: AutoProject, standins: Path, beflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.configure(agent="claude")
    key = project.new_issue("say hi")
    monkeypatch.setenv("STANDIN_EXIT", "3")
    result = beflow("--open", key)
    assert result.exit_code == 3
    record = project.only_record()
    assert (record.mode, record.outcome, record.exit_code, record.client) == ("open", "failed", 3, "claude")
    assert record.stop_reason == "the claude session ended (exit 3)"
    assert project.issue(key).status == Status.READY  # back where it was


def test_an_existing_acpxrc_is_left_byte_for_byte(project: AutoProject, standins: Path, beflow) -> None:
    prior = b'{"odd":\n// not json \xff\r\n'
    target = project.directory / ".acpxrc.json"
    target.write_bytes(prior)
    target.chmod(0o640)
    mtime = target.stat().st_mtime_ns
    project.configure(agent="codex")
    key = project.new_issue("say hi")

    assert beflow("--open", key).exit_code == 0

    (call,) = calls(standins)
    assert call["acpxrc"] == hashlib.sha256(prior).hexdigest()  # what the client saw
    assert target.read_bytes() == prior
    assert (target.stat().st_mode & 0o777, target.stat().st_mtime_ns) == (0o640, mtime)


def test_the_start_is_recorded_and_the_tracker_follows_the_session(
    project: AutoProject, standins: Path, beflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.configure(agent="gemini")
    key = project.new_issue("say hi")
    monkeypatch.setenv("STANDIN_WRITE", "fix.py")

    assert beflow("--open", key).exit_code == 0

    record = project.only_record()
    assert (record.mode, record.outcome, record.exit_code, record.client) == ("open", "succeeded", 0, "gemini")
    assert record.checkout == str(project.directory)
    assert record.changed_files == ["A\tfix.py"]
    assert record.mcp_servers == []
    assert (project.run_dir(record) / "prompt.md").read_text().startswith(f"You are working on issue {key} ")
    issue = project.issue(key)
    assert issue.status == Status.REVIEW
    started, ended = issue.comments[-2:]
    assert started.text == f"beflow --open: a supervised `gemini` session started in the checkout (run `{record.id}`)."
    assert "**succeeded**" in ended.text and "`fix.py`" in ended.text


def test_a_session_that_changed_nothing_puts_the_issue_back(project: AutoProject, standins: Path, beflow) -> None:
    project.configure(agent="claude")
    key = project.new_issue("say hi", status=Status.OPEN)
    assert beflow("--open", key).exit_code == 0
    assert project.only_record().outcome == "no_changes"
    assert project.issue(key).status == Status.OPEN


def test_open_in_config_replaces_the_built_in_argv(project: AutoProject, standins: Path, beflow) -> None:
    project.configure(agent="claude", open={"claude": ["my-client", "--resume", "--message=Issue: {prompt}"]})
    key = project.new_issue("say hi", title="Tune it")
    assert beflow("--open", key).exit_code == 0
    (call,) = calls(standins)
    assert call["name"] == "my-client"
    assert call["args"][0] == "--resume"
    assert call["args"][1].startswith(f"--message=Issue: You are working on issue {key}")


def test_a_raw_agent_command_without_open_entry_is_a_config_error(project: AutoProject, standins: Path, beflow) -> None:
    key = project.new_issue("say hi")  # auto_project's agent is the raw test agent command
    result = beflow("--open", key)
    assert result.exit_code == 2
    assert "raw ACP command" in result.stderr and '"open": {"default"' in result.stderr
    assert calls(standins) == [] and project.records() == []


def test_a_missing_client_says_how_to_install_it_and_changes_nothing(
    project: AutoProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, beflow
) -> None:
    only_git = tmp_path / "only-git"
    only_git.mkdir()
    (only_git / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(only_git))
    project.configure(agent="claude")
    key = project.new_issue("say hi")

    result = beflow("--open", key)

    assert result.exit_code == 1
    assert "error: claude: the native client of agent 'claude' is not installed (not found on PATH)" in result.stderr
    assert "fix: Install it: npm install -g @anthropic-ai/claude-code" in result.stderr
    assert project.records() == []
    assert project.issue(key).status == Status.READY


def test_the_client_does_not_inherit_an_ignored_sigint(project: AutoProject, standins: Path, beflow) -> None:
    """beflow waits through SIGINT itself without passing SIG_IGN on: the client handles Ctrl-C as usual."""
    project.configure(agent="claude")
    key = project.new_issue("say hi")
    assert beflow("--open", key).exit_code == 0
    (call,) = calls(standins)
    assert call["sigint_ignored"] is False


def test_ctrl_c_at_the_terminal_is_the_clients_and_beflow_hands_back_its_end(
    project: AutoProject, standins: Path, no_leftover_processes: None
) -> None:
    project.configure(agent="claude")
    key = project.new_issue("say hi")
    term = terminal.start("--open", key, cwd=project.directory, env={"STANDIN_SLEEP": "60"})
    try:
        eventually(lambda: calls(standins), "the native client started", 30)
        term.type("\x03")
        assert term.wait(timeout=30) == 130  # the client died of SIGINT: 128 + 2, as a shell reports it
    finally:
        term.close()
    record = project.only_record()
    # beflow was not interrupted: it waited for the client and recorded how the client ended.
    assert (record.outcome, record.exit_code) == ("failed", -2)
    assert record.stop_reason == "the claude session ended (killed by SIGINT)"
    assert project.issue(key).status == Status.READY
