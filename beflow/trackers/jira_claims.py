"""Jira's claims, a :class:`~beflow.trackers.claims.ClaimStore`: leases kept as a chain of comments, as on GitLab.

Moving an issue to "In Progress" and reading it back is no claim: two watchers both move it, both read their own
write, the last writer wins. An issue property is no better (a PUT replaces it, with no version to compare), and Jira
has no compare-and-swap anywhere on an issue. What it has is comments with ids that grow, read back at once from
``GET /issue/{key}/comment`` (the listing is what is eventually consistent, not an issue's comments). So a claim is a
comment by the token's own account holding a lease — owner, host, pid, a nonce, ``takes`` (the id of the claim it
supersedes, or null), ``released`` — in a code block under one visible line, and every reader orders the claim
comments into one chain (:func:`~beflow.trackers.claims.chain_of`, shared with GitLab): the lowest-id claim taking
nothing starts it, the lowest-id claim taking the head moves it. A comment by anyone else, or one whose lease does not
read, is no claim.

The head is live while it is not released and its last edit is less than a lease old on Jira's clock (the ``Date`` of
the answer that listed the comments; never more than a lease from a read). Claiming reads the chain, posts a claim
taking the head when it is not live, waits :data:`SETTLE`, and reads again: it holds if and only if the head is its
comment (a loser deletes its own). A renewal edits the comment and reads the chain back; a release edits it to
``released``. Two claimants of one head cannot both see their own comment as the head: the first (lowest id) wins for
every reader alike. The holder counts its lease from before its last write, less a margin, and bounds every request
under it by that deadline (``api.deadline``), so it has stopped before anyone may take the head over.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from beflow.config import JiraTrackerSettings
from beflow.errors import BeflowError, LockedError
from beflow.trackers import jira_wire as wire
from beflow.trackers.claims import Claim, ClaimInfo, ClaimLost, Lease, Link, chain_of
from beflow.trackers.issue import as_utc, normalize_key
from beflow.trackers.jira_api import Api, JiraError, Unavailable

#: How long a claimant waits between posting its claim and reading the chain back (a comment whose transaction began
#: first may become visible a moment after Jira answered a later one).
SETTLE = 1.0
#: Jira's ``Date`` shows whole seconds: a head is taken only when it ran out this much before Jira's now.
CLOCK_MARGIN = 1.0
#: Comments are read 100 a page, at most this many pages: an issue with more cannot be told free and counts as held.
PER_PAGE = 100
MAX_PAGES = 20
#: How long a release waits for a renewal on its way.
RELEASE_WAIT = 5.0

VISIBLE = "beflow is holding this issue for a run."
LANGUAGE = "beflow-claim"
_LOCKED_FIX = "Wait for that run to finish or stop it; a claim ends by itself when its lease runs out."


def body_of(lease: Lease) -> dict[str, Any]:
    """The ADF document of a claim comment holding ``lease``."""
    data = json.dumps(lease.model_dump(), sort_keys=True)
    return {
        "type": "doc",
        "version": 1,
        "content": [
            {"type": "paragraph", "content": [{"type": "text", "text": VISIBLE}]},
            {"type": "codeBlock", "attrs": {"language": LANGUAGE}, "content": [{"type": "text", "text": data}]},
        ],
    }


def lease_in(body: Any) -> Lease | None:
    """The lease a comment's body holds, when the whole body is a claim's (else None)."""
    try:
        first, block = body["content"]
        if first["content"] != [{"type": "text", "text": VISIBLE}] or block["type"] != "codeBlock":
            return None
        if block.get("attrs", {}).get("language") != LANGUAGE:
            return None
        (text,) = block["content"]
        return Lease.model_validate(json.loads(text["text"]), strict=True)
    except (KeyError, TypeError, ValueError, ValidationError):
        return None


def is_claim(comment: wire.Comment) -> bool:
    """Whether ``comment`` has the shape of a claim (the tracker leaves them out of an issue's conversation; by
    anyone, since a stranger's imitation is no conversation either)."""
    return lease_in(comment.body) is not None


def link_of(comment: wire.Comment, me: str) -> Link | None:
    """``comment`` as a claim, or None: only one by the token's own account whose whole body is a claim is one."""
    if comment.author is None or comment.author.accountId != me:
        return None
    lease = lease_in(comment.body)
    if lease is None or (lease.takes is not None and lease.takes >= comment.number):
        return None
    return Link(comment.number, lease, comment.created, comment.updated or comment.created)


@dataclass(frozen=True)
class _Read:
    key: str
    head: Link | None
    links: list[Link]
    now: float
    complete: bool

    def left(self, lease: float) -> float:
        """Seconds the head has left on Jira's clock (0 or less: released, run out, or none)."""
        if self.head is None or self.head.lease.released:
            return 0.0
        return min(self.head.updated_at.timestamp() + lease + CLOCK_MARGIN - self.now, lease + CLOCK_MARGIN)

    def taker(self, comment_id: int) -> Link | None:
        return next((link for link in sorted(self.links, key=lambda x: x.id) if link.lease.takes == comment_id), None)


@dataclass
class _Look:
    updated: dt.datetime | None
    live_until: float | None


@dataclass
class _HeldLease:
    comment_id: int
    lease: Lease
    expires: float
    lost: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    renew: Any = None


class JiraLeases:
    """The leases of one project's issues; ``me``: the token's account id (asked of Jira once, by the tracker)."""

    def __init__(
        self, settings: JiraTrackerSettings, api: Api, me: Callable[[], str], *, settle: float = SETTLE
    ) -> None:
        self.settings = settings
        self.api = api
        self._me = me
        self.settle = settle
        self._nonces: set[str] = set()
        self._holding: dict[str, _HeldLease] = {}
        self._lock = threading.Lock()
        self._observed: dict[str, dt.datetime] = {}
        self._looks: dict[str, _Look] = {}

    # -- reading -----------------------------------------------------------------------------------------------------

    def _comments(self, key: str) -> str:
        return f"/issue/{key}/comment"

    def comments(self, key: str) -> tuple[list[wire.Comment], bool]:
        """Issue ``key``'s comments, oldest first (up to :data:`MAX_PAGES` pages), and whether that is all of them;
        a comment that does not read is left out."""
        found: list[wire.Comment] = []
        path = self._comments(key)
        for page in range(MAX_PAGES):
            params = {"startAt": page * PER_PAGE, "maxResults": PER_PAGE, "orderBy": "created"}
            got = wire.parse(wire.CommentPage, self.api.get(path, params), f"GET {path}")
            for item in got.comments:
                with contextlib.suppress(ValidationError):
                    found.append(wire.Comment.model_validate(item))
            if not got.comments or page * PER_PAGE + len(got.comments) >= got.total:
                return found, True
        return found, False

    def _read(self, key: str) -> _Read:
        me = self._me()
        with self._lock:
            observed = self._observed.get(key)
        comments, complete = self.comments(key)
        now, read_at = self.api.now(), time.monotonic()
        links = [link for c in comments if (link := link_of(c, me)) is not None]
        chain = chain_of(links)
        read = _Read(key, chain[-1] if chain else None, links, now, complete)
        left = read.left(self.settings.lease) if complete else float("inf")
        with self._lock:
            self._looks[key] = _Look(observed, read_at + left + CLOCK_MARGIN if left > 0 else None)
        return read

    def _live(self, read: _Read) -> bool:
        return not read.complete or read.left(self.settings.lease) > 0

    def observe(self, seen: Mapping[str, dt.datetime]) -> None:
        """What a listing showed of each issue's ``updated``: :meth:`held` reads an issue's comments again only when
        it moved (a claim posted moves it), or when a head seen live may have run out."""
        with self._lock:
            self._observed.update({normalize_key(k): v for k, v in seen.items()})

    def held(self, keys: Iterable[str] = ()) -> set[str]:
        found = set()
        for key in keys:
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
        read = self._read(key)
        if not read.complete:
            return ClaimInfo(key=key, owner="unknown", pid=0, host="unknown", since=as_utc(dt.datetime.now(dt.UTC)))
        return _info(key, read.head) if read.head is not None and self._live(read) else None

    def last_holder(self, key: str) -> ClaimInfo | None:
        return _info(key, self._read(key).head)

    # -- claiming ----------------------------------------------------------------------------------------------------

    def _margin(self) -> float:
        return min(2.0, self.settings.lease / 4)

    def _post(self, key: str, lease: Lease) -> tuple[int, dt.datetime]:
        """Post a claim comment; its id and when Jira made it. A lost answer is settled by finding the nonce."""
        path = self._comments(key)
        try:
            made = self.api.request("POST", path, json={"body": body_of(lease)})
        except Unavailable:
            mine = next((link for link in self._read(key).links if link.lease.nonce == lease.nonce), None)
            if mine is None:
                raise
            return mine.id, mine.created_at
        comment = wire.parse(wire.Comment, made.data, f"POST {path}")
        return comment.number, comment.created

    def _delete(self, key: str, comment_id: int) -> None:
        with contextlib.suppress(BeflowError):
            self.api.request("DELETE", f"{self._comments(key)}/{comment_id}", ok=(404,))

    def claim(self, key: str, owner: str) -> Claim:
        read = self._read(key)
        if not read.complete:
            raise LockedError(
                f"issue {key} has more than {PER_PAGE * MAX_PAGES} comments: beflow cannot tell who holds it",
                fix="Run it from a new issue that links this one.",
            )
        head = read.head
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
        comment_id, made_at = self._post(key, lease)
        if head is not None and not head.lease.released and not own and made_at < self._ran_out(head):
            # Jira made our comment before the head ran out on its own clock: the Date that said it had run out was
            # wrong (a proxy's, a clock's). Withdrawn: the head's holder may still be at work.
            self._delete(key, comment_id)
            who = _who(head.lease)
            raise LockedError(
                f"issue {key} is claimed by {who} (Jira's Date header said the claim had run out, its comments say "
                "it had not)",
                fix=_LOCKED_FIX,
                holder=who,
            )
        time.sleep(self.settle)
        try:
            after = self._read(key)
        except BeflowError:
            self._delete(key, comment_id)
            raise
        if after.head is None or after.head.id != comment_id or not after.complete:
            self._delete(key, comment_id)
            raise LockedError(f"issue {key} was claimed by another beflow just now", fix=_LOCKED_FIX)
        return self._held(key, owner, comment_id, lease, after.head.created_at, started)

    def _ran_out(self, head: Link) -> dt.datetime:
        """When ``head``'s lease runs out on the clock Jira stamps its comments with."""
        return head.updated_at + dt.timedelta(seconds=self.settings.lease + CLOCK_MARGIN)

    def _held(self, key: str, owner: str, comment_id: int, lease: Lease, since: dt.datetime, started: float) -> Claim:
        state = _HeldLease(comment_id, lease, started + self.settings.lease - self._margin())
        info = ClaimInfo(key=key, owner=owner, pid=os.getpid(), host=socket.gethostname(), since=as_utc(since))
        path = f"{self._comments(key)}/{comment_id}"

        def renew() -> None:
            with state.lock, self.api.deadline(state.expires):
                if state.expires <= time.monotonic() and not state.lost:
                    state.lost = f"the claim on issue {key} could not be renewed before it ran out"
                if state.lost:
                    raise ClaimLost(state.lost)
                begun = time.monotonic()
                fresh = state.lease.model_copy(update={"renewal": state.lease.renewal + 1})
                try:
                    self.api.request("PUT", path, params={"notifyUsers": "false"}, json={"body": body_of(fresh)})
                except JiraError as error:
                    if error.status != 404:
                        raise
                    state.lost = f"the claim on issue {key} was deleted"
                    raise ClaimLost(state.lost) from None
                state.lease = fresh
                read = self._read(key)
                if read.head is None or read.head.id != comment_id:
                    taker = read.taker(comment_id) or read.head
                    who = _who(taker.lease) if taker is not None else "nobody (the claim was deleted)"
                    state.lost = f"the claim on issue {key} was taken over by {who}"
                    raise ClaimLost(state.lost)
                state.expires = begun + self.settings.lease - self._margin()

        state.renew = renew

        def release() -> None:
            self._holding.pop(key, None)
            with self._lock:
                self._looks.pop(key, None)
            waited = state.lock.acquire(timeout=RELEASE_WAIT)
            try:
                if state.lost:
                    return
                state.lost = f"the claim on issue {key} was released"
                done = state.lease.model_copy(update={"released": True})
                with contextlib.suppress(BeflowError):  # unreachable Jira: the lease runs out by itself
                    self.api.request("PUT", path, params={"notifyUsers": "false"}, json={"body": body_of(done)})
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
        """The writes of the block, on an issue this process holds, are its lease's: proven first (``prove``), then
        bounded by the lease's end; an issue this process holds no lease on is written as it is."""
        state = self._holding.get(key)
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


def _who(lease: Lease) -> str:
    return f"{lease.owner} (pid {lease.pid} on {lease.host})"


def _info(key: str, link: Link | None) -> ClaimInfo | None:
    if link is None:
        return None
    lease = link.lease
    return ClaimInfo(key=key, owner=lease.owner, pid=lease.pid, host=lease.host, since=as_utc(link.created_at))
