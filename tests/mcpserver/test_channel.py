"""The run's private channel (``mcp.self``) on its own: what it answers, what it refuses, and that it is gone with
the run. End to end through acpx and GitHub: tests/faults/test_mcp_self_github.py."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import anyio
import pytest

from beflow.agent.acpx import ToolCallState, Transcript
from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import BeflowError
from beflow.mcpserver.channel import MAX_REQUEST, ChannelClient, RunChannel, own_failure
from tests.support.projects import config_file


@pytest.fixture
def channel(repo: Path) -> RunChannel:
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text("{}\n")
    tracker = open_tracker(load_project(config_file(repo)))
    tracker.create("Fix the crash", "")
    tracker.create("Someone else's", "")
    return RunChannel(load_project(config_file(repo)), "1", "20260101-000000-1-abcd")


def raw(path: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        try:
            return sock.makefile("rb").read()
        except ConnectionResetError:  # hung up on with bytes of ours unread (a flood): nothing was answered
            return b""


def test_the_channel_answers_the_run_and_refuses_everything_else(channel: RunChannel) -> None:
    project = channel.project
    seen: dict[str, object] = {}

    def client_side() -> None:
        path = channel.path
        seen["mode"] = stat.S_IMODE(os.stat(path.parent).st_mode)
        client = ChannelClient(path, channel.capability, "1")
        seen["shown"] = client.call("issue.show", {}).key
        client.call("issue.comment", {"text": "From the agent."}, tool=True)
        with pytest.raises(BeflowError) as other:
            client.call("issue.comment", {"key": "2", "text": "not mine"}, tool=True)
        seen["other"] = other.value.code
        client.close()
        for name, data in {
            "forged": ChannelClient(path, "x" * 43, "1"),
            "issue": ChannelClient(path, channel.capability, "2"),
        }.items():
            with pytest.raises(BeflowError) as refused:
                data.call("issue.show", {})
            seen[name] = refused.value.code
        seen["garbage"] = json.loads(raw(path, b"\xff\xfe not json\n"))["error"]["code"]
        seen["flood"] = raw(path, b"x" * (MAX_REQUEST + 10))
        closing = {"capability": channel.capability, "issue": "1", "op": "issue.close", "arguments": {}}
        seen["close"] = json.loads(raw(path, json.dumps(closing).encode() + b"\n"))["error"]["code"]

    async def main() -> None:
        async with channel.serving(open_tracker(project)):
            await anyio.to_thread.run_sync(client_side)

    anyio.run(main)

    assert seen["mode"] == 0o700 and seen["shown"] == "1"
    assert seen["other"] == seen["forged"] == seen["issue"] == seen["close"] == "out_of_scope"
    assert seen["garbage"] == "usage" and seen["flood"] == b""
    assert channel.usage.calls == 2 and channel.usage.sessions >= 1 and channel.usage.refused == 5
    tracker = open_tracker(project)
    assert [(c.author, c.text) for c in tracker.get("1").comments] == [("agent", "From the agent.")]
    assert tracker.get("2").comments == []
    # Gone with the run: the socket, its directory, and with them the capability.
    assert not channel.directory.exists()
    with pytest.raises(BeflowError, match="not reachable"):
        ChannelClient(channel.path, channel.capability, "1").call("issue.show", {})


def test_a_killed_runs_channel_is_removed_by_the_next_run(channel: RunChannel) -> None:
    root = channel.directory.parent
    root.mkdir(parents=True, exist_ok=True)
    named = channel.directory.name[:-12]  # less its random part: `beflow-UID-` in the temporary directory, else ""
    left, opening = (root / f"{named}{secrets.token_hex(6)}" for _ in range(2))
    for directory in (left, opening):
        directory.mkdir(mode=0o700)
        with socket.socket(socket.AF_UNIX) as dead:  # bound, then closed: the file stays, nobody listens
            dead.bind(str(directory / "s"))
    os.utime(left, (0, 0))

    async def main() -> None:
        async with channel.serving(None):
            assert channel.path.exists()

    anyio.run(main)
    assert not left.exists() and opening.exists()
    shutil.rmtree(opening)  # (it may be in the system's temporary directory)


def test_a_channel_in_the_systems_temporary_directory_sweeps_only_killed_runs_channels_there(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """A BEFLOW_HOME too deep for a socket path puts the channel in the system's temporary directory, which everyone
    shares: the sweep there removes only beflow's own channels of killed runs, never anything else it holds."""
    shared = Path(tempfile.mkdtemp())  # short, as the system's is: room for a socket path
    request.addfinalizer(lambda: shutil.rmtree(shared))
    monkeypatch.setattr("tempfile.tempdir", str(shared))
    monkeypatch.setenv("BEFLOW_HOME", str(tmp_path / ("deep" * 30)))
    config_file(repo).write_text("{}\n")
    channel = RunChannel(load_project(config_file(repo)), "1", "20260101-000000-1-abcd")
    assert channel.directory.parent == shared
    others, killed = shared / "someone-elses", shared / f"beflow-{os.getuid()}-0123456789ab"
    for directory in (others, killed):
        directory.mkdir(mode=0o700)
        (directory / "kept.txt").write_text("x")
        os.utime(directory, (0, 0))

    async def main() -> None:
        async with channel.serving(None):
            assert channel.path.exists()

    anyio.run(main)
    assert (others / "kept.txt").read_text() == "x"
    assert not killed.exists() and not channel.directory.exists()


def calls(*titles: str) -> Transcript:
    """A transcript whose tool calls (named by their titles) all failed."""
    return Transcript(tool_calls={str(n): ToolCallState(title, "other", "failed") for n, title in enumerate(titles)})


def test_an_unknown_tool_is_the_agents_slip_and_a_server_that_never_started_its_failure(channel: RunChannel) -> None:
    # It started (its start-up check reached the run) and answered the unknown tools itself: no failure.
    channel.usage.sessions = 1
    assert own_failure(channel, calls("mcp beflow.no_such_tool", "mcp__beflow__issue_frobnicate")) is None
    # A tool it lists that never reached the run is its failure, the unknown one beside it not counted.
    failure = own_failure(channel, calls("mcp beflow.no_such_tool", "mcp beflow.issue_comment"))
    assert failure is not None and "1 of its 1 call(s) to it never reached the run" in failure
    # It never started: whatever the agent called, nothing answered.
    channel.usage.sessions = 0
    failure = own_failure(channel, calls("mcp beflow.no_such_tool"))
    assert failure is not None and "(it never started)" in failure
