"""An agent that does not start says why on its stderr; acpx says only "Internal error". What the user sees — doctor's
line and the run's reason — carries the end of that stderr, masked and capped, and the way to Node.js 22 when npm
said the agent needs it (``claude`` on Node 20: ``EBADENGINE required: { node: '>=22' }``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from beflow.agent.agents import STDERR_TAIL_CHARS
from beflow.mcp.acp import MASK
from tests.support.projects import UNSANDBOXED, config_file

#: Held by beflow (the HTTP server's token, stored under BEFLOW_HOME): the agent prints it, no one may see it.
SECRET = "s3cret-http-token-0123456789"

#: An ACP agent as `npx @anthropic-ai/claude-code…` is on Node 20: npm's engine warning on stderr, then
#: "Internal error" for session/new. Before that, a long line of noise and the secret, for the cap and the mask.
AGENT = f"""
import json, sys
sys.stderr.write("x" * 2000 + "\\n")
sys.stderr.write("startup token {SECRET}\\n")
sys.stderr.write("npm notice New minor version of npm available!\\n")
sys.stderr.write("npm warn EBADENGINE Unsupported engine {{\\n")
sys.stderr.write("npm warn EBADENGINE   package: '@anthropic-ai/claude-code@2.1.0',\\n")
sys.stderr.write("npm warn EBADENGINE   required: {{ node: '>=22' }},\\n")
sys.stderr.write("npm warn EBADENGINE   current: {{ node: 'v20.20.2', npm: '11.19.1' }}\\n")
sys.stderr.write("npm warn EBADENGINE }}\\n")
sys.stderr.flush()
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {{"protocolVersion": 1, "agentCapabilities": {{}}, "authMethods": []}}
        print(json.dumps({{"jsonrpc": "2.0", "id": message["id"], "result": result}}), flush=True)
    elif "id" in message and "method" in message:
        error = {{"code": -32603, "message": "Internal error"}}
        print(json.dumps({{"jsonrpc": "2.0", "id": message["id"], "error": error}}), flush=True)
"""

SAID = "npm warn EBADENGINE required: { node: '>=22' }"


def broken_agent(repo: Path, acpx_bin: Path, tmp_path: Path) -> Path:
    script = tmp_path / "claude-on-node-20.py"
    script.write_text(AGENT)
    (Path(os.environ["BEFLOW_HOME"]) / "http-token").parent.mkdir(parents=True, exist_ok=True)
    (Path(os.environ["BEFLOW_HOME"]) / "http-token").write_text(SECRET + "\n")
    config = {"acpx": [str(acpx_bin)], "agent": {"command": f"python3 {script}"}, "sandbox": UNSANDBOXED}
    config_file(repo).write_text(json.dumps(config))
    return script


def test_doctor_shows_the_agents_own_startup_error_masked_and_capped(
    repo: Path, beflow, acpx_bin: Path, tmp_path: Path
) -> None:
    broken_agent(repo, acpx_bin, tmp_path)

    result = beflow("doctor")

    assert result.exit_code == 1
    line, fix = next(
        (line, following)
        for line, following in zip(result.stdout.splitlines(), result.stdout.splitlines()[1:], strict=False)
        if line.startswith("✗ agent: ")
    )
    assert line.startswith("✗ agent: acpx: Internal error; it said on stderr: ")
    assert SAID in line and "npm warn EBADENGINE }" in line
    assert SECRET not in result.stdout and "npm notice" not in line
    said = line.split("; it said on stderr: ", 1)[1]
    assert len(said) <= STDERR_TAIL_CHARS and "x" * 100 not in said
    assert fix.startswith("    fix: The agent needs Node.js 22.13 or later")
    assert '"node@22.23.3", "-p", "acpx@0.19.1", "acpx"' in fix


def test_a_run_whose_agent_does_not_start_says_why_in_its_reason(
    repo: Path, beflow, acpx_bin: Path, tmp_path: Path
) -> None:
    broken_agent(repo, acpx_bin, tmp_path)
    assert beflow("issues", "new", "Fix the crash").exit_code == 0

    result = beflow("--auto", "1")

    assert result.exit_code == 1
    (ended,) = [line for line in result.stderr.splitlines() if line.startswith("■ issue 1: failed — ")]
    assert "session/new: Internal error; it said on stderr: " in ended and SAID in ended
    assert "Fix: the agent needs Node.js 22.13 or later" in ended
    assert SECRET not in result.stderr
    shown = json.loads(beflow("runs", "show", "latest", "--json").stdout)
    assert SAID in shown["stop_reason"] and SECRET not in json.dumps(shown)
    assert MASK in (repo / ".beflow" / "runs" / shown["id"] / "stderr.log").read_text()
