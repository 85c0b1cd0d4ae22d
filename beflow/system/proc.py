"""The one subprocess helper. Every program beflow starts (acpx, hooks, native clients, probes) goes through it;
git alone is run by GitPython, behind :mod:`beflow.repository.git`.

Children start in their own process group, so that a timeout or a cancellation can stop the child *and*
everything it started (acpx's agent, a hook's tools): SIGTERM to the group, a grace period, then SIGKILL. When a
child exits on its own, whatever it left behind in its group is stopped the same way. When beflow itself dies
(SIGKILL leaves it no say), the child gets a parent-death signal, and a watchdog stops its whole group.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import psutil

from beflow.errors import BeflowError, ToolMissingError
from beflow.system import interrupts

#: What a child's output is handed to as it arrives: the whole lines one read of its pipe brought, as they came,
#: joined by their newlines but for the last one's (``b"one\ntwo"``; ``b""`` is one empty line). A line longer than
#: :data:`MAX_LINE` comes in pieces of that size, each a line of its own. A read of acpx's relaying brings hundreds
#: of lines: handed over as one piece of bytes, they are masked, logged and followed a read at a time.
LinesHandler = Callable[[bytes], Awaitable[None] | None]

#: Linux's calls to ask and set a pipe's capacity (None elsewhere).
F_GETPIPE_SZ: int | None = getattr(fcntl, "F_GETPIPE_SZ", None)
F_SETPIPE_SZ: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)

#: Seconds between SIGTERM and SIGKILL when a child is stopped.
DEFAULT_GRACE = 5.0

#: Seconds to wait for a SIGKILLed group to be gone (a process in uninterruptible sleep can take a while).
KILL_WAIT = 5.0

#: Seconds to keep reading output after the child and its group are gone (pipes held by escaped processes).
DRAIN = 2.0

#: Bytes of each output stream kept in :class:`Completed` (the last ones): what a flood would otherwise pile up in
#: memory. Output a caller needs whole goes to its line handlers as it arrives.
MAX_CAPTURE = 1 << 20

#: The longest line handed to a line handler; a longer one is handed over in pieces of this size.
MAX_LINE = 8 << 20


@dataclass
class Completed:
    """What a finished child left: its exit status and, unless streamed to a terminal, its output."""

    argv: list[str]
    returncode: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    duration: float = 0.0
    pid: int | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """``exit 3``, ``killed by SIGKILL`` or ``timed out``, for messages."""
        if self.timed_out:
            return "timed out"
        if self.returncode is not None and self.returncode < 0:
            return f"killed by {signal.Signals(-self.returncode).name}"
        return f"exit {self.returncode}"


#: setpriv (util-linux) sets a child's parent-death signal before it starts the program.
_SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def _dying_with_us(argv: list[str], cwd: Path | None) -> list[str]:
    """``argv``, started so that it gets SIGTERM if beflow itself dies (a SIGKILL gives beflow no chance to stop
    its children): acpx then cancels its agent and exits instead of working on, orphaned, in a worktree or in the
    user's checkout. Where setpriv is missing, ``argv`` as it is."""
    if _SETPRIV is None:
        return argv
    program = argv[0]
    if os.sep in program:
        path = Path(cwd or ".") / program
        if not path.is_file():
            raise ToolMissingError(f"{program}: command not found")
        if not os.access(path, os.X_OK):
            raise ToolMissingError(f"{program}: not executable")
    elif shutil.which(program) is None:
        raise ToolMissingError(f"{program}: command not found")
    return [_SETPRIV, "--pdeathsig", "TERM", "--", *argv]


#: The shell a command line runs under (:func:`shell`). The command runs in the background while the shell waits,
#: so that a SIGTERM reaches the shell at once: beflow stopping it, or beflow's own death (the parent-death signal
#: setpriv sets). The shell passes it on to its whole group — a plain ``sh -c`` would die alone and leave what the
#: command started running — and when beflow is gone (the shell has been handed to another parent), it also sends
#: SIGKILL after a moment, as beflow would have.
_GUARD = (
    'trap \'trap "" TERM; kill -TERM 0; read -r _ _ _ parent _ < /proc/$$/stat; '
    '[ "$parent" = "$PPID" ] || { sleep 2; kill -KILL 0; }; exit 143\' TERM; '
    'sh -c "$1" & wait $!'
)

#: The watchdog of a child's process group (:func:`_watchdog`): it reads a pipe only beflow holds open, and when
#: that ends without beflow having stopped the watchdog first — beflow died, even by SIGKILL — the group gets
#: SIGTERM, then SIGKILL. The parent-death signal reaches the child alone; this reaches what it started too (acpx's
#: agent, the agent's tools), however they treat SIGTERM.
_WATCHDOG = 'read -r _; kill -s TERM -- "-$1" 2>/dev/null || exit 0; sleep 2; kill -s KILL -- "-$1" 2>/dev/null'


@dataclass
class _Watchdog:
    process: subprocess.Popen[bytes]
    pipe: int

    def dismiss(self) -> None:
        """The group was stopped by beflow (or is gone): the watchdog goes without doing anything."""
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.process.wait(timeout=KILL_WAIT)
        with contextlib.suppress(OSError):
            os.close(self.pipe)


def _watchdog(pgid: int) -> _Watchdog | None:
    """A watchdog for process group ``pgid`` (Linux, where it is the only way; elsewhere None). It lives in a
    session of its own, so that the terminal's Ctrl-C and hang-up reach beflow, not it."""
    if not sys.platform.startswith("linux"):
        return None
    read_end, write_end = os.pipe()  # (not inherited: only this watchdog holds the read end, only beflow the other)
    try:
        process = subprocess.Popen(
            ["sh", "-c", _WATCHDOG, "sh", str(pgid)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", os.defpath)},  # nothing of beflow's: any process of the user reads it
        )
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return _Watchdog(process, write_end)


#: The environment variable that marks every process started for one :func:`run` with ``stop_escaped``: processes
#: inherit it, even those that leave the group and the session (``setsid``, a double fork), so they can be found.
TAG = "BEFLOW_PROCESS_TAG"


def shell(command: str) -> list[str]:
    """The argv that runs ``command`` (a shell command line, such as a hook's) under the guard of :data:`_GUARD`."""
    if not sys.platform.startswith("linux"):
        return ["sh", "-c", command]
    return ["sh", "-c", _GUARD, "sh", command]


def tagged(tag: str) -> list[psutil.Process]:
    """The live processes whose environment carries ``TAG=tag`` (only beflow's own user's can be read)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if process.environ().get(TAG) == tag and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


async def stop_tagged(tag: str, grace: float = DEFAULT_GRACE) -> None:
    """Stop every process tagged ``tag``: SIGTERM, the grace period, SIGKILL; until none is left."""
    with anyio.CancelScope(shield=True):
        deadline = anyio.current_time() + grace
        signum = signal.SIGTERM
        while left := await anyio.to_thread.run_sync(tagged, tag):
            for process in left:
                with contextlib.suppress(psutil.Error):
                    process.send_signal(signum)
            if signum == signal.SIGKILL and anyio.current_time() > deadline + KILL_WAIT:
                return  # in uninterruptible sleep: nothing more can be done
            await anyio.sleep(0.05)
            if anyio.current_time() >= deadline or interrupts.forced():
                signum = signal.SIGKILL


def child_env(extra: Mapping[str, str] | None = None, unset: Sequence[str] = ()) -> dict[str, str]:
    """The environment for a child: beflow's own without ``unset``, with ``extra`` on top."""
    env = {name: value for name, value in os.environ.items() if name not in unset}
    if extra:
        env.update(extra)
    return env


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to a process group; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def kill_group_of(pid: int, *, marker: str) -> bool:
    """SIGKILL the process group that ``pid`` leads, if ``pid`` is alive and its command line holds ``marker`` (a
    pid read from a file may have been reused by another process since); whether it was there to kill."""
    try:
        process = psutil.Process(pid)
        if not _live(process) or not any(marker in part for part in process.cmdline()):
            return False
        pgid = os.getpgid(pid)
    except (psutil.Error, OSError):
        return False
    return _signal_group(pgid, signal.SIGKILL) if pgid == pid else _kill(process)


def _kill(process: psutil.Process) -> bool:
    try:
        process.kill()
    except psutil.Error:
        return False
    return True


def _live(process: psutil.Process) -> bool:
    """Still running: not gone, not a zombie, and not a later process that got the pid (psutil checks that).

    A zombie cannot run and cannot be signalled away; it lingers until its parent, possibly an init that never
    reaps, collects it, so it does not count as left behind.
    """
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and _live(process):
                members.append(process.pid)
        except OSError:  # gone meanwhile
            continue
    return members


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


async def stop_group(pgid: int, grace: float = DEFAULT_GRACE, leader: anyio.abc.Process | None = None) -> None:
    """Stop a process group: SIGTERM to the leader, then to the group, then SIGKILL after ``grace`` seconds.

    The leader (acpx, a hook's shell) is asked first and given half the grace period, so that it can shut down
    what it started in order (acpx cancels the agent's turn and exits 0); what is still left then gets SIGTERM,
    and SIGKILL when the grace period is over. ``leader`` is reaped while waiting: an unreaped child stays in
    its group as a zombie. A second signal to beflow while it waits (:func:`beflow.system.interrupts.forced`) cuts the
    wait short.
    """
    with anyio.CancelScope(shield=True):
        deadline = anyio.current_time() + grace
        if leader is not None and leader.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                leader.send_signal(signal.SIGTERM)
            leader_deadline = anyio.current_time() + grace / 2
            while leader.returncode is None and anyio.current_time() < leader_deadline and not interrupts.forced():
                with anyio.move_on_after(0.05):
                    await leader.wait()
        if not _signal_group(pgid, signal.SIGTERM):
            return
        while anyio.current_time() < deadline and not interrupts.forced():
            if leader is not None and leader.returncode is None:
                with anyio.move_on_after(0.05):
                    await leader.wait()
            if not _group_alive(pgid):
                return
            await anyio.sleep(0.02)
        _signal_group(pgid, signal.SIGKILL)
        # SIGKILL takes effect asynchronously: wait (briefly) until the group is gone, so that nothing of it
        # still runs (writes files, holds a worktree) when the caller goes on.
        with anyio.move_on_after(KILL_WAIT):
            while _group_alive(pgid):
                await anyio.sleep(0.01)


def _tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every live process below it; empty when ``pid`` is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *(child for child in root.children(recursive=True) if _live(child))]
    except psutil.Error:
        return []


def _signal_all(processes: list[psutil.Process], signum: int) -> None:
    for process in processes:
        # psutil refuses to signal a pid that a later process took meanwhile: only the tree's own get it.
        with contextlib.suppress(psutil.Error):
            process.send_signal(signum)


async def stop_tree(leader: anyio.abc.Process, grace: float = DEFAULT_GRACE) -> None:
    """Stop a child that shares beflow's process group, and everything it started: the tree is taken before the
    child goes (its orphans would be lost to init), then SIGTERM, the grace period, SIGKILL."""
    with anyio.CancelScope(shield=True):
        tree = _tree(leader.pid)
        _signal_all(tree, signal.SIGTERM)
        deadline = anyio.current_time() + grace
        while anyio.current_time() < deadline and not interrupts.forced():
            if leader.returncode is None:
                with anyio.move_on_after(0.05):
                    await leader.wait()
            if not any(_live(process) for process in tree):
                return
            await anyio.sleep(0.02)
        _signal_all(tree, signal.SIGKILL)
        # As in stop_group: SIGKILL takes effect asynchronously; nothing of the tree may run on when we return.
        with anyio.move_on_after(KILL_WAIT):
            while any(_live(process) for process in tree):
                if leader.returncode is None:
                    with anyio.move_on_after(0.01):
                        await leader.wait()
                await anyio.sleep(0.01)


async def _feed(stream: anyio.abc.ByteSendStream, data: bytes) -> None:
    # A child that exits without reading all of its input is not an error of ours.
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(data)
        await stream.aclose()


class _Tail:
    """The last ``limit`` bytes of a stream, in bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
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


class _Pipe(anyio.abc.ByteReceiveStream):
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
        self._flood = _capacity(fd) // 2

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


def _close(readers: list[_Pipe]) -> None:
    for reader in readers:
        reader.close()


def _capacity(fd: int) -> int:
    """The bytes pipe ``fd`` holds (64 KiB where it cannot be asked)."""
    try:
        return int(fcntl.fcntl(fd, F_GETPIPE_SZ)) if F_GETPIPE_SZ is not None else 64 << 10
    except OSError:
        return 64 << 10


def _pipes(count: int) -> list[tuple[int, int]]:
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


async def _pump(stream: anyio.abc.ByteReceiveStream | None, sink: _Tail, handler: LinesHandler | None) -> None:
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


async def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    timeout: float | None = None,
    stdin: bytes | None = None,
    on_stdout: LinesHandler | None = None,
    on_stderr: LinesHandler | None = None,
    terminal: bool = False,
    own_group: bool = True,
    grace: float = DEFAULT_GRACE,
    max_capture: int = MAX_CAPTURE,
    stop_escaped: bool = False,
) -> Completed:
    """Run ``argv`` to completion, a timeout, or the caller's cancellation.

    ``terminal`` gives the child beflow's own stdin, stdout and stderr (attended and native clients); otherwise
    output is captured and handed to ``on_stdout``/``on_stderr`` as it arrives, the lines of a read together.
    ``own_group=False`` keeps the child in beflow's process group, so the terminal's Ctrl-C reaches it directly (a
    native client that owns the terminal). A timeout is reported in the result, not raised; cancellation stops the
    child's group and propagates. Only the last ``max_capture`` bytes of each stream are kept in the result (memory
    stays flat whatever the child prints); lines reach the handlers whole, up to :data:`MAX_LINE` bytes.
    ``stop_escaped`` also stops, when the child ends, what it started that left its group (``setsid``, a daemon's
    double fork): such processes are found by a tag in their environment (:data:`TAG`).
    """
    argv = [str(a) for a in argv]
    tag = f"{os.getpid()}-{uuid.uuid4().hex}" if stop_escaped else None
    if tag is not None:
        env = {**(env or {}), TAG: tag}
    # Output comes through pipes of beflow's own (see _Pipe); with a terminal the child has beflow's streams.
    pipes = [] if terminal else _pipes(2)
    readers = [_Pipe(read) for read, _ in pipes]
    started = anyio.current_time()
    try:
        # Not cancellable while the child starts: asyncio, cancelled before it has connected the child's pipes,
        # kills the child alone and then waits for those pipes to close, which anything the child started in the
        # meantime holds open (Ctrl-C then hung for as long as that ran). Once started, the child is stopped below.
        with anyio.CancelScope(shield=True):
            process = await anyio.open_process(
                _dying_with_us(argv, cwd),
                cwd=cwd,
                env=child_env(env, unset),
                stdin=subprocess.PIPE if stdin is not None else (None if terminal else subprocess.DEVNULL),
                stdout=pipes[0][1] if pipes else None,
                stderr=pipes[1][1] if pipes else None,
                start_new_session=own_group,
            )
    except FileNotFoundError:
        _close(readers)
        raise ToolMissingError(f"{argv[0]}: command not found") from None
    except PermissionError:
        _close(readers)
        raise ToolMissingError(f"{argv[0]}: not executable") from None
    except OSError as exc:  # E2BIG (a prompt too long for argv), ENOEXEC, ...
        _close(readers)
        raise BeflowError(f"{argv[0]}: cannot start: {exc.strerror or exc}") from None
    except BaseException:
        _close(readers)
        raise
    finally:
        for _, write in pipes:  # the child has its copies: the output ends when the child's side is closed
            os.close(write)

    pgid = process.pid if own_group else None
    watchdog = _watchdog(pgid) if pgid is not None else None
    out, err = _Tail(max_capture), _Tail(max_capture)
    exited = False
    try:
        with anyio.move_on_after(math.inf if timeout is None else timeout) as deadline:
            async with anyio.create_task_group() as tasks:
                # Output is read while input is written: a child that answers before it has read everything
                # would otherwise block on a full pipe while we block on its full stdin.
                if readers:
                    tasks.start_soon(_pump, readers[0], out, on_stdout)
                    tasks.start_soon(_pump, readers[1], err, on_stderr)
                if stdin is not None and process.stdin is not None:
                    tasks.start_soon(_feed, process.stdin, stdin)
                await process.wait()
                exited = True
                # Whatever the child left running in its group may hold the output pipes open (`daemon &`):
                # stop it, so that the pumps see the end of the output; a process that escaped the group
                # (setsid) gets a short while, not forever.
                if pgid is not None:
                    await stop_group(pgid, grace, process)
                if tag is not None:
                    await stop_tagged(tag, grace)
                tasks.cancel_scope.deadline = min(tasks.cancel_scope.deadline, anyio.current_time() + DRAIN)
        timed_out = deadline.cancelled_caught and not exited
    except BaseExceptionGroup as group:
        # A failing line handler: raise its own exception, not anyio's group around it.
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
            raise group.exceptions[0] from None
        raise
    finally:
        with anyio.CancelScope(shield=True):
            try:
                if pgid is not None:
                    await stop_group(pgid, grace, process)
                elif process.returncode is None:
                    await stop_tree(process, grace)
                if tag is not None:
                    await stop_tagged(tag, grace)
                await process.wait()
                await process.aclose()
            finally:
                _close(readers)  # after the child ended: what it says on its way out does not meet a closed pipe
                if watchdog is not None:
                    watchdog.dismiss()
    return Completed(
        argv=argv,
        returncode=process.returncode,
        stdout=out.value(),
        stderr=err.value(),
        timed_out=timed_out,
        duration=anyio.current_time() - started,
        pid=process.pid,
    )


def run_sync(argv: Sequence[str], **kwargs: object) -> Completed:
    """:func:`run` from synchronous code (probes such as ``beflow doctor``). In the main thread, signals are
    beflow's own (:func:`beflow.system.interrupts.run`): Ctrl-C stops the child and raises
    :class:`~beflow.errors.Interrupted`, as in every other command."""
    if _in_event_loop():  # synchronous code the event loop called (a code host opened in `watch`): a thread's own
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="beflow-run-sync") as pool:
            return pool.submit(run_sync, argv, **kwargs).result()
    if threading.current_thread() is not threading.main_thread():
        return anyio.run(lambda: run(argv, **kwargs))  # type: ignore[arg-type]
    return interrupts.run(lambda: run(argv, **kwargs))  # type: ignore[arg-type]


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
