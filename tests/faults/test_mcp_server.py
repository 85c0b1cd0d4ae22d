"""``beflow mcp serve`` as a real process against clients that misbehave: one that never reads what it asked for,
one that sends frames that are not JSON-RPC messages."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from tests.support.projects import config_file

MIB = 1024 * 1024
INITIALIZED = "notifications/initialized"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


@pytest.fixture
def project(repo: Path) -> Path:
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text("{}\n")
    open_tracker(load_project(config_file(repo))).create("Fix the login crash", "It crashes on an empty password.")
    return repo


@contextlib.contextmanager
def server(project: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(config_file(project)), "mcp", "serve", *args],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def test_a_client_that_never_reads_keeps_the_server_small_and_sigterm_still_ends_it(project: Path) -> None:
    with server(project, "--allow", "all") as process:
        assert process.stdin is not None
        stop = threading.Event()
        sent = [0]

        def flood() -> None:  # requests, as fast as the server takes them; the answers are never read
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.write(frame(INITIALIZE) + frame({"jsonrpc": "2.0", "method": INITIALIZED}))
                while not stop.is_set():
                    process.stdin.write(frame({"jsonrpc": "2.0", "id": sent[0] + 1, "method": "tools/list"}))
                    sent[0] += 1

        writer = threading.Thread(target=flood, daemon=True)
        writer.start()
        watched = psutil.Process(process.pid)
        deadline = time.monotonic() + 6
        peak = 0
        while time.monotonic() < deadline:
            peak = max(peak, watched.memory_info().rss)
            assert peak < 250 * MIB, f"the server grew to {peak // MIB} MiB"
            time.sleep(0.1)
        assert sent[0] < 10_000  # it stopped reading: the client's own writes block

        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        stop.set()
        assert time.monotonic() - started < 5
        assert code == 0


BAD_FRAMES = [
    (b"\xff\xfe{}", -32700, None),
    (b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 5, "method": "ping"}', -32700, None),
    (b"[" * 100_000 + b"]" * 100_000, -32700, None),
    (b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "x": ' + b"[" * 80 + b"]" * 80 + b"}", -32600, 7),
    (b'{"jsonrpc": "2.0", "id": 8, "method": "ping", "params": "x"}', -32602, 8),
    (b'{"jsonrpc": "2.0", "id": "s", "method": 3}', -32600, "s"),
    (b"not json at all", -32700, None),
    (b"[1, 2]", -32600, None),
]


@pytest.mark.parametrize(("line", "code", "request_id"), BAD_FRAMES, ids=lambda v: repr(v)[:20])
def test_a_frame_that_is_not_a_message_gets_an_error_answer(
    project: Path, line: bytes, code: int, request_id: Any
) -> None:
    with server(project) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(line + b"\n" + frame({"jsonrpc": "2.0", "id": 99, "method": "ping"}))
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        assert answer["id"] == request_id
        assert answer["error"]["code"] == code
        assert len(answer["error"]["message"]) < 200
        # And the server goes on: the next request is answered.
        assert json.loads(process.stdout.readline()) == {"jsonrpc": "2.0", "id": 99, "result": {}}
        process.stdin.close()
        assert process.wait(timeout=30) == 0


def test_a_hostile_method_name_is_quoted_short_and_escaped(project: Path) -> None:
    with server(project) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": 5, "params": {}, "junk": "\x1b[2J" * 10}))
        hostile = "\x1b]52;c;" + "A" * 50_000
        process.stdin.write(frame({"jsonrpc": "2.0", "id": 2, "method": hostile}))
        process.stdin.flush()
        first = json.loads(process.stdout.readline())
        second = json.loads(process.stdout.readline())
        process.stdin.close()
        process.wait(timeout=30)
    assert first["id"] == 1 and first["error"]["code"] == -32600
    assert second["id"] == 2 and second["error"]["code"] == -32601
    assert len(json.dumps(second)) < 300
    message = second["error"]["message"]
    assert "\x1b" not in message and "\\x1b" in message
