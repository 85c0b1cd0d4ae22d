"""The sandbox's proxy on its own, over its Unix socket: an allowed host is relayed (CONNECT and plain HTTP), any
other refused with 403 and counted by host, a garbled request answered 400, and names are counted safely."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from beflow.sandbox.proxy import Proxy


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP server that answers each connection with what it read first, then closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                client.sendall(b"echo:" + client.recv(4096))

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


async def ask(path: Path, data: bytes) -> bytes:
    async with await anyio.connect_unix(path) as stream:
        await stream.send(data)
        received = b""
        with anyio.move_on_after(10):
            try:
                while True:
                    received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
        return received


def test_allowed_relayed_others_refused_and_counted(echo: int, tmp_path: Path) -> None:
    proxy = Proxy([f"127.0.0.1:{echo}"])
    path = tmp_path / "p.sock"

    get = f"GET http://127.0.0.1:{echo}/x?y=1 HTTP/1.1\r\nProxy-Authorization: z\r\n\r\n".encode()

    async def main() -> list[bytes]:
        async with proxy.serving(path):
            return [
                await ask(path, f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\nhello".encode()),
                await ask(path, get),
                await ask(path, b"CONNECT example.org:443 HTTP/1.1\r\n\r\n"),
                await ask(path, b"GET http://example.org/ HTTP/1.1\r\n\r\n"),
                await ask(path, b"CONNECT \x1b[2Jevil:443 HTTP/1.1\r\n\r\n"),
                await ask(path, b"nonsense\r\n\r\n"),
            ]

    connect, get, refused, refused_get, escape, garbled = anyio.run(main)
    assert connect == b"HTTP/1.1 200 Connection established\r\n\r\necho:hello"
    assert get.startswith(b"echo:GET /x?y=1 HTTP/1.1\r\n") and b"Proxy-Authorization" not in get
    assert refused.startswith(b"HTTP/1.1 403 Forbidden") and refused_get.startswith(b"HTTP/1.1 403 Forbidden")
    assert garbled.startswith(b"HTTP/1.1 400")
    assert escape.startswith(b"HTTP/1.1 403")
    assert dict(proxy.blocked) == {"example.org": 2, "??2jevil": 1}
    assert proxy.allowed_connections == 2


@pytest.mark.parametrize(
    "request_line",
    [
        b"CONNECT localhost:99999999999999999999 HTTP/1.1",  # (OverflowError in the connect: it ended the run)
        b"CONNECT localhost:0 HTTP/1.1",
        b"CONNECT localhost:65536 HTTP/1.1",
        b"CONNECT localhost:\xb2 HTTP/1.1",  # a superscript two: str.isdigit takes it, int() does not
        b"CONNECT localhost:-1 HTTP/1.1",
        b"GET http://localhost:99999999999/ HTTP/1.1",  # (urlsplit's port raises)
        b"GET http://[::1/ HTTP/1.1",
    ],
)
def test_a_port_out_of_range_or_not_a_number_is_answered_400_and_the_proxy_serves_on(
    echo: int, tmp_path: Path, request_line: bytes
) -> None:
    proxy = Proxy([f"127.0.0.1:{echo}", "localhost"])
    path = tmp_path / "p.sock"

    async def main() -> tuple[bytes, bytes]:
        async with proxy.serving(path):
            bad = await ask(path, request_line + b"\r\n\r\n")
            return bad, await ask(path, f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\nstill".encode())

    bad, after = anyio.run(main)
    assert bad.startswith(b"HTTP/1.1 400 Bad Request")
    assert after == b"HTTP/1.1 200 Connection established\r\n\r\necho:still"


def test_a_name_idna_cannot_encode_under_an_allowed_domain_is_a_bad_gateway(echo: int, tmp_path: Path) -> None:
    proxy = Proxy(["*.example.org"])
    path = tmp_path / "p.sock"

    async def main() -> bytes:
        async with proxy.serving(path):
            return await ask(path, b"CONNECT a..example.org:443 HTTP/1.1\r\n\r\n")

    assert anyio.run(main).startswith(b"HTTP/1.1 502 Bad Gateway")
