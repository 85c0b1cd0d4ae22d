"""Turning SIGINT, SIGTERM and SIGHUP into cooperative cancellation.

Async work started through :func:`run` is cancelled on the first signal; its ``finally`` blocks (file restore,
process-group stop) run, then :class:`~beflow.errors.Interrupted` is raised. Every signal also stops the git
processes beflow is waiting on at that moment from synchronous code (:func:`waiting_on`: git's, in a worker thread
no cancellation reaches, in process groups of their own that neither the terminal's Ctrl-C nor a ``kill`` from
another shell reaches). A second signal marks the stop as forced, which shortens every grace period that is still
to come. A step of the cleanup that may take long (a hook) runs in :func:`cut_short_by_signal`: a signal stops it
even there.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import anyio
import anyio.abc

from beflow.errors import Interrupted

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _State:
    def __init__(self) -> None:
        self.signal_name: str | None = None
        self.forced = False
        self.sigint_to_child = False
        #: Scopes that the next signal cancels, shielded cleanup or not.
        self.cuttable: set[anyio.CancelScope] = set()


state = _State()

#: The process groups of the children synchronous code waits on right now (:func:`waiting_on`).
_waited: set[int] = set()
_waited_lock = threading.Lock()


@contextlib.contextmanager
def waiting_on(pgid: int) -> Iterator[None]:
    """While the block lasts, a signal to beflow sends SIGTERM to the process group ``pgid`` (a child that
    synchronous code waits on, in a worker thread that no cancellation reaches: a git command, and the hook it
    runs, that would otherwise hold the stop until it ends)."""
    with _waited_lock:
        _waited.add(pgid)
    try:
        yield
    finally:
        with _waited_lock:
            _waited.discard(pgid)


@contextlib.contextmanager
def leaving_sigint_to_child() -> Iterator[None]:
    """While a child in beflow's process group owns the terminal (a native client), Ctrl-C is its business: the
    terminal sends it SIGINT directly, and beflow goes on waiting. SIGTERM and SIGHUP still stop beflow.

    Unlike ``SIG_IGN``, this is not inherited: beflow still handles SIGINT (and does nothing), and a handled
    signal goes back to its default in a child at exec, so the child's Ctrl-C works as usual.
    """
    state.sigint_to_child = True
    try:
        yield
    finally:
        state.sigint_to_child = False


@contextlib.contextmanager
def cut_short_by_signal() -> Iterator[anyio.CancelScope]:
    """A scope that the next signal cancels, even inside shielded cleanup (where the first signal cannot reach):
    a hook of the cleanup is stopped by a signal instead of holding beflow until it ends. The caller checks
    ``scope.cancelled_caught``."""
    with anyio.CancelScope() as scope:
        state.cuttable.add(scope)
        try:
            yield scope
        finally:
            state.cuttable.discard(scope)


def _stop_waited_children() -> None:
    """SIGTERM to the groups :func:`waiting_on` names (git removes its lock files on SIGTERM; its hooks go with it),
    and to beflow's own children in its process group and what they started. Children of async code, in groups of
    their own (acpx, hooks), are stopped by their own supervisors."""
    import psutil

    with _waited_lock:
        waited = list(_waited)
    for pgid in waited:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGTERM)
    group = os.getpgrp()
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for child in children:
        try:
            if os.getpgid(child.pid) != group:
                continue
            tree = [child, *child.children(recursive=True)]  # with what it started (a git hook git waits for)
        except (OSError, psutil.Error):
            continue
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.send_signal(signal.SIGTERM)


def forced() -> bool:
    """Whether the user insisted (a second signal): whatever waits on a child to stop should stop waiting."""
    return state.forced


def grace(default: float) -> float:
    """The grace period to give a child now: short once the user insisted."""
    return 0.5 if state.forced else default


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` in an event loop; a signal cancels it and, after its cleanup, raises ``Interrupted``."""
    state.signal_name, state.forced = None, False
    state.cuttable = set()

    async def main() -> T:
        work = anyio.CancelScope()
        result: list[T] = []
        failure: list[BaseException] = []
        async with anyio.create_task_group() as tasks:

            async def listen(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
                with anyio.open_signal_receiver(*SIGNALS) as received:
                    task_status.started()
                    async for signum in received:
                        if signum == signal.SIGINT and state.sigint_to_child:
                            continue
                        for scope in list(state.cuttable):
                            scope.cancel()
                        if state.signal_name is None:
                            state.signal_name = signal.Signals(signum).name
                            work.cancel()
                        else:
                            state.forced = True
                        _stop_waited_children()  # a git step (a hook that hangs, say) would hold the stop

            # The handlers are in place before the work starts: a signal that came earlier would kill
            # beflow without its cleanup.
            await tasks.start(listen)
            with work:
                try:
                    result.append(await fn())
                except Exception as exc:  # re-raised below, outside the task group (no ExceptionGroup)
                    failure.append(exc)
            tasks.cancel_scope.cancel()
        if failure:
            raise failure[0]
        if state.signal_name is not None and not result:
            raise Interrupted(state.signal_name)
        return result[0]

    return anyio.run(main)


def _cancel_pending() -> bool:
    """Whether the current task is being cancelled (a signal, a watch stopping the run) though no checkpoint has
    said so yet: the step that was running failed of the same interruption."""
    return anyio.current_effective_deadline() == -math.inf


async def being_cancelled() -> bool:
    """Whether the run is being cancelled, for a step that just failed. Git gets the terminal's Ctrl-C too and can
    die of it before beflow's own signal handler has had its turn on the event loop: a short shielded pause lets
    the handler run, so an interrupted step is taken for the cancellation it is, never for a failure."""
    if _cancel_pending():
        return True
    with anyio.CancelScope(shield=True):
        await anyio.sleep(0.1)
    return _cancel_pending()
