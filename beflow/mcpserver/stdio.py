"""The stdio transport of ``beflow mcp serve``: protocol frames on fds 0 and 1, read and written without a blocked
thread, so that a signal always stops the server, whatever the client does.

The SDK's own stdio transport reads and writes in worker threads: a client that stops reading leaves a write
blocked for good (SIGTERM waits on it), and a frame the SDK cannot parse is dropped without an answer. Here:

- fd 0 and fd 1 are claimed as the SDK claims them (while serving, fd 0 reads the null device and fd 1 points at
  stderr, so handlers and their children can neither read the protocol nor corrupt it), and the private copies are
  polled, non-blocking;
- every frame that is not a JSON-RPC message gets an answer: a parse error (-32700, id null) for bytes that are not
  UTF-8 JSON (a byte order mark, nesting too deep for the parser), an invalid request (-32600, or -32602 for
  ``params`` that are not an object) with the frame's id when it can be read;
- frames longer than ``max_frame`` are dropped unread (answered with an invalid request, id null);
- after ``stop`` is set, a write the client does not take within :data:`STOP_GRACE` seconds gives up: ``on_stuck``
  is called (the server stops without waiting for that client).

What is queued for the client is bounded by the caller (:class:`beflow.mcpserver.drain.Drain` stops reading requests
while too many are unanswered); every stream here holds at most one message.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from beflow.errors import excerpt

logger = logging.getLogger("beflow.mcp")

KIB = 1024
#: Seconds a write may wait for a client that does not read, once the server was told to stop.
STOP_GRACE = 3.0
Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
#: What a method name looks like (MCP's are short, ``tools/call``); any other is not found, quoted short.
METHOD = re.compile(r"^[A-Za-z0-9_./:$-]{1,100}$")
#: How deep a frame's JSON may nest (MCP's own messages need a handful of levels; tool arguments a few more).
MAX_DEPTH = 64


def _claim(fd: int, diversion: int) -> int:
    """A private copy of ``fd`` (above the standard range), with ``fd`` itself pointed at ``diversion``."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(diversion, fd)
    os.close(diversion)
    return private


def _restore(fd: int, private: int, was_blocking: bool) -> None:
    with contextlib.suppress(OSError):
        os.set_blocking(private, was_blocking)
        os.dup2(private, fd)
        os.close(private)


def _depth(value: Any) -> int:
    """How deep ``value`` nests (without recursion: the value may be as deep as the parser allowed)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in node)
    return deepest


def _error(request_id: Any, code: int, message: str) -> SessionMessage:
    return SessionMessage(
        types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))
    )


def parse_frame(line: bytes) -> tuple[SessionMessage | None, SessionMessage | None]:
    """One frame: ``(message, None)`` for a JSON-RPC message, ``(None, answer)`` for anything else, the answer a
    JSON-RPC error to send back. No answer quotes more of the frame than a short escaped excerpt."""
    if line.startswith(b"\xef\xbb\xbf"):
        return None, _error(None, types.PARSE_ERROR, "Parse error: the frame starts with a byte order mark")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return None, _error(None, types.PARSE_ERROR, f"Parse error: the frame is not UTF-8 (byte {error.start})")
    try:
        data = json.loads(text)
    except RecursionError:
        return None, _error(None, types.PARSE_ERROR, f"Parse error: the frame nests deeper than {MAX_DEPTH} levels")
    except ValueError as error:
        detail = error.msg if isinstance(error, json.JSONDecodeError) else "not JSON"
        return None, _error(None, types.PARSE_ERROR, f"Parse error: {detail}")
    if not isinstance(data, dict):
        return None, _error(None, types.INVALID_REQUEST, "Invalid request: a message is a JSON object (no batches)")
    raw_id = data.get("id")
    request_id = raw_id if isinstance(raw_id, str | int) and not isinstance(raw_id, bool) else None
    if _depth(data) > MAX_DEPTH:
        deep = f"Invalid request: nested deeper than {MAX_DEPTH} levels"
        return None, _error(request_id, types.INVALID_REQUEST, deep)
    try:
        message = types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValidationError:
        if "method" in data and "params" in data and not isinstance(data["params"], dict):
            return None, _error(request_id, types.INVALID_PARAMS, "Invalid params: params must be an object")
        method = data.get("method")
        what = f" {excerpt(method)}" if isinstance(method, str) else ""
        return None, _error(
            request_id,
            types.INVALID_REQUEST,
            f"Invalid request{what}: not a JSON-RPC 2.0 message (jsonrpc, id, method, params, result, error)",
        )
    method = getattr(message, "method", None)
    if isinstance(message, types.JSONRPCRequest) and not METHOD.match(method or ""):
        # The SDK would answer with the whole name as data: nothing that long or odd goes back.
        return None, _error(request_id, types.METHOD_NOT_FOUND, f"Method not found: {excerpt(method)}")
    return SessionMessage(message), None


class _Wire:
    """The private copies of fd 0 and fd 1, non-blocking, and waits on them that a stop can end."""

    def __init__(self, stop: anyio.Event, max_frame: int, on_stuck: Callable[[], None]) -> None:
        self.stop = stop
        self.max_frame = max_frame
        self.on_stuck = on_stuck
        #: A file or /dev/null cannot be polled (and never blocks): it is read straight away.
        self.pollable: dict[int, bool] = {}

    async def _readable(self, fd: int) -> bool:
        """Wait until ``fd`` can be read (True) or the server is told to stop (False)."""
        if not self.pollable.get(fd, True):
            return not self.stop.is_set()
        stopped = True
        async with anyio.create_task_group() as tasks:

            async def on_stop() -> None:
                await self.stop.wait()
                tasks.cancel_scope.cancel()

            tasks.start_soon(on_stop)
            try:
                await anyio.wait_readable(fd)
            except PermissionError:  # epoll refuses regular files and /dev/null
                self.pollable[fd] = False
            stopped = False
            tasks.cancel_scope.cancel()
        return not stopped and not self.stop.is_set()

    async def _writable(self, fd: int) -> bool:
        """Wait until ``fd`` can be written (True), or, once stopping, :data:`STOP_GRACE` seconds (False)."""
        if not self.pollable.get(fd, True):
            return True
        writable = False
        async with anyio.create_task_group() as tasks:

            async def give_up() -> None:
                await self.stop.wait()
                await anyio.sleep(STOP_GRACE)
                tasks.cancel_scope.cancel()

            tasks.start_soon(give_up)
            try:
                await anyio.wait_writable(fd)
            except PermissionError:
                self.pollable[fd] = False
            writable = True
            tasks.cancel_scope.cancel()
        return writable

    async def lines(self, fd: int) -> AsyncIterator[bytes | None]:
        """The frames read from ``fd`` until EOF or a stop; ``None`` for a frame dropped for its length."""
        pending = bytearray()
        dropping = False
        while await self._readable(fd):
            try:
                chunk = os.read(fd, 64 * KIB)
            except BlockingIOError:
                continue
            if not chunk:
                break  # EOF: the client is gone
            pending += chunk
            while (end := pending.find(b"\n")) >= 0:
                line, pending = bytes(pending[:end]), pending[end + 1 :]
                if dropping:
                    dropping = False
                elif line.strip():
                    yield line.rstrip(b"\r")
            if len(pending) > self.max_frame:
                if not dropping:
                    logger.warning("beflow mcp: dropped a frame longer than %d bytes", self.max_frame)
                    yield None
                pending.clear()  # up to the frame's end: nothing of it is kept
                dropping = True

    async def write(self, fd: int, data: bytes) -> bool:
        """Write all of ``data``; False when the client is gone or, stopping, does not read."""
        view = memoryview(data)
        while view:
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                if not await self._writable(fd):
                    logger.warning("beflow mcp: the client does not read its answers; stopping without them")
                    self.on_stuck()
                    return False
                continue
            except OSError:  # the client closed its end
                return False
            view = view[written:]
        return True


@contextlib.asynccontextmanager
async def stdio_streams(stop: anyio.Event, max_frame: int, on_stuck: Callable[[], None]) -> AsyncIterator[Streams]:
    """The stream pair the SDK's server runs on, over fds 0 and 1 (see the module's docs)."""
    wire = _Wire(stop, max_frame, on_stuck)
    null = os.open(os.devnull, os.O_RDONLY)
    in_fd = _claim(0, null)
    out_fd = _claim(1, os.dup(2))
    blocking = {in_fd: os.get_blocking(in_fd), out_fd: os.get_blocking(out_fd)}
    os.set_blocking(in_fd, False)
    os.set_blocking(out_fd, False)
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    answers = write_send.clone()  # the reader's own, for frames that are not messages

    async def reader() -> None:
        async with read_send, answers:
            async for line in wire.lines(in_fd):
                message, answer = parse_frame(line) if line is not None else (None, _too_long(max_frame))
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    if message is not None:
                        await read_send.send(message)
                    elif answer is not None:
                        await answers.send(answer)

    async def writer() -> None:
        alive = True
        async with write_receive:
            async for item in write_receive:
                if alive:  # a client that went away: what is still said is dropped, nobody waits on it
                    frame = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    alive = await wire.write(out_fd, frame.encode("utf-8"))

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(reader)
            tasks.start_soon(writer)
            yield read_receive, write_send
    finally:
        _restore(1, out_fd, blocking[out_fd])
        _restore(0, in_fd, blocking[in_fd])


def _too_long(max_frame: int) -> SessionMessage:
    return _error(None, types.INVALID_REQUEST, f"Invalid request: the frame is longer than {max_frame} bytes")
