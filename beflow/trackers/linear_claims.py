"""Linear's claims, a :class:`~beflow.trackers.claims.ClaimStore`: leases kept as generation comments on the issue.

Moving an issue to a started state and reading it back is no claim: two watchers both move it, both read their own
write, and the last writer wins. Linear has no compare-and-swap on an issue, but it has one thing that refuses a
second writer: a comment created with an id the client chose (``commentCreate(input: {id})``) is refused when that id
exists, and an id stays taken when its comment is deleted (Linear archives it). So a claim is a *generation*:

- Generation ``n`` of an issue is the comment whose id is :func:`generation_id` ``(issue UUID, n)`` — a hash of the
  two, with a UUID's version bits set to 4, so every watcher computes the same id and nobody else's comment has it.
  Its body holds the lease (owner, host, pid, ``n``, a nonce of the claimant's own, ``released``).
- The head is the highest generation; it holds the issue while it is not released, not deleted, and its last edit
  (``updatedAt``) is less than a lease old on Linear's clock (and no longer than a lease since this process first saw
  that edit, on its own clock).
- **Claiming** reads the head ``n`` (one listing of the issue's claim-shaped comments, deleted ones included) and,
  when it holds nobody, creates generation ``n + 1``. Of racing claimants exactly one create succeeds: the others'
  are refused, because the id is taken. A create whose answer was lost (no answer, a 5xx, a retry refused because the
  first try did make it) is settled by reading ``comment(id)``: the claim is this claimant's if and only if the
  comment's nonce is its own. A refused create whose generation holds nobody either (one the listing did not show
  yet) moves on to the next: the ids alone decide who holds an issue, the listing only saves steps.
- **Renewal** first reads ``comment(id of n + 1)``: when it exists the issue was taken over (:class:`ClaimLost`);
  else it edits its own generation (the edit moves ``updatedAt``). **Release** edits it to ``released``. **Take-over**
  of an expired or released head is the same race for ``n + 1``.

Why two watchers never both hold an issue: a generation has one id, so exactly one create of it succeeds, and a
watcher only holds the generation it created. A head is only taken over when its last edit is more than a lease old on
Linear's clock; its holder counts its lease from before the request of that edit, less a margin, and bounds every
request under the lease (renewals, writes: :meth:`LinearLeases.under_lease`) by that deadline, so it has stopped
before anyone may create the next generation. A renewal that lands late anyway edits a generation that is no longer
the head: it changes nothing, and the next renewal finds ``n + 1`` and stops.

What must hold of Linear for this: a create with a taken id is refused (deleted comments' ids included), and
``comment(id)`` finds a comment by its id, deleted or not (docs/trackers.md says so to users too). The fake Linear the
tests use behaves so, and racing claimants are tested against it.

Reading who holds a listing's issues (:meth:`LinearLeases.held`) costs no request while nothing changes: the tracker
tells the store each issue's ``updatedAt`` (:meth:`LinearLeases.observe`), and an issue's claims are read again only
when that moved, or when a head seen live may have run out or been released since (a third of a lease later at most:
a release edits the claim alone). That answer is advice: the claim itself is the truth, and refuses a taken issue.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from beflow.config import LinearTrackerSettings
from beflow.errors import BeflowError, LockedError
from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from beflow.trackers.claims import LEASE_FIX, Claim, ClaimInfo, ClaimLost, HeldLease, lease_claim, lease_margin, proven
from beflow.trackers.issue import as_utc, normalize_key, utc_now
from beflow.trackers.linear_api import Api, LinearAuthError, LinearError, Unavailable
from beflow.trackers.wire import Wire

#: Linear's clock shows in ``Date`` whole seconds: a head is taken only when it ran out this much before its now.
CLOCK_MARGIN = 1.0
#: An issue's claim comments are read 50 a page, at most this many pages: an issue with more counts as held.
MAX_PAGES = 10
#: How many generations a claim steps over (each made and let go while it looked) before it gives up.
MAX_STEPS = 20
#: The first words of every claim comment (the listing of an issue's claims filters by them).
VISIBLE = "beflow claim"
_LEASE = re.compile(r"^`(\{[^`\n]*\})`$", re.MULTILINE)


def generation_id(issue_id: str, generation: int) -> str:
    """The id of claim generation ``generation`` of the issue ``issue_id`` (its UUID): the same for every watcher, a
    UUID with its version bits set to 4 (Linear takes ids of that shape)."""
    digest = hashlib.sha256(f"beflow claim\n{issue_id}\n{generation}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


class Lease(BaseModel):
    """A lease as its claim comment holds it (beflow's own JSON, read back from Linear: a comment whose JSON does not
    read as one is no claim)."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    generation: Annotated[int, Field(ge=1)]
    owner: str
    host: str
    pid: int
    #: Tells this claimant's generation from another's (a create whose answer was lost is settled by it).
    nonce: Annotated[str, Field(min_length=8)]
    #: When the claim was first taken (epoch seconds, Linear's clock).
    since: float = 0.0
    released: bool = False
    #: Bumped by every renewal, so that every renewal changes the body.
    renewal: Annotated[int, Field(ge=0)] = 0


def body_of(lease: Lease) -> str:
    """The text of a claim comment holding ``lease``: a line people read, and the lease as inline code."""
    state = "released" if lease.released else f"held by {lease.owner}"
    data = json.dumps(lease.model_dump(), sort_keys=True)
    return f"{VISIBLE} {lease.generation}: {state} (a lease of beflow's; please leave it be).\n\n`{data}`"


def lease_of(text: str) -> Lease | None:
    """The lease in a claim comment's text; None when it holds none."""
    if not text.startswith(VISIBLE):
        return None
    match = _LEASE.search(text)
    if match is None:
        return None
    try:
        return Lease.model_validate_json(match.group(1))
    except ValidationError:
        return None


def is_claim(issue_id: str, comment: wire.Comment) -> bool:
    """Whether ``comment`` is a claim generation of the issue ``issue_id`` (the tracker leaves them out of an issue's
    conversation): a lease at its generation's own id."""
    lease = lease_of(comment.body)
    return lease is not None and comment.id == generation_id(issue_id, lease.generation)


@dataclass(frozen=True)
class Link:
    """A claim generation as read: its comment and lease, and when it was last edited (Linear's clock)."""

    id: str
    lease: Lease
    updated_at: dt.datetime
    deleted: bool

    @property
    def version(self) -> tuple[str, float]:
        return (self.id, self.updated_at.timestamp())


@dataclass
class _Known:
    """What this process last read of an issue's claims: the issue's ``updatedAt`` then, the head, and when a live
    head may have run out (monotonic)."""

    updated_at: dt.datetime | None
    head: Link | None
    recheck: float | None


class LinearLeases:
    """The leases of one team's issues. ``resolve`` gives an issue's UUID for its key (the tracker's cache, else a
    read): claims are kept by the issue's stable id, so an issue moved to another team keeps its claim."""

    def __init__(self, settings: LinearTrackerSettings, api: Api, resolve: Callable[[str], str]) -> None:
        self.settings = settings
        self.api = api
        self._resolve = resolve
        self._seen: dict[tuple[str, float], float] = {}  # (generation comment, its last edit) -> first seen
        self._written: set[str] = set()  # the nonces of this process's claims
        self._holding: dict[str, HeldLease[str, Lease]] = {}  # issue key -> the generation this process holds
        self._known: dict[str, _Known] = {}  # issue UUID -> what was last read of its claims
        self._observed: dict[str, tuple[str, dt.datetime]] = {}  # issue key -> (UUID, updatedAt) as last listed
        self._lock = threading.Lock()

    # -- reading ---------------------------------------------------------------------------------------------------

    def _head(self, issue_id: str) -> Link | None:
        """The highest claim generation of the issue, deleted ones included; :class:`LockedError` when the issue
        has more claim comments than are read."""
        best: Link | None = None
        after: str | None = None
        for _ in range(MAX_PAGES):
            variables = {
                "id": issue_id,
                "first": q.PAGE,
                "after": after,
                "includeArchived": True,
                "filter": {"body": {"startsWith": VISIBLE}},
            }
            data = self.api.query(q.COMMENTS, variables)
            page = wire.parse(_CommentsAnswer, data, "BeflowComments").issue.comments
            for comment in page.nodes:
                link = _link(issue_id, comment)
                if link is not None and (best is None or link.lease.generation > best.lease.generation):
                    best = link
            if not page.pageInfo.hasNextPage:
                return best
            after = page.pageInfo.endCursor
        raise LockedError(
            f"issue {issue_id} has more than {MAX_PAGES * q.PAGE} claim comments: beflow cannot tell who holds it",
            fix="Delete the issue's old beflow claim comments in Linear.",
        )

    def _read(self, issue_id: str, generation: int) -> Link | None:
        """Generation ``generation`` of the issue by its id (None: nobody created it)."""
        cid = generation_id(issue_id, generation)
        try:
            data = self.api.query(q.COMMENT_BY_ID, {"id": cid})
        except LinearError as error:
            if wire.INVALID_INPUT in error.codes or "ENTITY_NOT_FOUND" in error.codes:
                return None
            raise
        comment = wire.parse(_CommentAnswer, data, "BeflowComment").comment
        link = _link(issue_id, comment)
        if link is None or link.lease.generation != generation:
            # A comment at a generation's id that holds no lease of that generation: not beflow's writing, but its
            # id is taken all the same; nobody holds the issue through it.
            return Link(cid, _NOBODY.model_copy(update={"generation": generation}), comment.updatedAt, True)
        return link

    def _live(self, link: Link) -> bool:
        """Whether ``link`` still holds its issue: not released nor deleted, edited less than a lease ago on
        Linear's clock — and never longer than a lease since this process first saw that edit."""
        if link.lease.released or link.deleted:
            return False
        seen = self._seen.setdefault(link.version, time.monotonic())
        fresh = link.updated_at.timestamp() + self.settings.lease + CLOCK_MARGIN > self.api.now()
        return fresh and time.monotonic() - seen < self.settings.lease

    def _recheck(self, link: Link) -> float:
        """When (monotonic) a head seen live is looked at again: once it may have run out, or after a third of a lease
        (the renewals' pace: a release edits the claim alone, and moves nothing a listing shows)."""
        now = time.monotonic()
        seen = self._seen.setdefault(link.version, now)
        by_clock = now + link.updated_at.timestamp() + self.settings.lease + CLOCK_MARGIN - self.api.now()
        return min(seen + self.settings.lease, by_clock, now + self.settings.lease / 3)

    # -- claiming --------------------------------------------------------------------------------------------------

    def claim(self, key: str, owner: str) -> Claim:
        started = time.monotonic()
        issue_id = self._resolve(key)
        head = self._head(issue_id)
        for _ in range(MAX_STEPS):
            if head is not None and self._live(head):
                # A generation of this process's that holds no run (its claim's answer was lost) is taken over like
                # a dead one, never reported as "claimed by" itself.
                own = head.lease.nonce in self._written and key not in self._holding
                if not own:
                    who = _who(head.lease)
                    raise LockedError(f"issue {key} is claimed by {who}", fix=LEASE_FIX, holder=who)
            lease = Lease(
                generation=1 if head is None else head.lease.generation + 1,
                owner=owner,
                host=socket.gethostname(),
                pid=os.getpid(),
                nonce=secrets.token_hex(8),
                since=self.api.now(),
            )
            taken = self._create(key, issue_id, lease)
            if taken is None:
                return self._held(key, issue_id, generation_id(issue_id, lease.generation), lease, started)
            if self._live(taken):
                who = _who(taken.lease)
                raise LockedError(f"issue {key} was claimed by {who} just now", fix=LEASE_FIX, holder=who)
            # A generation the listing did not show (Linear's listing lags, or rewrote its words), holding nobody:
            # the next one is raced for. The ids alone decide who holds the issue; the listing only saves steps.
            head = taken
        raise LockedError(
            f"issue {key}: more than {MAX_STEPS} claims of it were made while beflow looked", fix=LEASE_FIX
        )

    def _create(self, key: str, issue_id: str, lease: Lease) -> Link | None:
        """Create the generation ``lease`` names: None when this claimant made it, else the generation someone
        else made at that id (the create was refused)."""
        cid = generation_id(issue_id, lease.generation)
        self._written.add(lease.nonce)
        variables = {"input": {"id": cid, "issueId": issue_id, "body": body_of(lease)}}
        try:
            # Safe to send again: a second create of one id is refused, never a second comment.
            self.api.mutate(q.COMMENT_CREATE, variables, retry=True)
            return None
        except LinearAuthError:
            raise
        except LinearError as error:
            # Refused (the id is taken: by a racing claimant, or by this create's own first try whose answer was
            # lost), or no answer at all: the comment at the id says whose generation it is.
            found = self._read(issue_id, lease.generation)
            if found is None:
                if isinstance(error, Unavailable):
                    raise
                raise LockedError(f"issue {key} is being claimed by another beflow", fix=LEASE_FIX) from None
            return None if found.lease.nonce == lease.nonce else found

    def _held(self, key: str, issue_id: str, cid: str, lease: Lease, started: float) -> Claim:
        # The lease runs from before the requests that wrote it, on this process's clock, less a margin.
        state = HeldLease(cid, lease, started + self.settings.lease - lease_margin(self.settings.lease))
        info = ClaimInfo(key=key, owner=lease.owner, pid=lease.pid, host=lease.host, since=utc_now())

        def renew() -> None:
            if state.lost:
                raise ClaimLost(state.lost)
            if time.monotonic() >= state.expires:
                # Run out: another watcher may hold the issue now, whether or not it took it yet.
                with contextlib.suppress(BeflowError):
                    taker = self._read(issue_id, lease.generation + 1)
                    state.lost = f"the claim on issue {key} was taken over by {_who(taker.lease)}" if taker else None
                state.lost = state.lost or f"the claim on issue {key} ran out before it was renewed"
                raise ClaimLost(state.lost)
            with state.lock, self.api.deadline(state.expires):
                begun = time.monotonic()
                taker = self._read(issue_id, lease.generation + 1)
                if taker is not None:
                    state.lost = f"the claim on issue {key} was taken over by {_who(taker.lease)}"
                    raise ClaimLost(state.lost)
                fresh = state.lease.model_copy(update={"renewal": state.lease.renewal + 1})
                try:
                    self.api.mutate(q.COMMENT_UPDATE, {"id": cid, "input": {"body": body_of(fresh)}}, retry=True)
                except LinearError as error:
                    if wire.INVALID_INPUT in error.codes or wire.FORBIDDEN in error.codes:
                        state.lost = f"the claim on issue {key} was deleted in Linear"
                        raise ClaimLost(state.lost) from None
                    raise
                state.lease = fresh
                state.expires = begun + self.settings.lease - lease_margin(self.settings.lease)

        def release() -> None:
            with self._lock:
                self._holding.pop(key, None)
                self._known.pop(issue_id, None)
            done = state.lease.model_copy(update={"released": True})
            with contextlib.suppress(BeflowError):  # unreachable Linear: the lease runs out by itself
                self.api.mutate(q.COMMENT_UPDATE, {"id": cid, "input": {"body": body_of(done)}}, retry=True)

        state.renew = renew
        with self._lock:
            self._holding[key] = state
            self._known.pop(issue_id, None)
        return lease_claim(info, state, release, held=lambda: self.under_lease(key), lease=self.settings.lease)

    def under_lease(self, key: str, *, prove: bool = True) -> AbstractContextManager[None]:
        """The writes of the block, on an issue this process holds, are this lease's (proven first: a renewal fails
        when another watcher took the issue over; see :func:`~beflow.trackers.claims.proven`). An issue this process
        holds no lease on is written as it is."""
        key = normalize_key(key)
        return proven(self._holding.get(key), key, self.api.deadline, prove=prove)

    # -- who holds what ------------------------------------------------------------------------------------------

    def observe(self, key: str, issue_id: str, updated_at: dt.datetime) -> None:
        """The tracker's listing saw issue ``key`` (``issue_id``) last updated at ``updated_at``."""
        with self._lock:
            self._observed[normalize_key(key)] = (issue_id, updated_at)

    def holder(self, key: str) -> ClaimInfo | None:
        key = normalize_key(key)
        head = self._head(self._resolve(key))
        return _info(key, head.lease) if head is not None and self._live(head) else None

    def last_holder(self, key: str) -> ClaimInfo | None:
        key = normalize_key(key)
        head = self._head(self._resolve(key))
        return _info(key, head.lease) if head is not None else None

    def held(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` have a live claim: an issue's claims are read again only when the issue changed since
        the last read, or when a head seen live may have run out; no request while nothing changes."""
        found: set[str] = set()
        for key in keys:
            key = normalize_key(key)
            mine = self._holding.get(key)
            if mine is not None and not mine.lost:
                found.add(key)
                continue
            observed = self._observed.get(key)
            issue_id, updated = observed if observed is not None else (self._resolve(key), None)
            known = self._known.get(issue_id)
            stale = (
                known is None
                or updated is None
                or known.updated_at != updated
                or (known.recheck is not None and time.monotonic() >= known.recheck)
            )
            if stale:
                head = self._head(issue_id)
                live = head is not None and self._live(head)
                known = _Known(updated, head, self._recheck(head) if head is not None and live else None)
                with self._lock:
                    self._known[issue_id] = known
            if known is not None and known.recheck is not None:
                found.add(key)
        return found


class _CommentsPage(Wire):
    comments: wire.Connection[wire.Comment]


class _CommentsAnswer(Wire):
    issue: _CommentsPage


class _CommentAnswer(Wire):
    comment: wire.CommentOnIssue


_NOBODY = Lease(generation=1, owner="unknown", host="unknown", pid=0, nonce="-" * 8, released=True)


def _link(issue_id: str, comment: wire.Comment) -> Link | None:
    lease = lease_of(comment.body)
    if lease is None or comment.id != generation_id(issue_id, lease.generation):
        return None
    return Link(comment.id, lease, comment.updatedAt, comment.archivedAt is not None)


def _who(lease: Lease) -> str:
    return f"{lease.owner} (pid {lease.pid} on {lease.host})"


def _info(key: str, lease: Lease) -> ClaimInfo:
    return ClaimInfo(
        key=key,
        owner=lease.owner,
        pid=lease.pid,
        host=lease.host,
        since=as_utc(dt.datetime.fromtimestamp(lease.since, dt.UTC)),
    )
