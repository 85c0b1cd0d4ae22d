"""GitHub's claims, a :class:`~beflow.trackers.claims.ClaimStore`: leases kept in git refs ``refs/beflow/claims/<n>``.

Each ref points at a commit whose message holds the lease (owner, host, pid, expiry on GitHub's clock). Creating
the ref fails with 422 when it exists, and every later change is a fast-forward-only update, which GitHub refuses
when someone moved the ref first: each take-over, renewal and release is a compare-and-swap, so two machines can
never both hold one issue. A lease is renewed while its run lives, bounds the requests made under it
(:meth:`GitHubLeases.under_lease`), and is never honoured longer than its length from when it was first seen.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from beflow.config import GitHubTrackerSettings
from beflow.errors import BeflowError, LockedError
from beflow.trackers import github_wire as wire
from beflow.trackers.claims import LEASE_FIX, Claim, ClaimInfo, ClaimLost, HeldLease, lease_claim, lease_margin, proven
from beflow.trackers.github_api import Api, GitHubError
from beflow.trackers.issue import as_utc, normalize_key, utc_now

CLAIM_NAMESPACE = "beflow/claims"


class Lease(BaseModel):
    """A lease as the message of its commit holds it (beflow's own JSON, read back from GitHub: a message that
    does not read as one is no lease, and nobody holds it)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    owner: str | None = None
    host: str | None = None
    pid: int | None = None
    #: Epoch seconds on GitHub's clock: when the lease was first taken, and when it runs out.
    since: float = 0.0
    expires: float = 0.0
    released: bool = False


#: What a commit of a claim ref that holds no lease beflow wrote says.
NO_LEASE = Lease(released=True)


class GitHubLeases:
    """The leases of one repository's issues; ``call`` is the tracker's way of calling the API (its errors name
    the tracker's settings)."""

    def __init__(self, settings: GitHubTrackerSettings, api: Api, base: str, call: Callable[..., Any]) -> None:
        self.settings = settings
        self.api = api
        self._base = base
        self._call = call
        self._tree: str | None = None
        self._commits: dict[str, Lease] = {}  # lease commits are immutable: read each once
        self._seen: dict[str, float] = {}  # lease commit -> when this process first saw it (monotonic)
        self._written: set[str] = set()  # lease commits this process wrote
        self._holding: dict[str, HeldLease[str, dict[str, Any]]] = {}  # issue key -> the lease this process holds on it

    def _ref_path(self, key: str) -> str:
        return f"{self._base}/git/ref/{CLAIM_NAMESPACE}/{key}"

    def _lease_tree(self) -> str:
        if self._tree is None:
            payload = {"tree": [{"path": "claim", "mode": "100644", "type": "blob", "content": "beflow claim\n"}]}
            path = f"{self._base}/git/trees"
            tree = self._call(self.api.request, "POST", path, json=payload, retry=True)
            self._tree = wire.parse(wire.Made, tree.data, f"POST {path}").sha
        return self._tree

    def _lease_commit(self, key: str, lease: dict[str, Any], parent: str | None) -> str:
        message = f"beflow claim on issue {key}\n\n{json.dumps(lease, sort_keys=True)}\n"
        payload: dict[str, Any] = {
            "message": message,
            "tree": self._lease_tree(),
            "parents": [parent] if parent else [],
        }
        path = f"{self._base}/git/commits"
        made = self._call(self.api.request, "POST", path, json=payload, retry=True)
        sha = wire.parse(wire.Made, made.data, f"POST {path}").sha
        self._commits[sha] = Lease.model_validate(lease)
        self._seen.setdefault(sha, time.monotonic())
        self._written.add(sha)
        return sha

    def _read_ref(self, key: str) -> str | None:
        """The commit the claim ref of issue ``key`` points at (None: there is none); a ref GitHub gives in
        another shape is :class:`~beflow.trackers.github_wire.MalformedAnswer`: who holds the issue is unknown."""
        path = self._ref_path(key)
        try:
            data = self._call(self.api.get, path)
        except GitHubError as error:
            if error.status == 404:
                return None
            raise
        if isinstance(data, list):  # GitHub lists refs that start with the name when there is no exact match
            refs = wire.parse_list(wire.Ref, data, f"GET {path}")
            return next((r.object.sha for r in refs if r.ref == f"refs/{CLAIM_NAMESPACE}/{key}"), None)
        return wire.parse(wire.Ref, data, f"GET {path}").object.sha

    def _lease(self, sha: str) -> Lease:
        if sha not in self._commits:
            path = f"{self._base}/git/commits/{sha}"
            message = wire.parse(wire.GitCommit, self._call(self.api.get, path), f"GET {path}").message
            try:
                lease = Lease.model_validate_json(message.split("\n\n", 1)[1])
            except (IndexError, ValidationError):
                lease = NO_LEASE  # not a lease beflow wrote: nobody holds it
            self._commits[sha] = lease
        return self._commits[sha]

    def _live(self, sha: str, lease: Lease) -> bool:
        """Whether the lease in commit ``sha`` still holds: not released, not expired on GitHub's clock — and never
        longer than ``lease`` seconds after this process first saw it, on its own monotonic clock (a lease written
        while GitHub's ``Date`` was ten years ahead is not honoured for ten years)."""
        if lease.released:
            return False
        seen = self._seen.setdefault(sha, time.monotonic())
        return lease.expires > self.api.now() and time.monotonic() - seen < self.settings.lease

    def _new_lease(self, owner: str, since: float | None = None) -> dict[str, Any]:
        now = self.api.now()
        return {
            "owner": owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": since or now,
            "expires": now + self.settings.lease,
            "released": False,
        }

    def _move_ref(self, key: str, sha: str) -> bool:
        """Fast-forward the claim ref to ``sha``; False when GitHub refuses (someone moved it first). An answer
        that was lost (no answer, a 5xx) is settled by reading the ref: it points at ``sha`` or it does not."""
        try:
            response = self._call(
                self.api.request,
                "PATCH",
                f"{self._base}/git/refs/{CLAIM_NAMESPACE}/{key}",
                json={"sha": sha, "force": False},
                ok=(409, 422),
            )
        except GitHubError:
            if self._read_ref(key) == sha:
                return True
            raise
        return bool(response.status == 200)

    def claim(self, key: str, owner: str) -> Claim:
        started = time.monotonic()
        lease = self._new_lease(owner)
        current = self._read_ref(key)
        if current is None:
            sha = self._lease_commit(key, lease, None)
            try:
                created = self._call(
                    self.api.request,
                    "POST",
                    f"{self._base}/git/refs",
                    json={"ref": f"refs/{CLAIM_NAMESPACE}/{key}", "sha": sha},
                    ok=(422,),
                )
                if created.status == 201:
                    return self._held(key, owner, sha, lease, started)
            except GitHubError:
                pass  # no answer: the ref says whether it was created, below
            current = self._read_ref(key)  # another machine created it between our look and our write (or we did)
            if current == sha:  # ours: the answer to our write was lost on the way
                return self._held(key, owner, sha, lease, started)
            if current is None:
                raise LockedError(f"issue {key} is being claimed by another beflow", fix="Try again in a moment.")
        held = self._lease(current)
        # A lease this process wrote and holds for no run any more is its own (the answer to an earlier claim was
        # lost): taken over like a dead one, never reported as "claimed by" itself.
        own = current in self._written and key not in self._holding
        if self._live(current, held) and not own:
            raise LockedError(f"issue {key} is claimed by {_who(held)}", fix=LEASE_FIX, holder=_who(held))
        sha = self._lease_commit(key, lease, current)
        if not self._move_ref(key, sha):
            raise LockedError(f"issue {key} was claimed by another beflow just now", fix=LEASE_FIX)
        return self._held(key, owner, sha, lease, started)

    def _held(self, key: str, owner: str, sha: str, lease: dict[str, Any], started: float) -> Claim:
        # The lease runs from before the requests that wrote it, on this process's clock, less a margin.
        state = HeldLease(sha, lease, started + self.settings.lease - lease_margin(self.settings.lease))
        info = ClaimInfo(key=key, owner=owner, pid=os.getpid(), host=socket.gethostname(), since=utc_now())

        def renew() -> None:
            # Bounded by the time the lease has left: a renewal that hangs fails before the lease ends, so that
            # the run is stopped while the issue is still its own (docs/trackers.md: leases).
            with state.lock, self.api.deadline(state.expires):
                begun = time.monotonic()
                fresh = self._new_lease(owner, since=state.lease["since"])
                new = self._lease_commit(key, fresh, state.at)
                if not self._move_ref(key, new):
                    holder = self._read_ref(key)
                    who = _who(self._lease(holder)) if holder else "nobody (the claim was deleted)"
                    state.lost = f"the claim on issue {key} was taken over by {who}"
                    raise ClaimLost(state.lost)
                state.at, state.lease = new, fresh
                state.expires = begun + self.settings.lease - lease_margin(self.settings.lease)

        state.renew = renew

        def release() -> None:
            self._holding.pop(key, None)
            done = {**state.lease, "released": True, "expires": 0}
            try:
                new = self._lease_commit(key, done, state.at)
                self._move_ref(key, new)  # refused: taken over already, nothing of ours to release
            except BeflowError:
                pass  # unreachable GitHub: the lease runs out by itself

        self._holding[key] = state
        return lease_claim(info, state, release, held=lambda: self.under_lease(key), lease=self.settings.lease)

    def under_lease(self, key: str, *, prove: bool = True) -> AbstractContextManager[None]:
        """The writes of the block, on an issue this process holds a lease on, are this lease's (proven first: a
        compare-and-swap on the claim ref, which fails when another machine took the issue over; see
        :func:`~beflow.trackers.claims.proven`). An issue this process holds no lease on is written as it is (a
        person's command, a settling of an orphan under its own claim)."""
        key = normalize_key(key)
        return proven(self._holding.get(key), key, self.api.deadline, prove=prove)

    def holder(self, key: str) -> ClaimInfo | None:
        key = normalize_key(key)
        sha = self._read_ref(key)
        if sha is None:
            return None
        lease = self._lease(sha)
        return self._info(key, lease) if self._live(sha, lease) else None

    def _info(self, key: str, lease: Lease) -> ClaimInfo | None:
        if lease.owner is None:
            return None
        return ClaimInfo(
            key=key,
            owner=lease.owner,
            pid=lease.pid or 0,
            host=lease.host or "unknown",
            since=as_utc(_epoch(lease.since)),
        )

    def held(self, keys: Iterable[str] = ()) -> set[str]:
        """Issues with a live lease: one (conditional) listing of every claim ref, not one request per issue."""
        prefix = f"refs/{CLAIM_NAMESPACE}/"
        path = f"{self._base}/git/matching-refs/{CLAIM_NAMESPACE}/"
        # A ref GitHub lists in a shape of its own is not counted here: claiming its issue reads it, and fails.
        refs, _ = wire.read_each(wire.Ref, self._call(self.api.get, path), f"GET {path}")
        return {
            ref.ref.removeprefix(prefix)
            for ref in refs
            if ref.ref.startswith(prefix) and self._live(ref.object.sha, self._lease(ref.object.sha))
        }

    def last_holder(self, key: str) -> ClaimInfo | None:
        sha = self._read_ref(normalize_key(key))
        if sha is None:
            return None
        return self._info(normalize_key(key), self._lease(sha))


def _who(lease: Lease) -> str:
    return f"{lease.owner or 'unknown'} (pid {'?' if lease.pid is None else lease.pid} on {lease.host or '?'})"


def _epoch(value: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(value, dt.UTC)
