"""The client GitHub's and GitLab's share: a server that drips its answer a byte at a time does not hold a request
beyond its timeout (httpx's timeouts are per read)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from beflow.trackers import github_api, gitlab_api

#: The drip: one byte every DRIP seconds, LENGTH bytes in all (a read never waits its timeout).
DRIP = 0.1
LENGTH = 200


class _Dripping(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(LENGTH))
            self.end_headers()
            for _ in range(LENGTH):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(DRIP)
        except OSError:
            pass  # the client gave up: as it should

    do_POST = do_GET


@pytest.fixture
def dripping() -> Iterator[str]:
    """The URL of a local server whose every answer drips."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dripping)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("forge", [github_api, gitlab_api])
def test_a_request_whose_answer_drips_is_unavailable_after_its_timeout(dripping: str, forge: Any) -> None:
    api = forge.Api(dripping, "t0ken", timeout=0.5)
    try:
        with pytest.raises(forge.Unavailable, match="does not answer: ReadTimeout"):
            api.request("POST", "/drip", json={})  # (not tried again: one timeout)
    finally:
        api.close()


@pytest.mark.parametrize("forge", [github_api, gitlab_api])
def test_a_tail_whose_answer_drips_is_unavailable_after_its_timeout(dripping: str, forge: Any) -> None:
    api = forge.Api(dripping, "t0ken", timeout=0.5)
    try:
        with pytest.raises(forge.Unavailable, match="the answer broke off: ReadTimeout"):
            api.tail("/drip", 10)
    finally:
        api.close()
