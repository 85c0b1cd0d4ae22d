"""The HTTP server's token is a secret of every run: an agent that finds it — in the file beflow keeps it in under
``BEFLOW_HOME``, or where the user exported ``BEFLOW_HTTP_TOKEN`` — and writes it into a file and its final message
gets nothing published, and the token is in no record, transcript or output (docs/safety.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beflow.mcp.acp import MASK
from beflow.paths import TOKEN_ENV, token_path
from beflow.web.guard import load_token
from tests.faults.conftest import beflow_run
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow

HTTP_TOKEN = "http-token-4e1b9d7c2a5f8e30"


def holding(secret: str, *roots: Path, besides: tuple[Path, ...] = ()) -> list[str]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and not any(path.is_relative_to(b) for b in besides):
                found += [str(path)] if secret.encode() in path.read_bytes() else []
    return found


@pytest.mark.parametrize("where", ["file", "environment"])
def test_an_agent_that_finds_the_http_token_gets_nothing_published_and_the_token_is_masked(
    auto_project: AutoProject, tmp_path: Path, where: str, no_leftover_processes: None
) -> None:
    env: dict[str, str] = {}
    if where == "file":  # what `beflow serve` and `watch --http` made and keep for the next start
        token = load_token().value
        source = token_path()
    else:  # the user exported it; the agent finds it where the user wrote it down (a shell profile, say)
        token, env = HTTP_TOKEN, {TOKEN_ENV: HTTP_TOKEN}
        source = tmp_path / "profile"
        source.write_text(HTTP_TOKEN)
    key = auto_project.new_issue(
        "write notes.txt hello",
        f"run cat {source} > token.txt",
        f'run echo "the server token is $(cat {source})"',
    )

    done = beflow_run(auto_project, "--auto", key, env=env)

    assert done.code == 1, done.stdout + done.stderr
    record = auto_project.only_record()
    assert record.outcome == "failed" and record.commit is None and record.worktree_kept
    reason = record.stop_reason or ""
    assert "token.txt" in reason and "a secret value" in reason and f"beflow/{key} was not updated" in reason
    worktree = Path(record.worktree or "")
    assert (worktree / "token.txt").read_text().strip() == token  # the agent did find it; its work is kept
    assert f"beflow/{key}" not in auto_project.branches()
    assert f"the server token is {MASK}" in (record.final_message or "")
    assert MASK in (auto_project.run_dir(record) / "transcript.jsonl").read_text()
    assert token not in done.stdout + done.stderr
    home = Path(os.environ["BEFLOW_HOME"])
    assert holding(token, auto_project.directory, home, besides=(worktree, source)) == []
