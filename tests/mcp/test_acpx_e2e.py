"""The end-to-end proof: the real acpx forwards beflow's injected servers to the agent's ``session/new``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
import pytest

from beflow.config import load_project
from beflow.mcp.acp import resolve_servers, wire
from beflow.mcp.inject import managed_acpxrc
from beflow.mcp.journal import journal_dir
from beflow.paths import ACPXRC
from tests.conftest import processes_under
from tests.mcp.conftest import SEED_MCP_JSON, write_mcp
from tests.support import acp_schema

# A prior acpx config of the user's own: JSON, CRLF, no final newline; its other keys must reach acpx.
PRIOR = b'{\r\n  "defaultPermissions": "approve-all",\r\n  "mcpServers": [{"name": "users-own", "command": "x"}]\r\n}'


@pytest.mark.slow
def test_acpx_hands_the_agent_exactly_the_injected_servers(
    project_dir: Path, tmp_path: Path, acpx_bin: Path, test_agent_command: str
) -> None:
    write_mcp(project_dir / ".mcp.json", SEED_MCP_JSON.replace("Bearer TOKEN", "Bearer ${DOCS_TOKEN}"))
    servers = resolve_servers(load_project(), {"DOCS_TOKEN": "t-123"})
    assert servers is not None
    workdir = tmp_path / "agent-cwd"
    workdir.mkdir()
    (workdir / ACPXRC).write_bytes(PRIOR)
    record = tmp_path / "requests.jsonl"
    results: list[subprocess.CompletedProcess[str]] = []

    async def main() -> None:
        async with managed_acpxrc(workdir, servers):
            argv = [str(acpx_bin), "--agent", test_agent_command, "--cwd", str(workdir), "--format", "json"]
            argv += ["--approve-all", "exec", "acp-test: mcp"]
            results.append(
                await anyio.run_process(argv, check=False, env={**os.environ, "ACP_TEST_RECORD": str(record)})
            )

    anyio.run(main)
    (result,) = results
    assert result.returncode == 0, result.stderr
    assert b"mcp servers: codegraph, docs" in result.stdout

    requests = [json.loads(line) for line in record.read_text().splitlines()]
    (new_session,) = [r for r in requests if r["method"] == "session/new"]
    assert new_session["params"]["mcpServers"] == wire(servers)
    assert json.dumps(new_session["params"]["mcpServers"]) == json.dumps(wire(servers))  # key order too
    assert wire(servers)[1]["headers"] == [{"name": "Authorization", "value": "Bearer t-123"}]
    # What the agent received is ACP's `session/new`, as the SDK defines it, stdio and http servers alike.
    assert acp_schema.message(new_session) == "session/new"

    assert (workdir / ACPXRC).read_bytes() == PRIOR
    assert sorted(p.name for p in workdir.iterdir()) == [ACPXRC]
    assert list(journal_dir().glob("*.json")) == []
    # `exec` is one-shot: no queue owner or agent outlives it.
    assert processes_under(workdir) == []
