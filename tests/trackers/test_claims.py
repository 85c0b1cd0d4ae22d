"""Claims behind a ClaimStore: the file locks and GitHub's leases are two stores, and what is ready or orphaned
follows from the issues and the store alone, so another store (a workflow engine's exactly-once start) fits."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path

from beflow.errors import LockedError
from beflow.trackers import LocalTracker, Status
from beflow.trackers.claims import Claim, ClaimInfo, ClaimStore, FileClaims
from beflow.trackers.issue import utc_now


class EngineClaims:
    """A third store, as a workflow engine would give one: a start is granted once, by the engine (here a set
    behind a lock, shared by every tracker that is given it)."""

    def __init__(self) -> None:
        self.started: dict[str, ClaimInfo] = {}
        self.lock = threading.Lock()

    def claim(self, key: str, owner: str) -> Claim:
        with self.lock:
            if key in self.started:
                raise LockedError(f"issue {key} was started by {self.started[key].owner}")
            info = ClaimInfo(key=key, owner=owner, pid=0, host="engine", since=utc_now())
            self.started[key] = info
        return Claim(info, lambda: self.started.pop(key, None))

    def holder(self, key: str) -> ClaimInfo | None:
        return self.started.get(key)

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.started.get(key)

    def held(self, keys: Iterable[str]) -> set[str]:
        return {key for key in keys if key in self.started}

    def under_lease(self, key: str, *, prove: bool = True) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # a start the engine granted cannot lapse behind the run's back


def test_both_stores_and_a_third_are_claim_stores(repo: Path) -> None:
    tracker = LocalTracker(repo / ".beflow" / "issues", repo)
    assert isinstance(tracker.claims, FileClaims) and isinstance(tracker.claims, ClaimStore)
    assert isinstance(EngineClaims(), ClaimStore)


def test_ready_and_orphans_follow_from_the_issues_and_any_store(repo: Path) -> None:
    engine = EngineClaims()
    tracker = LocalTracker(repo / ".beflow" / "issues", repo, claims=lambda _identity, _own: engine)
    one = tracker.create("one", priority=1)
    two = tracker.create("two", priority=2)
    moved = tracker.create("moved", priority=0)
    tracker.set_status(moved.key, Status.IN_PROGRESS)
    assert [i.key for i in tracker.ready()] == [one.key, two.key]
    assert [i.key for i in tracker.orphaned()] == [moved.key]  # in progress, and no start of it is live

    claim = tracker.claim(one.key, owner="engine worker 1")
    held_moved = tracker.claim(moved.key, owner="engine worker 2")
    assert [i.key for i in tracker.ready()] == [two.key]
    assert tracker.orphaned() == []
    assert tracker.holder(one.key) is not None and tracker.holder(one.key).owner == "engine worker 1"  # type: ignore[union-attr]
    try:
        tracker.claim(one.key, owner="another")
    except LockedError as error:
        assert "engine worker 1" in error.message
    else:
        raise AssertionError("claimed twice")
    claim.release()
    held_moved.release()
    assert [i.key for i in tracker.ready()] == [one.key, two.key]
    assert not (repo / ".beflow" / "claims").exists()  # the file store was never used
