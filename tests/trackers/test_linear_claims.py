"""Linear's claims against the fake Linear: generation comments with ids every watcher computes alike, of which
Linear creates each once — so racing watchers end with one holder, a lost answer is settled by the comment's nonce, a
lease is renewed in place and taken over only once it ran out or was released, and who holds a listing's issues costs
no request while nothing changes."""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from beflow.config import LinearTrackerSettings
from beflow.errors import LockedError
from beflow.trackers.claims import Claim, ClaimLost
from beflow.trackers.issue import Status
from beflow.trackers.linear import LinearTracker
from beflow.trackers.linear_api import Api
from beflow.trackers.linear_claims import generation_id, lease_of
from tests.support.linear import API_KEY, FakeLinear
from tests.support.linear import linear as linear
from tests.support.waiting import eventually

LEASE = 2.0


def make(fake: FakeLinear, lease: float = 300.0, token: str = API_KEY) -> LinearTracker:
    """A watcher of its own: its own client and tracker, as another machine has."""
    settings = LinearTrackerSettings.model_validate(
        {"kind": "linear", "team": "ENG", "api_url": fake.url, "lease": lease}
    )
    return LinearTracker(settings, Api(fake.url, token, inline_wait=0.5))


@pytest.fixture
def issue(linear: FakeLinear) -> dict[str, Any]:
    return linear.add_issue("Claim me", labels=["beflow"])


def claims_of(issue: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in issue["comments"] if c["body"].startswith("beflow claim")]


def test_a_generations_id_is_the_same_for_every_watcher_and_a_uuid_v4() -> None:
    issue_id = str(uuid.uuid4())
    first = generation_id(issue_id, 1)
    assert first == generation_id(issue_id, 1) and first != generation_id(issue_id, 2)
    assert uuid.UUID(first).version == 4 and first != generation_id(str(uuid.uuid4()), 1)


def test_a_claim_is_generation_one_and_a_second_watcher_is_told_who_holds_it(
    linear: FakeLinear, issue: dict[str, Any]
) -> None:
    one, two = make(linear), make(linear)
    claim = one.claim("eng-1", "watcher-one")
    [comment] = claims_of(issue)
    lease = lease_of(comment["body"])
    assert comment["id"] == generation_id(issue["id"], 1) and lease is not None and lease.owner == "watcher-one"
    with pytest.raises(LockedError, match="claimed by watcher-one") as caught:
        two.claim("ENG-1", "watcher-two")
    assert caught.value.holder is not None
    holder = two.holder("ENG-1")
    assert holder is not None and holder.owner == "watcher-one"
    assert one.get("ENG-1").comments == []  # a claim is no part of the issue's conversation
    claim.release()
    assert two.holder("ENG-1") is None and two.last_holder("ENG-1") is not None
    again = two.claim("ENG-1", "watcher-two")
    assert [c["id"] for c in claims_of(issue)] == [generation_id(issue["id"], n) for n in (1, 2)]
    again.release()


def race(watchers: list[LinearTracker], act: Callable[[LinearTracker], Claim]) -> list[Claim]:
    """Every watcher acts at once; the claims won."""
    start = threading.Barrier(len(watchers))

    def run(watcher: LinearTracker) -> Claim | None:
        start.wait()
        try:
            return act(watcher)
        except LockedError:
            return None

    with concurrent.futures.ThreadPoolExecutor(len(watchers)) as pool:
        return [c for c in pool.map(run, watchers) if c is not None]


def test_of_watchers_racing_for_a_free_issue_exactly_one_holds_it(linear: FakeLinear, issue: dict[str, Any]) -> None:
    for round_ in range(3):
        watchers = [make(linear) for _ in range(6)]
        won = race(watchers, lambda w: w.claim("ENG-1", f"watcher-{id(w)}"))
        assert len(won) == 1, f"round {round_}: {won}"
        assert len(claims_of(issue)) == round_ + 1
        won[0].release()


def test_of_watchers_racing_to_take_over_an_expired_lease_exactly_one_holds_it(
    linear: FakeLinear, issue: dict[str, Any]
) -> None:
    dead = make(linear, lease=LEASE).claim("ENG-1", "dead")  # its process died: never renewed, never released
    watchers = [make(linear, lease=LEASE) for _ in range(6)]
    with pytest.raises(LockedError):
        watchers[0].claim("ENG-1", "too early")
    eventually(lambda: all(w.holder("ENG-1") is None for w in watchers), "the lease ran out", interval=0.2)
    won = race(watchers, lambda w: w.claim("ENG-1", "taker"))
    assert len(won) == 1 and len(claims_of(issue)) == 2
    with pytest.raises(ClaimLost, match="taken over by taker"):
        dead.renew()


def test_a_renewal_edits_its_own_generation_and_keeps_the_issue(linear: FakeLinear, issue: dict[str, Any]) -> None:
    holder, other = make(linear, lease=LEASE), make(linear, lease=LEASE)
    claim = holder.claim("ENG-1", "holder")
    for _ in range(4):
        time.sleep(LEASE / 4)  # (renewed well before it runs out, as keep_renewed does)
        claim.renew()
    with pytest.raises(LockedError, match="claimed by holder"):
        other.claim("ENG-1", "other")
    [comment] = claims_of(issue)
    lease = lease_of(comment["body"])
    assert lease is not None and lease.renewal == 4
    claim.release()


def test_a_claim_whose_answer_was_lost_is_settled_by_its_nonce(linear: FakeLinear, issue: dict[str, Any]) -> None:
    watcher = make(linear)
    linear.fail(502, field="commentCreate", after=True)  # made, and its answer lost: the retry is refused
    claim = watcher.claim("ENG-1", "watcher")
    assert len(claims_of(issue)) == 1 and claim.seconds_left() is not None
    with pytest.raises(LockedError):
        make(linear).claim("ENG-1", "other")
    claim.release()


def test_a_lost_answer_to_someone_elses_create_is_no_claim(linear: FakeLinear, issue: dict[str, Any]) -> None:
    """Two watchers create the same generation; the winner's answer is lost: each reads the comment, and only the
    one whose nonce it holds holds the issue."""
    first, second = make(linear), make(linear)
    linear.fail(502, field="commentCreate", times=3)  # no answer at all, three times: nothing was made
    with pytest.raises(Exception, match="502"):
        first.claim("ENG-1", "first")
    assert claims_of(issue) == []
    claim = second.claim("ENG-1", "second")
    with pytest.raises(LockedError, match="claimed by second"):
        first.claim("ENG-1", "first")
    claim.release()


def test_a_deleted_claim_is_lost_by_its_holder_and_its_id_stays_taken(
    linear: FakeLinear, issue: dict[str, Any]
) -> None:
    holder = make(linear)
    claim = holder.claim("ENG-1", "holder")
    linear.delete_comment(claims_of(issue)[0])
    with pytest.raises(ClaimLost, match="deleted"):
        claim.renew()
    taker = make(linear).claim("ENG-1", "taker")
    assert [c["id"] for c in claims_of(issue)] == [generation_id(issue["id"], n) for n in (1, 2)]
    taker.release()


def test_a_run_taken_over_cannot_write_on_the_issue(linear: FakeLinear, issue: dict[str, Any]) -> None:
    slow, fast = make(linear, lease=LEASE), make(linear, lease=LEASE)
    claim = slow.claim("ENG-1", "slow")
    slow.set_status("ENG-1", Status.IN_PROGRESS)
    eventually(lambda: fast.holder("ENG-1") is None, "the lease ran out", interval=0.2)
    taken = fast.claim("ENG-1", "fast")
    with pytest.raises(ClaimLost):
        slow.set_status("ENG-1", Status.REVIEW)
    assert issue["state"]["name"] == "In Progress"
    fast.set_status("ENG-1", Status.REVIEW)
    assert issue["state"]["name"] == "In Review"
    taken.release()
    claim.release()


def test_a_claim_survives_the_issues_move_to_another_team(linear: FakeLinear, issue: dict[str, Any]) -> None:
    """Claims are kept by the issue's stable id: its generations are the same whatever its identifier says."""
    watcher = make(linear)
    claim = watcher.claim("ENG-1", "watcher")
    assert claims_of(issue)[0]["id"] == generation_id(issue["id"], 1)
    claim.release()


def test_who_holds_a_listings_issues_costs_no_request_while_nothing_changes(linear: FakeLinear) -> None:
    for n in range(10):
        linear.add_issue(f"Issue {n}", labels=["beflow"])
    watcher, other = make(linear), make(linear)
    assert len(watcher.ready()) == 10
    claim = other.claim("ENG-3", "other")
    other.set_status("ENG-3", Status.IN_PROGRESS)
    watcher.workflow.team()  # (read once, when the first started issue is read)
    before = len(linear.seen)
    assert [i.key for i in watcher.orphaned()] == []  # read again: ENG-3 changed
    assert len(watcher.ready()) == 9
    assert [s.operation for s in linear.seen[before:]] == ["BeflowChanged", "BeflowIssues", "BeflowComments",
                                                            "BeflowChanged"]  # fmt: skip
    before = len(linear.seen)
    for _ in range(3):
        with watcher.reading_once():
            watcher.ready()
            watcher.orphaned()
    assert [s.operation for s in linear.seen[before:]] == ["BeflowChanged"] * 3
    claim.release()


def test_an_in_progress_issue_whose_lease_ran_out_is_an_orphan(linear: FakeLinear, issue: dict[str, Any]) -> None:
    dying, watcher = make(linear, lease=LEASE), make(linear, lease=LEASE)
    dying.claim("ENG-1", "dying")
    dying.set_status("ENG-1", Status.IN_PROGRESS)
    assert watcher.orphaned() == []
    eventually(lambda: [i.key for i in watcher.orphaned()] == ["ENG-1"], "ENG-1 an orphan", interval=0.2)


@pytest.fixture(autouse=True)
def _no_strays(linear: FakeLinear) -> Iterator[None]:
    yield
    assert not linear.violations


def test_a_generation_the_listing_does_not_show_is_stepped_over_when_it_holds_nobody(
    linear: FakeLinear, issue: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ids alone decide: a watcher whose listing of the claims lags (or whose words Linear rewrote) tries a taken
    generation, is refused, reads it, and races for the next one when it holds nobody — or is told who holds it."""
    first = make(linear)
    first.claim("ENG-1", "first").release()
    lagging = make(linear)
    monkeypatch.setattr(lagging.leases, "_head", lambda issue_id: None)  # it sees no claim at all
    claim = lagging.claim("ENG-1", "lagging")
    assert [c["id"] for c in claims_of(issue)] == [generation_id(issue["id"], n) for n in (1, 2)]
    blind = make(linear)
    monkeypatch.setattr(blind.leases, "_head", lambda issue_id: None)
    with pytest.raises(LockedError, match="claimed by lagging"):
        blind.claim("ENG-1", "blind")
    claim.release()


def test_of_watchers_racing_whose_answers_are_lost_exactly_one_holds_it(
    linear: FakeLinear, issue: dict[str, Any]
) -> None:
    """Creates made and their answers lost on the way back, amid the race: each claimant settles by the nonce at the
    generation's id, and one holds the issue."""
    linear.fail(502, field="commentCreate", after=True, times=3)
    won = race([make(linear) for _ in range(6)], lambda w: w.claim("ENG-1", "watcher"))
    assert len(won) == 1 and len(claims_of(issue)) == 1
    won[0].release()
