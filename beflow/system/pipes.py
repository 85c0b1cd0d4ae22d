"""A child's output pipes: made roomy, read a wake-up at a time (from the event loop, or from synchronous code while
the child's input is fed and its exit watched), and what a child said kept in bounded memory."""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import subprocess
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from beflow.system import groups

#: What a child's output is handed to as it arrives: the whole lines one read of its pipe brought, as they came,
#: joined by their newlines but for the last one's (``b"one\ntwo"``; ``b""`` is one empty line). A line longer than
#: :data:`MAX_LINE` comes in pieces of that size, each a line of its own. A read of acpx's relaying brings hundreds
#: of lines: handed over as one piece of bytes, they are masked, logged and followed a read at a time.
LinesHandler = Callable[[bytes], Awaitable[None] | None]

#: The longest line handed to a line handler; a longer one is handed over in pieces of this size.
MAX_LINE = 8 << 20

#: Linux's calls to ask and set a pipe's capacity (None elsewhere).
F_GETPIPE_SZ: int | None = getattr(fcntl, "F_GETPIPE_SZ", None)
F_SETPIPE_SZ: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)


class Tail:
    """The last ``limit`` bytes of a stream, in bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        #: Bytes of the stream in all, kept or not.
        self.seen = 0

    @property
    def clipped(self) -> bool:
        """Whether the stream was longer than what is kept."""
        return self.seen > max(self.limit, 0)

    def add(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        if self.limit <= 0:
            return
        self.data += chunk
        if len(self.data) > 2 * self.limit:  # trimmed now and then, not on every chunk
            del self.data[: len(self.data) - self.limit]

    def value(self) -> bytes:
        return bytes(self.data[-self.limit :]) if self.limit > 0 else b""


#: After a short read of a child's output, the next waits this long: a child that prints line by line (acpx
#: relaying thousands of ACP messages) is read many lines a wake-up, not one. While it keeps printing, the wait
#: doubles up to GATHER_MOST (what it prints meanwhile is that late, at most); once it has been quiet that long,
#: what it prints next is read at once. A wake-up of the event loop costs a tenth of a millisecond or more of
#: CPU on a shared machine: 10,000 lines read in 40 wake-ups, not 4,000, is most of what reading them costs.
GATHER = 0.005
GATHER_MOST = 0.25
#: The room beflow asks for in a child's output pipes (Linux; 64 KiB by default): what a child prints while beflow
#: waits to gather it (acpx relaying a burst prints about 100 KiB in GATHER_MOST: a flood, past half of it, is read
#: as it comes), the child never blocked. Not more: a user's pipes share a quota
#: (``/proc/sys/fs/pipe-user-pages-soft``, 64 MiB), past which every new pipe of theirs, of any program, is small.
PIPE_SIZE = 512 << 10
#: What one read takes at most. A read that fills it leaves more in the pipe, read on at once.
READ_SIZE = 64 << 10


class Pipe(anyio.abc.ByteReceiveStream):
    """The read end of a child's output pipe, read by beflow itself rather than by the event loop's transport: the
    transport reads (and wakes the loop) once for every write of the child's, this reads once per wake-up all that
    the pipe gathered meanwhile — after a short read it lets :data:`GATHER` (and, while the child keeps printing,
    up to :data:`GATHER_MOST`) pass first. A child that fills half the pipe during a wait (a flood) is read as fast
    as it prints."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd
        self._gather = 0.0
        self._more = False  # the last read filled its buffer: the pipe may hold more
        self._gathered = 0  # bytes read since the last wait
        self._flood = capacity(fd) // 2

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        if self._gather and not self._more:
            await anyio.sleep(self._gather)
        while True:
            if self._fd is None:
                raise anyio.ClosedResourceError
            try:
                chunk = os.read(self._fd, max_bytes)
            except BlockingIOError:
                quiet = time.monotonic()
                await anyio.wait_readable(self._fd)
                if time.monotonic() - quiet >= GATHER_MOST:  # it went quiet: what it prints now is read at once
                    self._gather = 0.0
                continue
            if not chunk:
                raise anyio.EndOfStream
            self._gathered += len(chunk)
            self._more = len(chunk) == max_bytes
            if not self._more:  # the pipe is empty: wait for more, the longer while it keeps printing
                flood = self._gathered >= self._flood
                self._gather = 0.0 if flood else min(GATHER_MOST, max(GATHER, self._gather * 2))
                self._gathered = 0
            return chunk

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            anyio.notify_closing(fd)
            os.close(fd)


def close_all(readers: list[Pipe]) -> None:
    for reader in readers:
        reader.close()


def capacity(fd: int) -> int:
    """The bytes pipe ``fd`` holds (64 KiB where it cannot be asked)."""
    try:
        return int(fcntl.fcntl(fd, F_GETPIPE_SZ)) if F_GETPIPE_SZ is not None else 64 << 10
    except OSError:
        return 64 << 10


def make(count: int) -> list[tuple[int, int]]:
    """``count`` pipes (read end, write end), none inherited by other children than the one they are made for, each
    of :data:`PIPE_SIZE` where the system allows it (a user past their share of pipe memory keeps the default)."""
    made: list[tuple[int, int]] = []
    try:
        for _ in range(count):
            made.append(os.pipe())
            if F_SETPIPE_SZ is not None:
                with contextlib.suppress(OSError):
                    fcntl.fcntl(made[-1][1], F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        for pair in made:
            for fd in pair:
                os.close(fd)
        raise
    return made


async def pump(stream: anyio.abc.ByteReceiveStream | None, sink: Tail, handler: LinesHandler | None) -> None:
    if stream is None:
        return
    pending: list[bytes] = []  # the start of a line whose end has not come yet, as it came (joined once it ends)
    waiting = 0
    async for chunk in stream:
        sink.add(chunk)
        if handler is None:
            continue
        end = chunk.rfind(b"\n")
        if end < 0:
            pending.append(chunk)
            waiting += len(chunk)
            if waiting >= MAX_LINE:  # a line without end (`cat /dev/zero`): handed over in pieces, never all held
                data = b"".join(pending)
                cut = len(data) - len(data) % MAX_LINE
                await _handle(handler, b"\n".join(data[at : at + MAX_LINE] for at in range(0, cut, MAX_LINE)))
                pending, waiting = ([data[cut:]], len(data) - cut) if cut < len(data) else ([], 0)
            continue
        lines, rest = chunk[:end], chunk[end + 1 :]
        if pending:
            lines, pending, waiting = b"".join([*pending, lines]), [], 0
        if rest:
            pending, waiting = [rest], len(rest)
        if len(lines) > MAX_LINE:  # only then can a line be too long to hand over whole
            lines = b"\n".join(piece for line in lines.split(b"\n") for piece in _pieces(line))
        await _handle(handler, lines)
    if pending and handler is not None:  # the end of the output: a last line without its newline
        await _handle(handler, b"".join(pending))


def _pieces(line: bytes) -> list[bytes]:
    """``line`` in pieces of at most :data:`MAX_LINE` bytes (``[b""]`` for an empty one)."""
    return [line[at : at + MAX_LINE] for at in range(0, len(line), MAX_LINE)] or [line]


async def _handle(handler: LinesHandler, lines: bytes) -> None:
    result = handler(lines)
    if result is not None:
        await result


class Collector:
    """A child's input fed and its output read into tails, from synchronous code, in the calling thread: one wait
    covers its pipes and its exit together (a pidfd; where there is none, the exit is looked at every 50 ms), so
    nothing blocks on a full pipe, and an exit is seen even while something the child started still holds its
    output open."""

    def __init__(self, process: subprocess.Popen[bytes], data: bytes | None, out: Tail, err: Tail) -> None:
        self._process = process
        self._selector = selectors.DefaultSelector()
        self._sinks: dict[int, Tail] = {}
        for stream, sink in ((process.stdout, out), (process.stderr, err)):
            if stream is not None:
                self._selector.register(stream.fileno(), selectors.EVENT_READ)
                self._sinks[stream.fileno()] = sink
        self._input = memoryview(data or b"")
        self._stdin: int | None = None
        if process.stdin is not None:
            if data:
                self._stdin = process.stdin.fileno()
                os.set_blocking(self._stdin, False)
                self._selector.register(self._stdin, selectors.EVENT_WRITE)
            else:
                process.stdin.close()
        self._pidfd = groups.pidfd(process.pid)
        if self._pidfd is not None:
            self._selector.register(self._pidfd, selectors.EVENT_READ)

    def until_exit(self, deadline: float | None) -> bool:
        """Feed and read until the child exits (True) or ``deadline`` (``time.monotonic()``) passes (False)."""
        while self._process.poll() is None:
            if not self._step(deadline):
                return False
        return True

    def drain(self, deadline: float) -> None:
        """Read what is left of the output, until its pipes close or ``deadline`` passes (pipes still held by a
        process that escaped the child's group)."""
        if self._pidfd is not None:  # (readable from now on: it would wake every wait)
            self._selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        while self._sinks and self._step(deadline):
            pass

    def _step(self, deadline: float | None) -> bool:
        """One wait and what it brought; False once ``deadline`` has passed."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if self._pidfd is None:
            timeout = 0.05 if timeout is None else min(timeout, 0.05)
        for key, _ in self._selector.select(timeout):
            if key.fd == self._stdin:
                self._feed()
            elif key.fd in self._sinks:
                chunk = os.read(key.fd, READ_SIZE)
                if chunk:
                    self._sinks[key.fd].add(chunk)
                else:
                    self._selector.unregister(key.fd)
                    del self._sinks[key.fd]
        return deadline is None or time.monotonic() < deadline

    def _feed(self) -> None:
        try:
            written = os.write(self._stdin, self._input[:READ_SIZE]) if self._stdin is not None else 0
        except BlockingIOError:
            return
        except OSError:  # a child that exits without reading all of its input is not an error of ours
            written = len(self._input)
        self._input = self._input[written:]
        if not self._input and self._stdin is not None:
            self._selector.unregister(self._stdin)
            self._stdin = None
            if self._process.stdin is not None:
                with contextlib.suppress(OSError):
                    self._process.stdin.close()

    def close(self) -> None:
        self._selector.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class Reader:
    """A child's stdout read as the caller goes (a chunk, a line, so many bytes), from synchronous code, while what
    it says on stderr meanwhile is kept in a tail: one wait covers both pipes, so the child never blocks on a full
    stderr while the caller waits for its stdout."""

    def __init__(self, stdout: int, stderr: int, errors: Tail) -> None:
        self._stdout, self._stderr = stdout, stderr
        self.errors = errors
        self._buffer = bytearray()
        self._selector = selectors.DefaultSelector()
        self._selector.register(stdout, selectors.EVENT_READ)
        self._selector.register(stderr, selectors.EVENT_READ)
        self._open = {stdout, stderr}

    def _fill(self) -> None:
        """Wait until stdout says more or ends (what comes on stderr meanwhile is kept)."""
        while self._stdout in self._open:
            ready = [key.fd for key, _ in self._selector.select()]
            for fd in ready:
                self._read(fd)
            if self._stdout in ready:
                return

    def _read(self, fd: int) -> None:
        chunk = os.read(fd, READ_SIZE)
        if not chunk:
            self._selector.unregister(fd)
            self._open.discard(fd)
        elif fd == self._stderr:
            self.errors.add(chunk)
        else:
            self._buffer += chunk

    def _take(self, size: int) -> bytes:
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken

    def read1(self) -> bytes:
        """What stdout has said that was not taken yet, waiting for some if there is none; ``b""`` at its end."""
        if not self._buffer:
            self._fill()
        return self._take(len(self._buffer))

    def read(self, size: int = -1) -> bytes:
        """``size`` bytes of stdout, fewer at its end (all of it to its end: ``-1``)."""
        while (size < 0 or len(self._buffer) < size) and self._stdout in self._open:
            self._fill()
        return self._take(size if size >= 0 else len(self._buffer))

    def readline(self) -> bytes:
        """The next line of stdout with its end (the rest of it, without one, at its end)."""
        while b"\n" not in self._buffer and self._stdout in self._open:
            self._fill()
        end = self._buffer.find(b"\n")
        return self._take(end + 1 if end >= 0 else len(self._buffer))

    def drain_errors(self, deadline: float) -> None:
        """Keep what is left of stderr, until its end or ``deadline`` (what comes on stdout is kept for the caller)."""
        while self._stderr in self._open:
            ready = self._selector.select(max(0.0, deadline - time.monotonic()))
            if not ready:
                return
            for key, _ in ready:
                self._read(key.fd)

    def close(self) -> None:
        self._selector.close()
