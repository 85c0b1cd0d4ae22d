"""Leases as a chain of comments, a :class:`~beflow.trackers.claims.ClaimStore` for a forge with no compare-and-swap.

Neither GitLab nor Jira can refuse a second writer on an issue, its labels or its state. What both have is comments
with ids that grow. So a claim is a comment of the token's own user holding a :class:`Lease` — owner, host, pid, a
nonce, ``takes`` (the id of the claim comment it supersedes, or null) and ``released`` — and every reader orders the
claim comments alone into one chain (:func:`chain_of`): the head starts as the lowest-id claim with ``takes: null``;
then, as long as some claims take the current head, the lowest-id one of them becomes the head. Every other claim
comment lost (it names a link someone else took first, or an older one) and is no link. A comment by anyone else, or
one whose lease does not read, is no claim at all. How a lease is written in a comment, and which comments count as
the user's own, is the forge's: a :class:`CommentChain` (GitLab's internal notes, :mod:`beflow.trackers.gitlab_claims`;
Jira's comments, :mod:`beflow.trackers.jira_claims`). Everything else is here, once.

The head is live while it is not released and its last edit (``updated_at``) is less than a lease old on the forge's
clock (the ``Date`` of the answer that listed the comments, :data:`CLOCK_MARGIN` allowed for). A ``Date`` is a header
anything on the way can get wrong, so it is checked against what the forge stamps its comments with: a head is never
counted live for more than a lease from a read, and a claim taking a head that the forge made before the head ran out
by its comments' clock is withdrawn (the ``Date`` that let it was ahead).

Claiming reads the comments, posts a claim taking the head (when it is not live), waits :data:`SETTLE` (a forge
answers a POST once its transaction commits, but a comment with a lower id whose transaction began earlier may become
visible a moment later), and reads again: the claim holds if and only if the head is its comment; a loser deletes its
comment. A renewal edits the comment (the edit moves its ``updated_at``) and reads the chain back; a release edits it
to ``released: true``; a dead head is taken over by a claim naming it.

Why two machines never both hold an issue: the head only moves by a comment naming it, and the first such comment (the
lowest id) wins for every reader alike, so two claimants of one head cannot both see their own comment as the head
(given that a comment is visible :data:`SETTLE` after the forge answered a later one). A head is only taken when its
last edit is older than the lease on the forge's clock; its holder counts its own lease from before the request that
made that edit, less a margin, and every request under the lease (renewals, writes: :meth:`CommentLeases.under_lease`)
is bounded by that deadline (:meth:`CommentChain.deadline`), so the holder has stopped before anyone may take the head.

Reading who holds a listing's issues (:meth:`CommentLeases.held`) costs no request while nothing changes: the tracker
tells the store each issue's ``updated_at`` from its listings (:meth:`CommentLeases.observe`), and an issue's comments
are read again only when that moved, or when a head seen live may have run out since. That answer is advice (GitLab
may touch an issue for a new note only once a minute; a claim made meanwhile shows when the claimant's label change
does): the claim itself is the truth, and refuses a taken issue.

An issue's comments are read up to a bound (:meth:`CommentChain.most`); an issue with more counts as held, and claiming
it is refused saying so.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Annotated, Protocol

from pydantic import BaseModel, ConfigDict, Field

from beflow.errors import BeflowError, LockedError
from beflow.trackers.claims import LEASE_FIX, Claim, ClaimInfo, ClaimLost, HeldLease, lease_claim, lease_margin, proven
from beflow.trackers.issue import as_utc, normalize_key, utc_now

#: How long a claimant waits between posting its claim and reading the chain back: a comment with a lower id whose
#: transaction began earlier may become visible a moment after the forge answered ours.
SETTLE = 1.0
#: A forge's ``Date`` shows whole seconds: a head is taken only when it ran out this much before the forge's now.
CLOCK_MARGIN = 1.0
#: How long a release waits for a renewal on its way (each is bounded by the lease anyway).
RELEASE_WAIT = 5.0


class Lease(BaseModel):
    """A lease as its claim comment holds it (beflow's own JSON, read back from the tracker: a comment whose JSON does
    not read as one is no claim)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    owner: str
    host: str
    pid: int
    #: Tells this process's claims from others' (a claim whose answer was lost is found by it).
    nonce: Annotated[str, Field(min_length=8)]
    #: The claim comment this one supersedes (the head when it was posted), or None for the first of a chain.
    takes: Annotated[int, Field(ge=0)] | None
    released: bool = False
    #: Bumped by every renewal: a tracker moves a comment's last edit only when its body changes.
    renewal: Annotated[int, Field(ge=0)] = 0


@dataclass(frozen=True)
class Link:
    """A claim comment: its id, its lease, when it was made and last edited."""

    id: int
    lease: Lease
    created_at: dt.datetime
    updated_at: dt.datetime


def link_of(comment_id: int, lease: Lease, created_at: dt.datetime, updated_at: dt.datetime | None) -> Link | None:
    """A claim comment of the token's own user as a link, or None: a claim only ever takes an older comment."""
    if lease.takes is not None and lease.takes >= comment_id:
        return None
    return Link(comment_id, lease, created_at, updated_at or created_at)


def chain_of(links: Iterable[Link]) -> list[Link]:
    """The chain of claims, first to head (empty: no claim): the lowest-id claim taking nothing starts it, and each
    next link is the lowest-id claim taking the one before."""
    first: dict[int | None, Link] = {}
    for link in sorted(links, key=lambda link: link.id):
        first.setdefault(link.lease.takes, link)
    chain: list[Link] = []
    head = first.get(None)
    while head is not None:  # (ids grow along the chain: it ends)
        chain.append(head)
        head = first.get(head.id)
    return chain


@dataclass(frozen=True)
class Reading:
    """An issue's claim comments as one answer listed them."""

    #: The claims among its comments: the token's own user's, whose lease reads (:func:`link_of`).
    links: list[Link]
    #: False when the issue has more comments than are read (:meth:`CommentChain.most`): who holds it cannot be told.
    complete: bool
    #: The forge's clock when it answered (its ``Date``, seconds since the epoch).
    now: float


class CommentChain(Protocol):
    """What differs by forge in a chain of claim comments: how an issue's claims are read, posted, edited and deleted,
    and its requests bounded by a deadline."""

    #: The forge's name and its word for comments, for messages ("GitLab", "notes").
    forge: str
    noun: str

    @property
    def unavailable(self) -> type[BeflowError]:
        """The error of a request whose answer was lost (no answer, a 5xx): a post may have been made all the same."""
        ...

    def most(self) -> int:
        """How many comments of an issue are read at most."""
        ...

    def read(self, key: str) -> Reading:
        """Issue ``key``'s claim comments, and the forge's clock when it listed them."""
        ...

    def post(self, key: str, lease: Lease) -> tuple[int, dt.datetime]:
        """Post a claim comment holding ``lease``; its id and when the forge made it."""
        ...

    def edit(self, key: str, comment_id: int, lease: Lease) -> bool:
        """Make claim comment ``comment_id`` hold ``lease``; False when it is gone (deleted)."""
        ...

    def delete(self, key: str, comment_id: int) -> None:
        """Delete claim comment ``comment_id`` (gone already is done)."""
        ...

    def deadline(self, at: float) -> AbstractContextManager[None]:
        """A block whose requests end by ``at`` (monotonic)."""
        ...


@dataclass(frozen=True)
class _Read:
    """What the comments of one issue said: the chain's head, who took over a given claim, the forge's clock."""

    key: str
    head: Link | None
    links: list[Link]
    now: float
    complete: bool

    def left(self, lease: float) -> float:
        """Seconds the head has left on the forge's clock (0 or less: released, run out, or none)."""
        if self.head is None or self.head.lease.released:
            return 0.0
        # Never more than a lease: a Date in the past (a stale cache's, a wrong clock's) holds a head no longer.
        return min(self.head.updated_at.timestamp() + lease + CLOCK_MARGIN - self.now, lease + CLOCK_MARGIN)

    def taker(self, comment_id: int) -> Link | None:
        """The claim that took comment ``comment_id`` over first, if any."""
        return next((link for link in sorted(self.links, key=lambda x: x.id) if link.lease.takes == comment_id), None)


@dataclass
class _Look:
    """What this process last read of an issue's claims: the issue's ``updated_at`` it had observed before reading,
    and until when (monotonic) the head it saw is live (None: not live)."""

    updated: dt.datetime | None
    live_until: float | None


class CommentLeases:
    """The leases of one project's issues as chains of claim comments on ``chain``'s forge; ``lease``: seconds a lease
    lasts unrenewed; ``settle``: :data:`SETTLE` (shorter in unit tests, where the fakes commit at once)."""

    def __init__(self, lease: float, chain: CommentChain, *, settle: float = SETTLE) -> None:
        self.lease = lease
        self.chain = chain
        self.settle = settle
        self._nonces: set[str] = set()  # the claims this process wrote
        self._holding: dict[str, HeldLease[int, Lease]] = {}  # issue key -> the lease this process holds on it
        self._lock = threading.Lock()
        self._observed: dict[str, dt.datetime] = {}  # issue key -> its updated_at, as the last listing showed it
        self._looks: dict[str, _Look] = {}

    # -- reading -----------------------------------------------------------------------------------------------------

    def _read(self, key: str) -> _Read:
        """Read issue ``key``'s claim comments and order them."""
        with self._lock:
            observed = self._observed.get(key)
        reading = self.chain.read(key)
        read_at = time.monotonic()
        chain = chain_of(reading.links)
        read = _Read(key, chain[-1] if chain else None, reading.links, reading.now, reading.complete)
        left = read.left(self.lease) if read.complete else math.inf
        # Seen live, it is counted held a little longer than it may last: the forge's now was read from a Date in
        # whole seconds, and a look again as soon as it may have run out would find it live for that second, again
        # and again.
        with self._lock:
            self._looks[key] = _Look(observed, read_at + left + CLOCK_MARGIN if left > 0 else None)
        return read

    def _live(self, read: _Read) -> bool:
        return not read.complete or read.left(self.lease) > 0

    def observe(self, seen: Mapping[str, dt.datetime]) -> None:
        """What a listing showed of each issue's ``updated_at``: :meth:`held` reads an issue's comments again only
        when it moved (a claim posted moves it), or when a head seen live may have run out."""
        with self._lock:
            # (to the millisecond the forge gives: two changes within one second are two changes)
            self._observed.update({normalize_key(key): _exact(when) for key, when in seen.items()})

    def held(self, keys: Iterable[str] = ()) -> set[str]:
        """Which of ``keys`` have a live claim: no request for an issue whose ``updated_at`` did not move since its
        comments were read (and whose head, seen live then, has not run out since)."""
        found = set()
        for key in map(normalize_key, keys):
            with self._lock:
                look, observed = self._looks.get(key), self._observed.get(key)
            fresh = (
                look is not None
                and observed is not None
                and look.updated == observed
                and (look.live_until is None or time.monotonic() < look.live_until)
            )
            if not fresh:
                self._read(key)
                with self._lock:
                    look = self._looks[key]
            assert look is not None
            if look.live_until is not None and time.monotonic() < look.live_until:
                found.add(key)
        return found

    def holder(self, key: str) -> ClaimInfo | None:
        key = normalize_key(key)
        read = self._read(key)
        if not read.complete:
            return ClaimInfo(key=key, owner="unknown", pid=0, host="unknown", since=utc_now())
        return _info(key, read.head) if read.head is not None and self._live(read) else None

    def last_holder(self, key: str) -> ClaimInfo | None:
        key = normalize_key(key)
        return _info(key, self._read(key).head)

    # -- claiming ----------------------------------------------------------------------------------------------------

    def _post(self, key: str, lease: Lease) -> tuple[int, dt.datetime]:
        """Post a claim comment; its id and when the forge made it. An answer that was lost (no answer, a 5xx) is
        settled by finding the nonce."""
        try:
            return self.chain.post(key, lease)
        except self.chain.unavailable:
            mine = next((link for link in self._read(key).links if link.lease.nonce == lease.nonce), None)
            if mine is None:
                raise
            return mine.id, mine.created_at

    def _delete(self, key: str, comment_id: int) -> None:
        """Delete a claim comment that lost (a failure is harmless: a comment that lost is no link, ever)."""
        with contextlib.suppress(BeflowError):
            self.chain.delete(key, comment_id)

    def claim(self, key: str, owner: str) -> Claim:
        key = normalize_key(key)
        read = self._read(key)
        if not read.complete:
            raise LockedError(
                f"issue {key} has more than {self.chain.most()} {self.chain.noun}: beflow cannot tell who holds it",
                fix="Run it from a new issue that links this one.",
            )
        head = read.head
        # A claim this process wrote and holds for no run (the answer to an earlier claim was lost) is its own:
        # taken over like a dead one, never reported as "claimed by" itself.
        own = head is not None and head.lease.nonce in self._nonces and key not in self._holding
        if head is not None and self._live(read) and not own:
            who = _who(head.lease)
            raise LockedError(f"issue {key} is claimed by {who}", fix=LEASE_FIX, holder=who)
        lease = Lease(
            owner=owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            nonce=secrets.token_hex(8),
            takes=head.id if head is not None else None,
        )
        self._nonces.add(lease.nonce)
        started = time.monotonic()
        comment_id, made_at = self._post(key, lease)
        if head is not None and not head.lease.released and not own and made_at < self._ran_out(head):
            # The forge made our comment before the head ran out on its own clock: the Date that said it had run out
            # was wrong (a proxy's, a clock's). Withdrawn: the head's holder may still be at work.
            self._delete(key, comment_id)
            who = _who(head.lease)
            raise LockedError(
                f"issue {key} is claimed by {who} ({self.chain.forge}'s Date header said the claim had run out, its "
                f"{self.chain.noun} say it had not)",
                fix=LEASE_FIX,
                holder=who,
            )
        time.sleep(self.settle)
        try:
            after = self._read(key)
        except BeflowError:
            self._delete(key, comment_id)  # (unknown whether it holds: it is withdrawn, and nobody took it yet)
            raise
        if after.head is None or after.head.id != comment_id or not after.complete:
            self._delete(key, comment_id)
            raise LockedError(f"issue {key} was claimed by another beflow just now", fix=LEASE_FIX)
        return self._held(key, owner, comment_id, lease, after.head.created_at, started)

    def _ran_out(self, head: Link) -> dt.datetime:
        """When ``head``'s lease runs out on the clock the forge stamps its comments with."""
        return head.updated_at + dt.timedelta(seconds=self.lease + CLOCK_MARGIN)

    def _held(self, key: str, owner: str, comment_id: int, lease: Lease, since: dt.datetime, started: float) -> Claim:
        # The lease runs from before the request that wrote it, on this process's clock, less a margin.
        state = HeldLease(comment_id, lease, started + self.lease - lease_margin(self.lease))
        info = ClaimInfo(key=key, owner=owner, pid=os.getpid(), host=socket.gethostname(), since=as_utc(since))

        def renew() -> None:
            # Bounded by the time the lease has left: a renewal that hangs fails before the lease ends, so that the
            # run is stopped while the issue is still its own (docs/trackers.md: leases).
            with state.lock, self.chain.deadline(state.expires):
                if state.expires <= time.monotonic() and not state.lost:  # another machine's turn may have come
                    state.lost = f"the claim on issue {key} could not be renewed before it ran out"
                if state.lost:
                    raise ClaimLost(state.lost)
                begun = time.monotonic()
                fresh = state.lease.model_copy(update={"renewal": state.lease.renewal + 1})
                if not self.chain.edit(key, comment_id, fresh):
                    state.lost = f"the claim on issue {key} was deleted"
                    raise ClaimLost(state.lost)
                state.lease = fresh
                read = self._read(key)
                if read.head is None or read.head.id != comment_id:
                    taker = read.taker(comment_id) or read.head
                    who = _who(taker.lease) if taker is not None else "nobody (the claim was deleted)"
                    state.lost = f"the claim on issue {key} was taken over by {who}"
                    raise ClaimLost(state.lost)
                state.expires = begun + self.lease - lease_margin(self.lease)

        state.renew = renew

        def release() -> None:
            self._holding.pop(key, None)
            with self._lock:
                self._looks.pop(key, None)  # (its listing may not move: the next look reads the comments)
            # A renewal on its way ends first (its edit would undo the release), or at least the wait does.
            waited = state.lock.acquire(timeout=RELEASE_WAIT)
            try:
                if state.lost:
                    return  # taken over already: nothing of ours to release
                state.lost = f"the claim on issue {key} was released"
                done = state.lease.model_copy(update={"released": True})
                with contextlib.suppress(BeflowError):  # an unreachable forge: the lease runs out by itself
                    self.chain.edit(key, comment_id, done)
            finally:
                if waited:
                    state.lock.release()

        self._holding[key] = state
        return lease_claim(info, state, release, held=lambda: self.under_lease(key), lease=self.lease)

    def under_lease(self, key: str, *, prove: bool = True) -> AbstractContextManager[None]:
        """The writes of the block, on an issue this process holds a lease on, are this lease's: first the lease is
        proven (renewed, and the chain read back: :class:`ClaimLost` when another machine took the issue over),
        then every request of the block ends before the lease does. ``prove=False`` (progress edits, which are
        frequent) only checks that the lease was not lost and has time left. An issue this process holds no lease
        on is written as it is (a person's command, a settling of an orphan under its own claim)."""
        key = normalize_key(key)
        return proven(self._holding.get(key), key, self.chain.deadline, prove=prove)


def _exact(value: dt.datetime) -> dt.datetime:
    """``value`` in UTC, as precise as it was given (a time without a zone is taken to be UTC)."""
    return (value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)


def _who(lease: Lease) -> str:
    return f"{lease.owner} (pid {lease.pid} on {lease.host})"


def _info(key: str, link: Link | None) -> ClaimInfo | None:
    if link is None:
        return None
    lease = link.lease
    return ClaimInfo(key=key, owner=lease.owner, pid=lease.pid, host=lease.host, since=as_utc(link.created_at))
