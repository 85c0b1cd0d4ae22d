"""Stopping a server with pages open: ``beflow serve`` and ``beflow watch --http`` as real processes, an event
stream connected (as the live page keeps one), then SIGTERM or Ctrl-C. The streams end themselves when the server
is asked to stop: the process exits quickly, 130, and says "stopped" on stderr — no error, no traceback: SIGTERM is
how systemd and docker stop a service."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time

import httpx
import pytest

from beflow.web.guard import TOKEN_ENV
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

TOKEN = "s" * 24

#: Seconds a stop may take with streams open (uvicorn's graceful timeout is 1 s; the streams end before it).
QUICK = 4.0


def url_of(lines: list[str]) -> str | None:
    for line in list(lines):
        match = re.search(r"serving (http://\S+?)/ ", line)
        if match:
            return match.group(1)
    return None


class Streams:
    """Event-stream clients held open in threads, each until the server ends its stream."""

    def __init__(self, url: str, count: int) -> None:
        self.opened = 0
        self.ended = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._read, args=(url,), daemon=True) for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def _read(self, url: str) -> None:
        try:
            with httpx.stream("GET", url + "/api/v1/events", timeout=httpx.Timeout(30, read=60)) as stream:
                for line in stream.iter_lines():
                    if line == ": beflow events":
                        with self.lock:
                            self.opened += 1
        except httpx.HTTPError:
            pass
        with self.lock:
            self.ended += 1


@pytest.fixture
def started(beflow_process):  # type: ignore[no-untyped-def]
    def start(*args: str, cwd: object) -> tuple[subprocess.Popen[str], list[str], threading.Thread, str]:
        process = beflow_process(*args, cwd=cwd, env={TOKEN_ENV: TOKEN})
        stderr: list[str] = []
        reader = threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True)
        reader.start()
        threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
        url = eventually(lambda: url_of(stderr), "the server said where it serves", alive=process)
        return process, stderr, reader, url

    return start


class McpStream:
    """An MCP session over Streamable HTTP with its GET stream open (the stream a client keeps for what the
    server pushes), until the server ends it. (The JSON-RPC of the transport by hand: the SDK's client hides when
    its GET stream is open.)"""

    def __init__(self, url: str) -> None:
        self.opened = self.ended = False
        headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        answer = httpx.post(url + "/mcp", json=initialize, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
        headers["Mcp-Protocol-Version"] = "2025-06-18"
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert httpx.post(url + "/mcp", json=initialized, headers=headers, timeout=30).status_code == 202
        self.thread = threading.Thread(target=self._read, args=(url, headers), daemon=True)
        self.thread.start()

    def _read(self, url: str, headers: dict[str, str]) -> None:
        try:
            get = {**headers, "Accept": "text/event-stream"}
            with httpx.stream("GET", url + "/mcp", headers=get, timeout=httpx.Timeout(30, read=60)) as stream:
                self.opened = stream.status_code == 200
                for _ in stream.iter_lines():
                    pass
        except httpx.HTTPError:
            pass
        self.ended = True


def stop_with_streams_open(
    process: subprocess.Popen[str], stderr: list[str], reader: threading.Thread, url: str, sig: int
) -> None:
    streams = Streams(url, 3)
    eventually(lambda: streams.opened == 3, "three event streams opened", alive=process)
    mcp = McpStream(url)
    eventually(lambda: mcp.opened, "an MCP client's GET stream opened", alive=process)
    assert httpx.get(url + "/api/v1/state", timeout=30).status_code == 200  # (as the live page reads it)
    began = time.monotonic()
    process.send_signal(sig)
    code = process.wait(30)
    took = time.monotonic() - began
    reader.join(10)  # (the process's stderr, to its end)
    eventually(lambda: streams.ended == 3 and mcp.ended, "every stream ended")
    text = "".join(stderr)
    assert code == 130, text
    assert text.splitlines()[-1] == "beflow: stopped" and "error" not in text, text
    assert took < QUICK, f"stopping took {took:.1f} s: {text}"
    for bad in ("Traceback", "Exception in ASGI application", "CancelledError", "graceful shutdown exceeded"):
        assert bad not in text, text


def test_serve_stops_quickly_and_quietly_with_event_streams_open(started, auto_project: AutoProject) -> None:  # type: ignore[no-untyped-def]
    stop_with_streams_open(*started("serve", "0", cwd=auto_project.directory), signal.SIGTERM)


def test_a_watch_with_http_stops_quickly_and_quietly_with_event_streams_open(  # type: ignore[no-untyped-def]
    started, auto_project: AutoProject
) -> None:
    auto_project.configure(watch={"interval": 0.2})
    stop_with_streams_open(*started("watch", "--json", "--http", "0", cwd=auto_project.directory), signal.SIGINT)
