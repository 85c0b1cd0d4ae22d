"""Claims behind one protocol: who holds an issue, and the ready and orphan logic every tracker shares.

A tracker keeps its issues; a :class:`ClaimStore` keeps who runs them. The local tracker's store is file locks
(:class:`FileClaims`: a claim lasts as long as its process), GitHub's is leases in git refs
(:class:`beflow.trackers.github_leases.GitHubLeases`: a claim is renewed, and a write made on its behalf proves it
first, :meth:`Claim.held`). A third — a workflow engine's exactly-once start — is a store of its own; the runner and
the dispatcher only ever see :class:`~beflow.trackers.claims.Claim` objects. What is ready and what is orphaned
follows from the issues and the store alone (:func:`ready_of`, :func:`orphans_of`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import anyio
import anyio.to_thread
from pydantic import BaseModel

from beflow.errors import BeflowError, LockedError
from beflow.system.locks import NotedLock
from beflow.trackers.issue import Issue, Status, format_time, normalize_key, utc_now

_T = TypeVar("_T")
_W = TypeVar("_W")
_L = TypeVar("_L")

#: How long a file claim waits for a lock someone else holds before reporting who holds it. A little more than
#: zero, because ``holder()`` probes a lock by taking it for an instant.
CLAIM_WAIT = 0.5


class ClaimInfo(BaseModel):
    """Who holds a claim on an issue, for display (the lock itself is the truth)."""

    key: str
    owner: str
    pid: int
    host: str
    since: dt.datetime


class ClaimLost(BeflowError):
    """A claim that ended without its holder releasing it: another process took the issue over."""

    code = "claim_lost"


class Claim:
    """An exclusive hold on one issue across processes; release it (or leave the ``with`` block) when done.

    The hold ends when it is released or when the holding process dies, whichever comes first. A claim on a remote
    tracker is a lease: its holder calls :meth:`renew` every ``renew_every`` seconds while the run lives, and a lease
    not renewed in time may be taken over by another machine (``renew`` then raises :class:`ClaimLost`), and a write
    made on the run's behalf elsewhere (a push, a pull request) is made within :meth:`held`.
    """

    def __init__(
        self,
        info: ClaimInfo,
        release: Callable[[], object],
        *,
        held: Callable[[], AbstractContextManager[Any]] | None = None,
        renew: Callable[[], object] | None = None,
        renew_every: float | None = None,
        expires: Callable[[], float] | None = None,
    ) -> None:
        self.info = info
        self._release = release
        self._held = held
        self._renew = renew
        self._expires = expires
        #: Seconds between renewals; None for claims that last as long as their process (local file locks).
        self.renew_every = renew_every if renew is not None else None
        self.released = False

    def renew(self) -> None:
        """Extend the lease; :class:`ClaimLost` when another process holds the issue now."""
        if self._renew is not None and not self.released:
            self._renew()

    def held(self) -> AbstractContextManager[Any]:
        """A block whose writes are this claim's: a lease is proven first (:class:`ClaimLost` when another process
        holds the issue now) and its requests end before the lease does; a claim that lasts as long as its process
        needs nothing."""
        return self._held() if self._held is not None else nullcontext()

    def seconds_left(self) -> float | None:
        """How long the lease lasts without another renewal (None: it lasts as long as its process)."""
        return None if self._expires is None else self._expires()

    @property
    def key(self) -> str:
        return self.info.key

    def release(self) -> None:
        """Give the issue up; releasing twice is harmless."""
        if not self.released:
            self.released = True
            self._release()

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<Claim {self.info.key} by {self.info.owner} ({state})>"


@runtime_checkable
class ClaimStore(Protocol):
    """Exclusive holds on issues across processes (and machines, for a remote store). Keys are the tracker's,
    already checked: the tracker says which issues exist, the store only who runs them."""

    def claim(self, key: str, owner: str) -> Claim:
        """Hold ``key`` exclusively; :class:`~beflow.errors.LockedError` naming the holder when taken."""
        ...

    def holder(self, key: str) -> ClaimInfo | None:
        """Who holds a live claim on ``key``, if anyone."""
        ...

    def last_holder(self, key: str) -> ClaimInfo | None:
        """Who held ``key`` last, live or not (the note a killed run left), if anyone said."""
        ...

    def held(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` have a live claim: one question for a whole listing (GitHub lists its claim refs once)."""
        ...

    def under_lease(self, key: str, *, prove: bool = True) -> AbstractContextManager[None]:
        """A block whose writes on ``key`` are made while this process's claim on it holds (:class:`ClaimLost`
        when a lease a remote tracker's writes prove first has lapsed: GitHub's git-ref leases, a fleet's running
        workflows); an issue this process holds no claim on is written as it is. A store whose claims cannot lapse
        behind the process's back (file locks) has nothing to prove."""
        ...


#: How the engine holds issues over a tracker's own store (a fleet: its running workflows over the tracker's
#: claims), given the tracker's identity (:attr:`~beflow.trackers.base.Tracker.identity`) and its store. Every
#: tracker takes one as its ``claims=`` argument (beflow.app composes them), so that no engine reaches into a tracker.
ClaimsOver = Callable[[str, "ClaimStore"], "ClaimStore"]


def ready_of(issues: Iterable[Issue], store: ClaimStore) -> list[Issue]:
    """The issues a run may start now: ``ready`` and unclaimed, by priority (lower first), then age."""
    candidates = [issue for issue in issues if issue.status == Status.READY]
    held = store.held([issue.key for issue in candidates]) if candidates else set()
    return sorted((issue for issue in candidates if issue.key not in held), key=Issue.order)


def orphans_of(issues: Iterable[Issue], store: ClaimStore) -> list[Issue]:
    """The issues ``in_progress`` that no live claim holds: the run that took them was killed."""
    candidates = [issue for issue in issues if issue.status == Status.IN_PROGRESS]
    held = store.held([issue.key for issue in candidates]) if candidates else set()
    return [issue for issue in candidates if issue.key not in held]


class FileClaims:
    """Claims as file locks with a note naming the holder, in ``directory`` (``.beflow/claims``): a claim ends when
    it is released or when its process dies, whichever comes first."""

    def __init__(self, directory: Path, *, create: Callable[[], Path] | None = None) -> None:
        self.directory = directory
        #: Makes the directory (and whatever it needs around it) on a first claim; reading never creates it.
        self._create = create

    def claim(self, key: str, owner: str) -> Claim:
        lock = self._lock(key, create=True)
        info = ClaimInfo(key=key, owner=owner, pid=os.getpid(), host=socket.gethostname(), since=utc_now())
        if not lock.acquire(info, timeout=CLAIM_WAIT):
            holder = lock.note()
            who = (
                f"{holder.owner} (pid {holder.pid} on {holder.host} since {format_time(holder.since)})"
                if holder
                else "another process"
            )
            raise LockedError(
                f"issue {key} is claimed by {who}",
                fix="Wait for that run to finish or stop it; a claim ends by itself when its process dies.",
                holder=who if holder else None,
            )
        return Claim(info, lock.release)

    def holder(self, key: str) -> ClaimInfo | None:
        key = normalize_key(key)
        lock = self._lock(key, create=False)
        if not lock.held_elsewhere():
            return None
        return lock.note() or ClaimInfo(key=key, owner="unknown", pid=0, host="unknown", since=utc_now())

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self._lock(normalize_key(key), create=False).note()

    def held(self, keys: Iterable[str]) -> set[str]:
        return {key for key in keys if self.holder(key) is not None}

    def under_lease(self, key: str, *, prove: bool = True) -> AbstractContextManager[None]:
        """Nothing to prove: a file lock lasts as long as its process."""
        return contextlib.nullcontext()

    def _lock(self, key: str, *, create: bool) -> NotedLock[ClaimInfo]:
        """The claim of ``key``: a lock, and the holder's note beside it."""
        directory = self._create() if create and self._create is not None else self.directory
        return NotedLock(directory / f"{key}.lock", directory / f"{key}.json", ClaimInfo)


async def keep_renewed(claim: Claim, lost: Callable[[str], None], notice: Callable[[str], None]) -> None:
    """Renew a lease every ``claim.renew_every`` seconds while the task lives; when it is lost — taken over, or not
    renewed before it ran out — say why (``lost(reason)``) and return. A renewal that failed while the lease still
    has time is said (``notice``) and tried again."""
    assert claim.renew_every is not None
    while True:
        await anyio.sleep(claim.renew_every)
        try:
            # A renewal bounds its own requests by the time the lease has left; the run never waits for one past
            # that either: a lease it cannot prove is a lease it has lost, before another machine's turn.
            with anyio.fail_after(max(claim.seconds_left() or 0.0, 0.0)):
                await anyio.to_thread.run_sync(claim.renew, abandon_on_cancel=True)
            continue
        except TimeoutError:
            reason = "the claim could not be renewed before it ran out"
        except ClaimLost as error:
            reason = error.message
        except BeflowError as error:
            left = claim.seconds_left()
            if left is None or left > claim.renew_every:
                notice(f"could not renew the claim (trying again): {error.message}")
                continue
            reason = f"the claim could not be renewed before it ran out: {error.message}"
        lost(reason)
        return


async def while_held(
    claim: Claim, work: Callable[[], Awaitable[_T]], lost: Callable[[str], None], notice: Callable[[str], None]
) -> _T | None:
    """``work()``, with ``claim``'s lease renewed beside it while it lives (:func:`keep_renewed`; a claim without a
    lease is held as it is). Losing the lease — taken over, or not renewed before it ran out — says why
    (``lost(reason)``) and cancels the work: another machine may be running the issue now. None: it was lost."""
    if claim.renew_every is None:
        return await work()
    run_scope, result, failure = anyio.CancelScope(), None, None

    def lose(reason: str) -> None:
        lost(reason)
        run_scope.cancel()

    async with anyio.create_task_group() as keeper:
        keeper.start_soon(keep_renewed, claim, lose, notice)
        try:
            with run_scope:
                result = await work()
        except Exception as error:  # raised as it is below, not wrapped in the task group's ExceptionGroup
            failure = error
        finally:
            keeper.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


# -- a lease this process holds, on any remote store (GitHub's refs, Linear's generations, chains of comments) -------

#: What a refused claim on a leased issue tells the person.
LEASE_FIX = "Wait for that run to finish or stop it; a claim ends by itself when its lease runs out."


@dataclass
class HeldLease(Generic[_W, _L]):
    """A lease this process holds: where it is kept (``at``: its claim comment's id, the commit its claim ref points
    at), the lease written there, when it runs out (monotonic, with a margin), why it was lost if it was; renewals
    one at a time (``lock``)."""

    at: _W
    lease: _L
    expires: float
    lost: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    renew: Callable[[], None] = lambda: None


def lease_margin(lease: float) -> float:
    """How much sooner than the tracker this process takes its own lease to end: the requests that wrote the lease
    took time, and the clocks of the tracker's answers show whole seconds."""
    return min(2.0, lease / 4)


def lease_claim(
    info: ClaimInfo,
    state: HeldLease[Any, Any],
    release: Callable[[], object],
    *,
    held: Callable[[], AbstractContextManager[Any]],
    lease: float,
) -> Claim:
    """The claim of a lease ``state`` holds (``lease``: seconds it lasts unrenewed), renewed three times a lease."""
    return Claim(
        info,
        release,
        held=held,
        renew=state.renew,
        renew_every=max(lease / 3, 0.2),
        expires=lambda: state.expires - time.monotonic(),
    )


@contextlib.contextmanager
def proven(
    state: HeldLease[Any, Any] | None,
    key: str,
    deadline: Callable[[float], AbstractContextManager[None]],
    *,
    prove: bool,
) -> Iterator[None]:
    """The block of a store's ``under_lease(key)``, given the lease it holds on ``key`` (None: none, and the block is
    written as it is): the lease is proven first (renewed: :class:`ClaimLost` when another machine took the issue
    over), or with ``prove=False`` (progress edits, which are frequent) only checked not lost and not run out; then
    every request of the block ends before the lease does (``deadline``)."""
    if state is None:
        yield
        return
    if state.lost:
        raise ClaimLost(state.lost)
    if prove:
        state.renew()
    elif state.expires - time.monotonic() <= 0:
        raise ClaimLost(f"the claim on issue {key} could not be renewed in time")
    with deadline(state.expires):
        yield
