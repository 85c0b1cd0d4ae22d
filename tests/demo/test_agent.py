"""The demo ACP agent, driven by the real pinned acpx as ``beflow demo`` drives it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from beflow.demo import GREET
from tests.support import acp_schema

AGENT = f"{sys.executable} -m beflow.demo.agent"


def acpx_exec(acpx_bin: Path, cwd: Path, *options: str) -> subprocess.CompletedProcess[str]:
    argv = [str(acpx_bin), "--cwd", str(cwd), "--format", "json", *options, "--agent", AGENT, "exec", "Say goodbye"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def said(stdout: str) -> str:
    """Everything the agent said in its message chunks."""
    text = []
    for line in stdout.splitlines():
        update = (json.loads(line).get("params") or {}).get("update") or {}
        if update.get("sessionUpdate") == "agent_message_chunk":
            text.append(update["content"]["text"])
    return "".join(text)


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    directory = tmp_path / "sample"
    directory.mkdir()
    (directory / "greet.py").write_text(GREET)
    return directory


def test_it_adds_farewell_with_a_test_and_names_the_servers_it_was_given(sample: Path, acpx_bin: Path) -> None:
    servers = [{"name": "docs", "type": "http", "url": "https://mcp.example.com/mcp", "headers": []}]
    (sample / ".acpxrc.json").write_text(json.dumps({"mcpServers": servers}))

    result = acpx_exec(acpx_bin, sample, "--approve-all")

    assert result.returncode == 0, result.stderr
    assert "MCP servers I was given: docs." in said(result.stdout)
    namespace: dict[str, object] = {}
    exec((sample / "greet.py").read_text(), namespace)
    assert namespace["farewell"]("Ada") == "Goodbye, Ada!"  # type: ignore[operator]
    assert "def test_farewell" in (sample / "test_greet.py").read_text()
    assert '"stopReason":"end_turn"' in result.stdout.replace(" ", "")
    # What the demo agent says, and what acpx says to it, is ACP as the SDK defines it.
    checked = {acp_schema.message(line) for line in result.stdout.splitlines()}
    assert {"session/new", "session/update", "session/request_permission", "PromptResponse"} <= checked


def test_it_changes_nothing_when_the_edit_is_not_allowed(sample: Path, acpx_bin: Path) -> None:
    result = acpx_exec(acpx_bin, sample, "--deny-all")

    assert "MCP servers I was given: none." in said(result.stdout)
    assert (sample / "greet.py").read_text() == GREET
    assert not (sample / "test_greet.py").exists()


def test_without_greet_py_it_writes_notes_on_the_issue_instead(tmp_path: Path, acpx_bin: Path) -> None:
    """Any other repository: the issue in brief, in a file the same for the same issue (no model, no clock)."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "app.py").write_text("print('hi')\n")

    result = acpx_exec(acpx_bin, other, "--approve-all")

    assert result.returncode == 0, result.stderr
    assert "There is no greet.py here" in said(result.stdout) and "NOTES/issue.md" in said(result.stdout)
    notes = (other / "NOTES" / "issue.md").read_text()
    assert notes.startswith("# (no title)\n\nNotes by beflow's demo agent, which needs no model and no account")
    assert "> Say goodbye" in notes and "- the repository's top level: `app.py`" in notes
    assert sorted(p.name for p in other.iterdir()) == ["NOTES", "app.py"]


def test_the_agent_starts_without_loading_beflows_run_machinery() -> None:
    """acpx starts the demo agent for every demo run: it loads what it speaks with, not the runner beside it."""
    code = "import sys, beflow.demo.agent; print(sorted(m for m in sys.modules if m.startswith(('beflow.', 'git'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # (beflow.system.files: the agent writes below the worktree through no symlink, as beflow does.)
    assert loaded.strip() == "['beflow.demo', 'beflow.demo.agent', 'beflow.system', 'beflow.system.files']"


def test_it_writes_through_no_symlink_and_nowhere_outside_the_repository(tmp_path: Path, acpx_bin: Path) -> None:
    """A repository the agent did not make: its greet.py, test_greet.py or NOTES may link anywhere. The agent
    takes a linked greet.py for no sample, and replaces a link where it writes instead of writing at its target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "greet.py").write_text(GREET)
    (outside / "test_greet.py").write_text("mine\n")
    repository = tmp_path / "répo with space"
    repository.mkdir()
    (repository / "greet.py").symlink_to(outside / "greet.py")
    (repository / "test_greet.py").symlink_to(outside / "test_greet.py")

    result = acpx_exec(acpx_bin, repository, "--approve-all")

    assert result.returncode == 0, result.stderr
    assert "There is no greet.py here" in said(result.stdout)
    assert (outside / "greet.py").read_text() == GREET and (outside / "test_greet.py").read_text() == "mine\n"
    assert (repository / "NOTES" / "issue.md").is_file() and not (repository / "NOTES").is_symlink()
    assert "`greet.py`" in (repository / "NOTES" / "issue.md").read_text()

    # A sample whose test_greet.py links out: the link is replaced, its target left alone.
    (repository / "greet.py").unlink()
    (repository / "greet.py").write_text(GREET)
    result = acpx_exec(acpx_bin, repository, "--approve-all")
    assert result.returncode == 0, result.stderr
    assert "def farewell" in (repository / "greet.py").read_text()
    assert not (repository / "test_greet.py").is_symlink() and (outside / "test_greet.py").read_text() == "mine\n"


@pytest.mark.parametrize("notes", ["a symlink to a directory outside", "a file"])
def test_notes_that_is_no_directory_of_its_own_fails_the_turn_and_writes_nothing(
    tmp_path: Path, acpx_bin: Path, notes: str
) -> None:
    """NOTES linked elsewhere is never followed, NOTES as a file is not replaced; the agent says so and its turn
    ends (acpx is answered: the run does not wait for its timeout)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    repository = tmp_path / "repository"
    repository.mkdir()
    if notes == "a file":
        (repository / "NOTES").write_text("my notes\n")
    else:
        (repository / "NOTES").symlink_to(outside, target_is_directory=True)

    result = acpx_exec(acpx_bin, repository, "--approve-all")

    assert "I could not write issue.md" in said(result.stdout), result.stdout
    assert '"stopReason":"refusal"' in result.stdout.replace(" ", "")
    assert list(outside.iterdir()) == []
    if notes == "a file":
        assert (repository / "NOTES").read_text() == "my notes\n"


def test_a_greet_py_that_is_a_directory_or_huge_is_no_sample(tmp_path: Path, acpx_bin: Path) -> None:
    repository = tmp_path / "repository"
    (repository / "greet.py").mkdir(parents=True)
    huge = tmp_path / "huge"
    huge.mkdir()
    (huge / "greet.py").write_text(GREET + "#" * (1 << 20))

    for where in (repository, huge):
        result = acpx_exec(acpx_bin, where, "--approve-all")
        assert result.returncode == 0, result.stderr
        assert (where / "NOTES" / "issue.md").is_file()
    assert (huge / "greet.py").read_text() == GREET + "#" * (1 << 20)
