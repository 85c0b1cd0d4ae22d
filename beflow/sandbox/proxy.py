"""beflow's allowlist proxy for a sandboxed run: HTTP ``CONNECT`` (https, any TCP) and plain-HTTP forwarding, on a
Unix socket that only the run's sandbox reaches (through :mod:`beflow.sandbox.bridge`).

A request to a host on the list is connected and relayed byte for byte (TLS stays end to end: the proxy never sees
inside it); any other is answered ``403`` and counted by host, for the run's record. The proxy resolves names
itself: the sandbox has no DNS, and needs none.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

#: The longest request head the proxy reads.
MAX_HEAD = 64 * 1024
#: Seconds a client may take to send its request head, and the proxy to connect upstream.
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
#: Connections relayed at once: beyond, a new one is answered 503 (an agent that floods stays beflow's cost-free).
MAX_CONNECTIONS = 256
#: Hosts counted by name: beyond, the rest are counted together (an agent that tries a million names).
MAX_HOSTS = 100
OTHERS = "(other hosts)"


def allowed(host: str, port: int, rules: Sequence[str]) -> bool:
    """Whether ``host:port`` is on the list: ``name`` (any port), ``name:port``, ``*.domain`` (names below it)."""
    host = host.lower().strip("[]").rstrip(".")
    for rule in rules:
        name, _, wanted = rule.lower().partition(":")
        if wanted and wanted != str(port):
            continue
        if name == host or (name.startswith("*.") and fnmatch.fnmatchcase(host, name) and host != name[2:]):
            return True
    return False


@dataclass
class Proxy:
    """The proxy of one run: its rules, and what it refused (:attr:`blocked`, connections by host)."""

    rules: Sequence[str]
    blocked: Counter[str] = field(default_factory=Counter)
    allowed_connections: int = 0
    active: int = 0

    def refuse(self, host: str) -> None:
        host = re.sub(r"[^A-Za-z0-9.:_-]", "?", host)[:100]  # the agent's text, for a record and a terminal
        name = host.lower() if host.lower() in self.blocked or len(self.blocked) < MAX_HOSTS else OTHERS
        self.blocked[name] += 1

    @contextlib.asynccontextmanager
    async def serving(self, path: Path) -> AsyncIterator[Proxy]:
        """Listen on ``path`` while the body runs."""
        listener = await anyio.create_unix_listener(path, mode=0o600)
        try:
            async with listener, anyio.create_task_group() as tasks:
                tasks.start_soon(listener.serve, self._handle)
                try:
                    yield self
                finally:
                    tasks.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # the body's own exception, not anyio's group around it
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _handle(self, client: anyio.abc.ByteStream) -> None:
        async with client:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
                if self.active >= MAX_CONNECTIONS:
                    await client.send(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n")
                    return
                self.active += 1
                try:
                    await self._one(client)
                except Exception:  # what the agent sends ends its own connection, never the run's proxy
                    return
                finally:
                    self.active -= 1

    async def _one(self, client: anyio.abc.ByteStream) -> None:
        buffered = BufferedByteReceiveStream(client)
        with anyio.fail_after(HEAD_TIMEOUT):
            try:
                head = await buffered.receive_until(b"\r\n\r\n", MAX_HEAD)
            except (anyio.DelimiterNotFound, anyio.IncompleteRead):
                return
        request_line, _, headers = head.partition(b"\r\n")
        parts = request_line.decode("latin-1").split()
        if len(parts) != 3:
            await client.send(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            return
        method, target, version = parts
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            rest = b""
        else:
            try:
                url = urlsplit(target)
                host, port_text = url.hostname or "", str(url.port or 80)
            except ValueError:  # a port out of range or not a number, a broken IPv6 literal
                host = ""
            if not host or url.scheme != "http":
                await client.send(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                return
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            kept = [line for line in headers.split(b"\r\n") if not line.lower().startswith(b"proxy-")]
            rest = f"{method} {path} {version}\r\n".encode("latin-1") + b"\r\n".join(kept) + b"\r\n\r\n"
        port = _port(port_text)
        if port is None or not host:
            await client.send(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            return
        if not allowed(host, port, self.rules):
            self.refuse(host.strip("[]"))
            body = f"beflow's sandbox does not allow {host}:{port} (sandbox.hosts)\n".encode()
            await client.send(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            return
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                upstream = await anyio.connect_tcp(host.strip("[]"), port)
        except (OSError, TimeoutError, ValueError):  # ValueError: a name IDNA cannot encode (`a..b` under `*.b`)
            await client.send(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
            return
        self.allowed_connections += 1
        async with upstream:
            if rest:
                await upstream.send(rest)
            else:
                await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_relay, buffered, upstream, tasks.cancel_scope)
                tasks.start_soon(_relay, upstream, client, tasks.cancel_scope)


def _port(text: str) -> int | None:
    """A TCP port, 1 to 65535 in ASCII digits; None for anything else (``99999999999999999999``, ``0``, ``²``: a port
    out of range would make the connect raise, and ``str.isdigit`` takes digits ``int`` does not)."""
    if not (text.isascii() and text.isdigit() and len(text) <= 5):
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


async def _relay(source: anyio.abc.ByteReceiveStream, sink: anyio.abc.ByteSendStream, scope: anyio.CancelScope) -> None:
    """Copy until either side ends; then the other direction ends too."""
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
        async for chunk in source:
            await sink.send(chunk)
    scope.cancel()
