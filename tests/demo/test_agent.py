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
    assert loaded.strip() == "['beflow.demo', 'beflow.demo.agent']"
