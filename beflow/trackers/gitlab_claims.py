"""GitLab's claims, a :class:`~beflow.trackers.claims.ClaimStore`: leases kept as a chain of internal notes.

GitLab has no compare-and-swap on labels or issues, so a claim is a note on the issue — internal (``internal: true``),
written by the token's own user — whose hidden marker holds the lease as JSON: owner, host, pid, a nonce, ``takes``
(the id of the claim note it supersedes, or null) and ``released``. Every reader orders the claim notes alone into one
chain (:func:`chain_of`): the head starts as the lowest-id claim with ``takes: null``; then, as long as some claims
take the current head, the lowest-id one of them becomes the head. Every other claim note lost (it names a link
someone else took first, or an older one) and is no link. A note by anyone else, a public one, or one whose lease does
not read is no claim at all. The head is live while it is not released and its last edit (``updated_at``) is less than
a lease old on GitLab's clock (the ``Date`` of the answer that listed the notes, :data:`CLOCK_MARGIN` allowed for).
A ``Date`` is a header anything on the way can get wrong, so it is checked against what GitLab stamps its notes with:
a head is never counted live for more than a lease from a read, and a claim taking a head that GitLab made before the
head ran out by its notes' clock is withdrawn (the ``Date`` that let it was ahead).

Claiming reads the notes, posts a claim taking the head (when it is not live), waits :data:`SETTLE` (GitLab answers a
POST once its transaction commits, but a note with a lower id whose transaction began earlier may become visible a
moment later), and reads again: the claim holds if and only if the head is its note; a loser deletes its note. A
renewal edits the note (the edit moves its ``updated_at``) and reads the chain back; a release edits it to
``released: true``; a dead head is taken over by a claim naming it.

Why two machines never both hold an issue: the head only moves by a note naming it, and the first such note (the
lowest id) wins for every reader alike, so two claimants of one head cannot both see their own note as the head
(given that a note is visible :data:`SETTLE` after GitLab answered a later one). A head is only taken when its last
edit is older than the lease on GitLab's clock; its holder counts its own lease from before the request that made
that edit, less a margin, and every request under the lease (renewals, writes: :meth:`GitLabLeases.under_lease`) is
bounded by that deadline (``api.deadline``), so the holder has stopped before anyone may take the head.

Reading who holds a listing's issues (:meth:`GitLabLeases.held`) costs no request while nothing changes: the tracker
tells the store each issue's ``updated_at`` from its listings (:meth:`GitLabLeases.observe`), and an issue's notes are
read again only when that moved, or when a head seen live may have run out since. That answer is advice (GitLab may
touch an issue for a new note only once a minute; a claim made meanwhile shows when the claimant's label change
does): the claim itself is the truth, and refuses a taken issue.

An issue's notes are read 100 a page, at most :data:`MAX_PAGES` pages (2,000 notes); an issue with more counts as
held, and claiming it is refused saying so.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from beflow.config import GitLabTrackerSettings
from beflow.errors import BeflowError, LockedError
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.claims import Claim, ClaimInfo, ClaimLost, Lease, Link, chain_of
from beflow.trackers.gitlab_api import Api, GitLabError, Unavailable
from beflow.trackers.issue import as_utc, normalize_key, utc_now

#: How long a claimant waits between posting its claim note and reading the chain back: a note with a lower id whose
#: transaction began earlier may become visible a moment after GitLab answered ours.
SETTLE = 1.0
#: GitLab's ``Date`` shows whole seconds: a head is taken only when it ran out this much before GitLab's now.
CLOCK_MARGIN = 1.0
#: Notes are read 100 a page, at most this many pages (2,000 notes): an issue with more cannot be told free, and
#: counts as held (a claim on it is refused, naming the bound).
PER_PAGE = 100
MAX_PAGES = 20
#: How long a release waits for a renewal on its way (each is bounded by the lease anyway).
RELEASE_WAIT = 5.0

#: The visible line of a claim note; the lease follows it in beflow's hidden marker.
VISIBLE = "beflow is holding this issue for a run."
CLAIM_MARKER = "<!-- beflow:claim "
_BODY = re.compile(r"\A" + re.escape(VISIBLE) + r"\n\n" + re.escape(CLAIM_MARKER) + r"(\{[^\n]*\}) -->\Z")


class ClaimNote(wire.Note):
    """A note as the claims read it: whether it is internal (older GitLab versions call it ``confidential``)."""

    internal: bool = False
    confidential: bool = False


def body_of(lease: Lease) -> str:
    """The text of a claim note holding ``lease`` (``<`` and ``>`` escaped: nothing in it can end the comment)."""
    data = json.dumps(lease.model_dump(), sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")
    return f"{VISIBLE}\n\n{CLAIM_MARKER}{data} -->"


def is_claim_note(text: str) -> bool:
    """Whether ``text`` has the shape of a claim note (the tracker leaves them out of an issue's conversation)."""
    return _BODY.match(text) is not None


def link_of(note: ClaimNote, me: int) -> Link | None:
    """``note`` as a claim, or None: only an internal note by the token's own user whose whole text is a claim note
    with a lease that reads is one (a stranger's imitation, or beflow's own words quoting a marker, are not)."""
    if note.author.id != me or note.system or not (note.internal or note.confidential):
        return None
    found = _BODY.match(note.text)
    if found is None:
        return None
    try:
        lease = Lease.model_validate(json.loads(found.group(1)), strict=True)
    except (ValueError, ValidationError):
        return None
    if lease.takes is not None and lease.takes >= note.id:  # a claim only ever takes an older note
        return None
    return Link(note.id, lease, note.created_at, note.updated_at or note.created_at)


@dataclass(frozen=True)
class _Read:
    """What the notes of one issue said: the chain's head, who took over a given claim, GitLab's clock when read."""

    key: str
    head: Link | None
    links: list[Link]
    now: float
    #: False when the issue has more notes than are read (MAX_PAGES): who holds it cannot be told.
    complete: bool

    def left(self, lease: float) -> float:
        """Seconds the head has left on GitLab's clock (0 or less: released, run out, or none)."""
        if self.head is None or self.head.lease.released:
            return 0.0
        # Never more than a lease: a Date in the past (a stale cache's, a wrong clock's) holds a head no longer.
        return min(self.head.updated_at.timestamp() + lease + CLOCK_MARGIN - self.now, lease + CLOCK_MARGIN)

    def taker(self, note_id: int) -> Link | None:
        """The claim that took note ``note_id`` over first, if any."""
        return next((link for link in sorted(self.links, key=lambda x: x.id) if link.lease.takes == note_id), None)


@dataclass
class _Look:
    """What this process last read of an issue's claims: the issue's ``updated_at`` it had observed before reading,
    and until when (monotonic) the head it saw is live (None: not live)."""

    updated: dt.datetime | None
    live_until: float | None


class GitLabLeases:
    """The leases of one project's issues; ``call`` is the tracker's way of calling the API (its errors name the
    tracker's settings); ``me``: the token's user id, when the tracker already knows it (else ``GET /user``, once);
    ``settle``: :data:`SETTLE` (shorter in unit tests, where the fake commits at once)."""

    def __init__(
        self,
        settings: GitLabTrackerSettings,
        api: Api,
        base: str,
        call: Callable[..., Any],
        *,
        me: Callable[[], int] | None = None,
        settle: float = SETTLE,
    ) -> None:
        self.settings = settings
        self.api = api
        self._base = base
        self._call = call
        self._me_of = me
        self._me: int | None = None
        self.settle = settle
        self._nonces: set[str] = set()  # the claims this process wrote
        self._holding: dict[str, _HeldLease] = {}  # issue key -> the lease this process holds on it
        self._lock = threading.Lock()
        self._observed: dict[str, dt.datetime] = {}  # issue key -> its updated_at, as the last listing showed it
        self._looks: dict[str, _Look] = {}

    # -- reading -----------------------------------------------------------------------------------------------------

    def _user(self) -> int:
        if self._me is None:
            if self._me_of is not None:
                self._me = self._me_of()
            else:
                self._me = wire.parse(wire.User, self._call(self.api.get, "/user"), "GET /user").id
        return self._me

    def _notes(self, key: str) -> str:
        return f"{self._base}/issues/{key}/notes"

    def _read(self, key: str) -> _Read:
        """Read issue ``key``'s notes (every page, up to :data:`MAX_PAGES`) and order its claims."""
        me = self._user()
        with self._lock:
            observed = self._observed.get(key)
        path = self._notes(key)
        params = {"sort": "asc", "order_by": "created_at", "per_page": PER_PAGE}
        raw = self._call(self.api.paginate, path, params, max_pages=MAX_PAGES)
        now, read_at = self.api.now(), time.monotonic()
        notes, _ = wire.read_each(ClaimNote, raw, f"GET {path}")  # (a note that does not read is no claim)
        links = [link for note in notes if (link := link_of(note, me)) is not None]
        chain = chain_of(links)
        read = _Read(key, chain[-1] if chain else None, links, now, len(raw) < PER_PAGE * MAX_PAGES)
        left = read.left(self.settings.lease) if read.complete else math.inf
        # Seen live, it is counted held a little longer than it may last: GitLab's now was read from a Date in whole
        # seconds, and a look again as soon as it may have run out would find it live for that second, again and again.
        with self._lock:
            self._looks[key] = _Look(observed, read_at + left + CLOCK_MARGIN if left > 0 else None)
        return read

    def _live(self, read: _Read) -> bool:
        return not read.complete or read.left(self.settings.lease) > 0

    def observe(self, seen: Mapping[str, dt.datetime]) -> None:
        """What a listing showed of each issue's ``updated_at``: :meth:`held` reads an issue's notes again only when
        it moved (a claim note posted moves it), or when a head seen live may have run out."""
        with self._lock:
            # (to the millisecond GitLab gives: two changes within one second are two changes)
            self._observed.update({normalize_key(key): _exact(when) for key, when in seen.items()})

    def held(self, keys: Iterable[str] = ()) -> set[str]:
        """Which of ``keys`` have a live claim: no request for an issue whose ``updated_at`` did not move since its
        notes were read (and whose head, seen live then, has not run out since)."""
        found = set()
        for key in map(normalize_key, keys):
            with self._lock:
                look, observed = self._looks.get(key), self._observed.get(key)
            now = time.monotonic()
            fresh = (
                look is not None
                and observed is not None
                and look.updated == observed
                and (look.live_until is None or now < look.live_until)
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
        return self._info(key, read.head) if read.head is not None and self._live(read) else None

    def last_holder(self, key: str) -> ClaimInfo | None:
        key = normalize_key(key)
        return self._info(key, self._read(key).head)

    def _info(self, key: str, link: Link | None) -> ClaimInfo | None:
        if link is None:
            return None
        lease = link.lease
        return ClaimInfo(key=key, owner=lease.owner, pid=lease.pid, host=lease.host, since=as_utc(link.created_at))

    # -- claiming ----------------------------------------------------------------------------------------------------

    def _margin(self) -> float:
        """How much sooner than GitLab this process takes its own lease to end: the requests that wrote the lease
        took time, and the clocks of GitLab's answers show whole seconds."""
        return min(2.0, self.settings.lease / 4)

    def _post(self, key: str, lease: Lease) -> tuple[int, dt.datetime]:
        """Post a claim note; its id and when GitLab made it. An answer that was lost (no answer, a 5xx) is settled
        by finding the nonce."""
        path = self._notes(key)
        try:
            made = self._call(self.api.request, "POST", path, json={"body": body_of(lease), "internal": True})
        except Unavailable:
            mine = next((link for link in self._read(key).links if link.lease.nonce == lease.nonce), None)
            if mine is None:
                raise
            return mine.id, mine.created_at
        note = wire.parse(ClaimNote, made.data, f"POST {path}")
        if not (note.internal or note.confidential):  # (a GitLab before internal notes: anyone would see a claim)
            self._delete(key, note.id)
            raise GitLabError(
                f"GitLab made the claim note on issue {key} a public one: it has no internal notes",
                fix="beflow's claims on GitLab need internal notes (GitLab 15.0 or later).",
            )
        return note.id, note.created_at

    def _delete(self, key: str, note_id: int) -> None:
        """Delete a claim note that lost (a failure is harmless: a note that lost is no link, ever)."""
        with contextlib.suppress(BeflowError):
            self._call(self.api.request, "DELETE", f"{self._notes(key)}/{note_id}", ok=(404,))

    def claim(self, key: str, owner: str) -> Claim:
        key = normalize_key(key)
        read = self._read(key)
        if not read.complete:
            raise LockedError(
                f"issue {key} has more than {PER_PAGE * MAX_PAGES} notes: beflow cannot tell who holds it",
                fix="Run it from a new issue that links this one.",
            )
        head = read.head
        # A claim this process wrote and holds for no run (the answer to an earlier claim was lost) is its own:
        # taken over like a dead one, never reported as "claimed by" itself.
        own = head is not None and head.lease.nonce in self._nonces and key not in self._holding
        if head is not None and self._live(read) and not own:
            who = _who(head.lease)
            raise LockedError(f"issue {key} is claimed by {who}", fix=_LOCKED_FIX, holder=who)
        lease = Lease(
            owner=owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            nonce=secrets.token_hex(8),
            takes=head.id if head is not None else None,
        )
        self._nonces.add(lease.nonce)
        started = time.monotonic()
        note_id, made_at = self._post(key, lease)
        if head is not None and not head.lease.released and not own and made_at < self._ran_out(head):
            # GitLab made our note before the head ran out on its own clock: the Date that said it had run out was
            # wrong (a proxy's, a clock's). Withdrawn: the head's holder may still be at work.
            self._delete(key, note_id)
            who = _who(head.lease)
            raise LockedError(
                f"issue {key} is claimed by {who} (GitLab's Date header said the claim had run out, its notes "
                "say it had not)",
                fix=_LOCKED_FIX,
                holder=who,
            )
        time.sleep(self.settle)
        try:
            after = self._read(key)
        except BeflowError:
            self._delete(key, note_id)  # (unknown whether it holds: it is withdrawn, and nobody took it yet)
            raise
        if after.head is None or after.head.id != note_id or not after.complete:
            self._delete(key, note_id)
            raise LockedError(f"issue {key} was claimed by another beflow just now", fix=_LOCKED_FIX)
        return self._held(key, owner, note_id, lease, after.head.created_at, started)

    def _ran_out(self, head: Link) -> dt.datetime:
        """When ``head``'s lease runs out on the clock GitLab stamps its notes with."""
        return head.updated_at + dt.timedelta(seconds=self.settings.lease + CLOCK_MARGIN)

    def _held(self, key: str, owner: str, note_id: int, lease: Lease, since: dt.datetime, started: float) -> Claim:
        # The lease runs from before the request that wrote it, on this process's clock, less a margin.
        state = _HeldLease(note_id, lease, started + self.settings.lease - self._margin())
        info = ClaimInfo(key=key, owner=owner, pid=os.getpid(), host=socket.gethostname(), since=as_utc(since))
        path = f"{self._notes(key)}/{note_id}"

        def renew() -> None:
            # Bounded by the time the lease has left: a renewal that hangs fails before the lease ends, so that the
            # run is stopped while the issue is still its own (docs/trackers.md: leases).
            with state.lock, self.api.deadline(state.expires):
                if state.expires <= time.monotonic() and not state.lost:  # another machine's turn may have come
                    state.lost = f"the claim on issue {key} could not be renewed before it ran out"
                if state.lost:
                    raise ClaimLost(state.lost)
                begun = time.monotonic()
                fresh = state.lease.model_copy(update={"renewal": state.lease.renewal + 1})
                try:
                    self._call(self.api.request, "PUT", path, json={"body": body_of(fresh)})
                except GitLabError as error:
                    if error.status != 404:
                        raise
                    state.lost = f"the claim on issue {key} was deleted"
                    raise ClaimLost(state.lost) from None
                state.lease = fresh
                read = self._read(key)
                if read.head is None or read.head.id != note_id:
                    taker = read.taker(note_id) or read.head
                    who = _who(taker.lease) if taker is not None else "nobody (the claim was deleted)"
                    state.lost = f"the claim on issue {key} was taken over by {who}"
                    raise ClaimLost(state.lost)
                state.expires = begun + self.settings.lease - self._margin()

        state.renew = renew

        def release() -> None:
            self._holding.pop(key, None)
            with self._lock:
                self._looks.pop(key, None)  # (its listing may not move: the next look reads the notes)
            # A renewal on its way ends first (its edit would undo the release), or at least the wait does.
            waited = state.lock.acquire(timeout=RELEASE_WAIT)
            try:
                if state.lost:
                    return  # taken over already: nothing of ours to release
                state.lost = f"the claim on issue {key} was released"
                done = state.lease.model_copy(update={"released": True})
                with contextlib.suppress(BeflowError):  # unreachable GitLab: the lease runs out by itself
                    self._call(self.api.request, "PUT", path, json={"body": body_of(done)})
            finally:
                if waited:
                    state.lock.release()

        self._holding[key] = state
        return Claim(
            info,
            release,
            held=lambda: self.under_lease(key),
            renew=renew,
            renew_every=max(self.settings.lease / 3, 0.2),
            expires=lambda: state.expires - time.monotonic(),
        )

    @contextlib.contextmanager
    def under_lease(self, key: str, *, prove: bool = True) -> Iterator[None]:
        """The writes of the block, on an issue this process holds a lease on, are this lease's: first the lease is
        proven (renewed, and the chain read back: :class:`ClaimLost` when another machine took the issue over),
        then every request of the block ends before the lease does. ``prove=False`` (progress edits, which are
        frequent) only checks that the lease was not lost and has time left. An issue this process holds no lease
        on is written as it is (a person's command, a settling of an orphan under its own claim)."""
        state = self._holding.get(normalize_key(key))
        if state is None:
            yield
            return
        if state.lost:
            raise ClaimLost(state.lost)
        if prove:
            state.renew()
        elif state.expires - time.monotonic() <= 0:
            raise ClaimLost(f"the claim on issue {key} could not be renewed in time")
        with self.api.deadline(state.expires):
            yield


@dataclass
class _HeldLease:
    """A lease this process holds: its claim note, the lease in it, when it runs out (monotonic, with a margin), why
    it was lost if it was; renewals one at a time."""

    note_id: int
    lease: Lease
    expires: float
    lost: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    renew: Any = None


_LOCKED_FIX = "Wait for that run to finish or stop it; a claim ends by itself when its lease runs out."


def _exact(value: dt.datetime) -> dt.datetime:
    """``value`` in UTC, as precise as it was given (a time without a zone is taken to be UTC)."""
    return (value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)


def _who(lease: Lease) -> str:
    return f"{lease.owner} (pid {lease.pid} on {lease.host})"
