"""The one subprocess helper. Every program beflow starts (acpx, hooks, native clients, probes, git) goes through
it: :func:`run` from async code, :func:`run_sync` for the same from synchronous code, and for the many short
commands a step makes from a worker thread (git's, through :mod:`beflow.repository.git`) :func:`run_blocking` and
:func:`streaming`, which start no event loop and no helper process.

Children start in their own process group, so that a timeout or a cancellation can stop the child *and*
everything it started (acpx's agent, a hook's tools): SIGTERM to the group, a grace period, then SIGKILL. When a
child exits on its own, whatever it left behind in its group is stopped the same way. When beflow itself dies
(SIGKILL leaves it no say), the child of :func:`run` gets a parent-death signal, and a watchdog stops its whole
group; a blocking child is bounded by its timeout instead, and a signal to beflow stops it
(:func:`beflow.system.interrupts.waiting_on`). Finding and stopping the processes is
:mod:`beflow.system.groups`'s; reading their pipes, :mod:`beflow.system.pipes`'.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import anyio
import anyio.abc
import psutil

from beflow.errors import BeflowError, ToolMissingError
from beflow.system import groups, interrupts, pipes

#: What a child's output is handed to as it arrives (:data:`beflow.system.pipes.LinesHandler`).
LinesHandler = pipes.LinesHandler

#: Seconds between SIGTERM and SIGKILL when a child is stopped.
DEFAULT_GRACE = 5.0

#: Seconds to keep reading output after the child and its group are gone (pipes held by escaped processes).
DRAIN = 2.0

#: Bytes of each output stream kept in :class:`Completed` (the last ones): what a flood would otherwise pile up in
#: memory. Output a caller needs whole goes to its line handlers as it arrives.
MAX_CAPTURE = 1 << 20


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
    #: The streams that said more than was kept (``"stdout"``, ``"stderr"``): what is kept is their end.
    clipped: tuple[str, ...] = ()

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


def shell(command: str) -> list[str]:
    """The argv that runs ``command`` (a shell command line, such as a hook's) under the guard of :data:`_GUARD`."""
    if not sys.platform.startswith("linux"):
        return ["sh", "-c", command]
    return ["sh", "-c", _GUARD, "sh", command]


def child_env(extra: Mapping[str, str] | None = None, unset: Sequence[str] = ()) -> dict[str, str]:
    """The environment for a child: beflow's own without ``unset``, with ``extra`` on top."""
    env = {name: value for name, value in os.environ.items() if name not in unset}
    if extra:
        env.update(extra)
    return env


def kill_group_of(pid: int, *, marker: str) -> bool:
    """SIGKILL the process group that ``pid`` leads, if ``pid`` is alive and its command line holds ``marker`` (a
    pid read from a file may have been reused by another process since); whether it was there to kill."""
    try:
        process = psutil.Process(pid)
        if not groups.live(process) or not any(marker in part for part in process.cmdline()):
            return False
        pgid = os.getpgid(pid)
    except (psutil.Error, OSError):
        return False
    return groups.signal_group(pgid, signal.SIGKILL) if pgid == pid else groups.kill(process)


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
        if not groups.signal_group(pgid, signal.SIGTERM):
            return
        while anyio.current_time() < deadline and not interrupts.forced():
            if leader is not None and leader.returncode is None:
                with anyio.move_on_after(0.05):
                    await leader.wait()
            if not groups.group_alive(pgid):
                return
            await anyio.sleep(0.02)
        groups.signal_group(pgid, signal.SIGKILL)
        # SIGKILL takes effect asynchronously: wait (briefly) until the group is gone, so that nothing of it
        # still runs (writes files, holds a worktree) when the caller goes on.
        with anyio.move_on_after(groups.KILL_WAIT):
            while groups.group_alive(pgid):
                await anyio.sleep(0.01)


async def _feed(stream: anyio.abc.ByteSendStream, data: bytes) -> None:
    # A child that exits without reading all of its input is not an error of ours.
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(data)
        await stream.aclose()


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
    stays flat whatever the child prints); lines reach the handlers whole, up to ``pipes.MAX_LINE`` bytes.
    ``stop_escaped`` also stops, when the child ends, what it started that left its group (``setsid``, a daemon's
    double fork): such processes are found by a tag in their environment (:data:`beflow.system.groups.TAG`).
    """
    argv = [str(a) for a in argv]
    tag = f"{os.getpid()}-{uuid.uuid4().hex}" if stop_escaped else None
    if tag is not None:
        env = {**(env or {}), groups.TAG: tag}
    # Output comes through pipes of beflow's own (see pipes.Pipe); with a terminal the child has beflow's streams.
    made = [] if terminal else pipes.make(2)
    readers = [pipes.Pipe(read) for read, _ in made]
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
                stdout=made[0][1] if made else None,
                stderr=made[1][1] if made else None,
                start_new_session=own_group,
            )
    except FileNotFoundError:
        pipes.close_all(readers)
        raise ToolMissingError(f"{argv[0]}: command not found") from None
    except PermissionError:
        pipes.close_all(readers)
        raise ToolMissingError(f"{argv[0]}: not executable") from None
    except OSError as exc:  # E2BIG (a prompt too long for argv), ENOEXEC, ...
        pipes.close_all(readers)
        raise BeflowError(f"{argv[0]}: cannot start: {exc.strerror or exc}") from None
    except BaseException:
        pipes.close_all(readers)
        raise
    finally:
        for _, write in made:  # the child has its copies: the output ends when the child's side is closed
            os.close(write)

    pgid = process.pid if own_group else None
    watchdog = groups.watchdog(pgid) if pgid is not None else None
    out, err = pipes.Tail(max_capture), pipes.Tail(max_capture)
    exited = False
    try:
        with anyio.move_on_after(math.inf if timeout is None else timeout) as deadline:
            async with anyio.create_task_group() as tasks:
                # Output is read while input is written: a child that answers before it has read everything
                # would otherwise block on a full pipe while we block on its full stdin.
                if readers:
                    tasks.start_soon(pipes.pump, readers[0], out, on_stdout)
                    tasks.start_soon(pipes.pump, readers[1], err, on_stderr)
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
                    await groups.stop_tagged(tag, grace)
                tasks.cancel_scope.deadline = min(tasks.cancel_scope.deadline, anyio.current_time() + DRAIN)
        timed_out = deadline.cancelled_caught and not exited
    except BaseExceptionGroup as failed:
        # A failing line handler: raise its own exception, not anyio's group around it.
        if len(failed.exceptions) == 1 and isinstance(failed.exceptions[0], Exception):
            raise failed.exceptions[0] from None
        raise
    finally:
        with anyio.CancelScope(shield=True):
            try:
                if pgid is not None:
                    await stop_group(pgid, grace, process)
                elif process.returncode is None:
                    await groups.stop_tree(process, grace)
                if tag is not None:
                    await groups.stop_tagged(tag, grace)
                await process.wait()
                await process.aclose()
            finally:
                # After the child ended: what it says on its way out does not meet a closed pipe.
                pipes.close_all(readers)
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


def _popen(
    argv: list[str],
    cwd: Path | None,
    env: Mapping[str, str] | None,
    unset: Sequence[str],
    *,
    stdin: int,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """``argv`` started in a session and process group of its own, its output in pipes."""
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=child_env(env, unset),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except FileNotFoundError:
        raise ToolMissingError(f"{argv[0]}: command not found") from None
    except PermissionError:
        raise ToolMissingError(f"{argv[0]}: not executable") from None
    except OSError as exc:
        raise BeflowError(f"{argv[0]}: cannot start: {exc.strerror or exc}") from None


def run_blocking(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    timeout: float | None = None,
    stdin: bytes | None = None,
    pass_fds: Sequence[int] = (),
    grace: float = DEFAULT_GRACE,
    max_capture: int = MAX_CAPTURE,
) -> Completed:
    """Run ``argv`` to completion or a timeout, in the calling thread: :func:`run`'s supervision without an event
    loop, for the short commands synchronous code makes one after the other (git's).

    The child has a process group of its own; at the timeout that group is stopped (SIGTERM to the child, to the
    group, SIGKILL after ``grace``), and when the child exits, whatever it left running there. The timeout is
    reported in the result, not raised. ``pass_fds`` are inherited by the child (and what it starts). Only the
    last ``max_capture`` bytes of each stream are kept. A signal to beflow stops the child
    (:func:`beflow.system.interrupts.waiting_on`); an exception in this thread (a KeyboardInterrupt) stops its
    group before it goes on.
    """
    argv = [str(a) for a in argv]
    started = time.monotonic()
    process = _popen(argv, cwd, env, unset, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, pass_fds=pass_fds)
    out, err = pipes.Tail(max_capture), pipes.Tail(max_capture)
    collector = pipes.Collector(process, stdin, out, err)
    stopped = False
    try:
        with interrupts.waiting_on(process.pid):
            exited = collector.until_exit(None if timeout is None else started + timeout)
            # At the timeout: the child and its group. After an exit: what it left running, which may hold the
            # output pipes open (a hook's `daemon &`). A group already gone costs one system call.
            groups.stop_group_blocking(process.pid, grace, process)
            stopped = True
            collector.drain(time.monotonic() + DRAIN)
    finally:
        if not stopped:
            groups.stop_group_blocking(process.pid, interrupts.grace(grace), process)
        collector.close()
        process.poll()
    return Completed(
        argv=argv,
        returncode=process.returncode,
        stdout=out.value(),
        stderr=err.value(),
        timed_out=not exited,
        duration=time.monotonic() - started,
        pid=process.pid,
        clipped=tuple(name for name, tail in (("stdout", out), ("stderr", err)) if tail.clipped),
    )


class Stream:
    """A child whose output is read as it comes (:attr:`stdout`) and whose input, if asked for, is written as the
    reader goes (:attr:`stdin`): :func:`streaming`. What it says on stderr meanwhile is kept (the last bytes), read
    in the same waits, so that it never blocks the child."""

    def __init__(self, argv: list[str], process: subprocess.Popen[bytes], max_capture: int) -> None:
        assert process.stdout is not None and process.stderr is not None
        self.argv = argv
        self.process = process
        self.stdout = pipes.Reader(process.stdout.fileno(), process.stderr.fileno(), pipes.Tail(max_capture))

    @property
    def stdin(self) -> IO[bytes]:
        if self.process.stdin is None:
            raise BeflowError(f"{self.argv[0]} was started without input")
        return self.process.stdin

    def finish(self) -> Completed:
        """Close the child's input and wait for it to end (its output read to the end first, by the caller)."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        self.stdout.drain_errors(time.monotonic() + DRAIN)
        returncode = self.process.wait()
        return Completed(argv=self.argv, returncode=returncode, stderr=self.stdout.errors.value(), pid=self.process.pid)

    def close(self, grace: float) -> None:
        """Stop the child and its group if still there, and close its pipes."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        groups.stop_group_blocking(self.process.pid, grace, self.process)
        self.stdout.close()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self.process.poll()


@contextlib.contextmanager
def streaming(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    stdin: bool = False,
    grace: float = DEFAULT_GRACE,
    max_capture: int = MAX_CAPTURE,
) -> Iterator[Stream]:
    """``argv`` started in a process group of its own for as long as the block lasts, its output read by the
    caller as it comes (a history of any length read a commit at a time, objects asked for one by one): memory
    stays bounded however much it prints. When the block ends, the child and its group are stopped if still
    there (SIGTERM, ``grace``, SIGKILL: the rest of its output is not wanted). No timeout: the caller reads at
    its own pace; a signal to beflow stops the child (:func:`beflow.system.interrupts.waiting_on`)."""
    argv = [str(a) for a in argv]
    process = _popen(argv, cwd, env, unset, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
    stream = Stream(argv, process, max_capture)
    try:
        with interrupts.waiting_on(process.pid):
            yield stream
    finally:
        stream.close(interrupts.grace(grace))
