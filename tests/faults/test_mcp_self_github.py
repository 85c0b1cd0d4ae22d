"""``mcp.self`` on the GitHub tracker, end to end through the real acpx and the test agent: beflow's own server in
the run holds no token and acts through the run's private channel; the call reaches GitHub from the run's process;
a forged capability or another issue is refused; a server that fails the agent is named in the record."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.faults.conftest import beflow_run
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow

#: Run by the agent (``run``) in its worktree: reads the injected file, as any agent can, and talks to the channel.
PROBE = r"""
import json, socket, sys
servers = json.load(open(".acpxrc.json"))["mcpServers"]
(own,) = [s for s in servers if s["name"] == "beflow"]
path = own["args"][own["args"].index("--channel") + 1]
capability = {p["name"]: p["value"] for p in own["env"]}["BEFLOW_MCP_CAPABILITY"]

def ask(frame):
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect(path)
    except OSError as error:
        return "unreachable"
    sock.sendall(json.dumps(frame).encode() + b"\n")
    answer = json.loads(sock.makefile("rb").readline())
    return answer["error"]["code"] if "error" in answer else "ok"

open(sys.argv[1], "w").write(json.dumps({"path": path, "capability": capability}))
if sys.argv[2:] == ["cut"]:  # the channel goes away under the agent: beflow's server cannot start any more
    import os
    os.unlink(path)
    sys.exit(0)
comment = {"op": "issue.comment", "arguments": {"text": "forged"}, "issue": "2"}
print("forged:", ask({**comment, "capability": "x" * 43}))
print("other-issue:", ask({**comment, "issue": "1", "capability": capability}))
print("other-key:", ask({**comment, "arguments": {"key": "1", "text": "forged"}, "capability": capability}))
print("not-agent-safe:", ask({"op": "issue.close", "issue": "2", "arguments": {}, "capability": capability}))
"""


@pytest.fixture
def on_github(auto_project: AutoProject, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url}, mcp={"self": True})
    return auto_project


def body(*directives: str) -> str:
    return "\n".join(f"acp-test: {d}" for d in directives)


def call(tool: str, arguments: dict[str, str]) -> str:
    return f"mcp-call beflow {tool} {json.dumps(arguments)}"


def test_the_agents_calls_reach_github_through_the_run_and_nothing_else_does(
    on_github: AutoProject, github: FakeGitHub, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    seen = tmp_path / "seen.json"
    github.add_issue("Someone else's", labels=["beflow"], body="not yours")
    github.add_issue(
        "Fix the crash",
        labels=["beflow", "beflow:ready"],
        body=body(
            'run test -z "$GITHUB_TOKEN" && echo no-token-here',
            call("issue_comment", {"text": "The crash comes from parser.py."}),
            call("issue_comment", {"key": "1", "text": "Not mine to say."}),
            call("run_progress", {"text": "halfway"}),
            f"run {sys.executable} {probe} {seen}",
            "write parser.txt fixed",
        ),
    )
    done = beflow_run(on_github, "--auto", "2")

    assert done.code == 0, done.stderr
    record = on_github.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    assert "beflow's own MCP server failed" not in (record.stop_reason or "")
    # The comment reached GitHub: the run's process made the request (the server had no token to make it).
    texts = [c["body"] for c in github.comments_of(2)]
    assert any("The crash comes from parser.py." in text for text in texts), texts
    assert not any("Not mine to say." in c["body"] or "forged" in c["body"] for c in github.comments_of(1))
    assert [note.text for note in record.progress] == ["halfway"]
    transcript = (on_github.run_dir(record) / "transcript.jsonl").read_text()
    assert "no-token-here" in transcript
    assert "mcp issue_comment: error out_of_scope" in transcript
    for refused in ("forged", "other-issue", "other-key", "not-agent-safe"):
        assert f"{refused}: out_of_scope" in transcript
    # The capability is in no record and no output, and the channel is gone with the run.
    channel = json.loads(seen.read_text())
    assert not Path(channel["path"]).exists() and not Path(channel["path"]).parent.exists()
    assert channel["capability"] not in done.stdout + done.stderr
    assert TOKEN not in done.stdout + done.stderr
    run_files = [p for p in on_github.run_dir(record).rglob("*") if p.is_file()]
    assert [p for p in run_files if channel["capability"].encode() in p.read_bytes()] == []
    assert on_github.secrets_in_records() == []


def test_a_run_whose_own_server_failed_the_agent_says_so(
    on_github: AutoProject, github: FakeGitHub, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    seen = tmp_path / "seen.json"
    github.add_issue(
        "Fix the crash",
        labels=["beflow", "beflow:ready"],
        body=body(f"run {sys.executable} {probe} {seen} cut", call("issue_comment", {"text": "Found it."})),
    )

    done = beflow_run(on_github, "--auto", "1", "--json")

    record = on_github.only_record()
    failure = "beflow's own MCP server failed the agent: 1 of its 1 call(s) to it never reached the run"
    assert failure in (record.stop_reason or ""), record.stop_reason
    notices = [json.loads(line) for line in done.stdout.splitlines() if '"notice"' in line]
    assert any(failure in event.get("message", "") for event in notices), done.stdout
    assert github.comments_of(1) == [] or all("Found it." not in c["body"] for c in github.comments_of(1))
