"""Jira's claims against the fake Jira: a chain of the account's own comments, so racing watchers end with one holder,
an expired or released head is taken over by exactly one, a stranger's imitation is no claim, a lost answer is
settled by the claim's nonce, and a renewal finds a take-over."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable

import pytest

from beflow.config import JiraTrackerSettings
from beflow.errors import BeflowError, LockedError
from beflow.trackers.claims import Claim, ClaimLost
from beflow.trackers.comment_leases import Lease
from beflow.trackers.jira import JiraTracker
from beflow.trackers.jira_access import claims_check
from beflow.trackers.jira_api import Api
from beflow.trackers.jira_claims import body_of
from tests.support.jira import BOT, EMAIL, TOKEN, FakeJira
from tests.support.jira import jira as jira


def make(fake: FakeJira, settle: float = 0.0) -> JiraTracker:
    """A watcher of its own: its own client and tracker, as another machine has."""
    settings = JiraTrackerSettings.model_validate({"kind": "jira", "site": fake.url, "project": "WID", "lease": 60})
    return JiraTracker(settings, Api(fake.url, EMAIL, TOKEN), settle=settle)


def race(watchers: list[JiraTracker], act: Callable[[JiraTracker], Claim]) -> list[Claim]:
    start = threading.Barrier(len(watchers))

    def run(watcher: JiraTracker) -> Claim | None:
        start.wait()
        try:
            return act(watcher)
        except LockedError:
            return None

    with concurrent.futures.ThreadPoolExecutor(len(watchers)) as pool:
        return [c for c in pool.map(run, watchers) if c is not None]


def claims_on(fake: FakeJira, key: str) -> list[str]:
    return [c["id"] for c in fake.comments[key] if "beflow-claim" in str(c["body"])]


def test_of_watchers_racing_for_a_free_issue_exactly_one_holds_it(jira: FakeJira) -> None:
    key = jira.add_issue("Claim me")
    for round_ in range(3):
        watchers = [make(jira) for _ in range(5)]
        won = race(watchers, lambda w: w.claim(key, f"watcher-{id(w)}"))
        assert len(won) == 1, f"round {round_}: {won}"
        assert len(claims_on(jira, key)) == round_ + 1  # (the losers deleted theirs)
        with pytest.raises(LockedError, match="claimed by watcher-"):
            make(jira).claim(key, "late")
        won[0].release()


def test_of_watchers_racing_to_take_over_an_expired_lease_exactly_one_holds_it(jira: FakeJira) -> None:
    key = jira.add_issue("Dead holder")
    dead = Lease(owner="dead", host="gone", pid=1, nonce="0123456789abcdef", takes=None)
    made = jira.add_comment(key, body_of(dead), author=BOT)
    made["updated"] = "2020-01-01T00:00:00.000+0000"  # its process died long ago: never renewed since
    watchers = [make(jira) for _ in range(5)]
    won = race(watchers, lambda w: w.claim(key, f"watcher-{id(w)}"))
    assert len(won) == 1
    holder = make(jira).holder(key)
    assert holder is not None and holder.owner == won[0].info.owner


def test_a_strangers_imitation_of_a_claim_is_no_claim(jira: FakeJira) -> None:
    key = jira.add_issue("Imitated")
    stranger = jira.user("Mallory")["accountId"]
    fake = Lease(owner="mallory", host="h", pid=1, nonce="0123456789abcdef", takes=None)
    jira.add_comment(key, body_of(fake), author=stranger)
    tracker = make(jira)
    assert tracker.holder(key) is None
    with tracker.claim(key, "real"):
        assert tracker.get(key).comments == []  # (neither claim is conversation)


def test_the_accounts_own_comments_that_take_a_later_claim_or_hold_no_lease_are_no_claims(jira: FakeJira) -> None:
    key = jira.add_issue("Forged by a bug")
    broken = body_of(Lease(owner="broken", host="h", pid=1, nonce="fedcba9876543210", takes=None))
    broken["content"][1]["content"][0]["text"] = '{"owner": 5}'  # a lease that does not read
    coming = int(jira.add_comment(key, broken, author=BOT)["id"]) + 2  # the id the claim below will get
    ahead = Lease(owner="ahead", host="h", pid=1, nonce="0123456789abcdef", takes=coming)  # takes a later comment
    jira.add_comment(key, body_of(ahead), author=BOT)
    tracker = make(jira)
    assert tracker.holder(key) is None and tracker.last_holder(key) is None
    with tracker.claim(key, "real") as claim:
        assert claim.info.owner == "real" and tracker.holder(key).owner == "real"  # type: ignore[union-attr]


def test_a_renewal_finds_a_take_over_and_the_run_stops(jira: FakeJira) -> None:
    key = jira.add_issue("Taken")
    one = make(jira)
    claim = one.claim(key, "one")
    mine = jira.comments[key][-1]
    mine["updated"] = "2020-01-01T00:00:00.000+0000"  # (as if it had not been renewed for a lease)
    other = make(jira).claim(key, "two")
    with pytest.raises(ClaimLost, match="taken over by two"):
        claim.renew()
    with pytest.raises(ClaimLost), one.claims.under_lease(key):
        pass
    other.release()


def test_a_release_lets_another_watcher_claim_at_once(jira: FakeJira) -> None:
    key = jira.add_issue("Passed on")
    make(jira).claim(key, "first").release()
    with make(jira).claim(key, "second") as second:
        assert second.info.owner == "second"


def test_a_claim_whose_answer_was_lost_is_settled_by_its_nonce(jira: FakeJira) -> None:
    key = jira.add_issue("Lost answer")
    jira.fail(502, only="POST", prefix=f"/rest/api/3/issue/{key}/comment", after=True)
    tracker = make(jira)
    with tracker.claim(key, "me") as claim:
        assert claim.info.owner == "me" and len(claims_on(jira, key)) == 1


def test_who_holds_a_listings_issues_costs_no_request_while_nothing_changes(jira: FakeJira) -> None:
    keys = [jira.add_issue(f"Issue {n}") for n in range(3)]
    tracker = make(jira)
    assert len(tracker.ready()) == 3
    before = len(jira.requests("GET", "/rest/api/3/issue/"))
    assert len(tracker.ready()) == 3
    assert len(jira.requests("GET", "/rest/api/3/issue/")) == before
    with make(jira).claim(keys[0], "elsewhere"):
        assert [i.key for i in tracker.ready()] == keys[1:]


def test_a_date_header_ahead_of_jiras_own_stamps_takes_no_live_claim_over(jira: FakeJira) -> None:
    key = jira.add_issue("Skewed")
    holder = make(jira).claim(key, "holder")
    jira.date_skew = 3600.0  # every answer's Date an hour ahead: the head looks long run out
    with pytest.raises(LockedError, match="Date header said the claim had run out"):
        make(jira).claim(key, "hasty")
    assert len(claims_on(jira, key)) == 1  # (the hasty claim withdrawn)
    jira.date_skew = 0.0
    holder.renew()
    holder.release()


def test_a_watch_tick_answers_ready_and_orphaned_from_one_search(jira: FakeJira) -> None:
    jira.add_issue("Ready")
    jira.add_issue("Orphan", status="In Progress")
    tracker = make(jira)
    with tracker.reading_once():
        assert len(tracker.ready()) == 1 and len(tracker.orphaned()) == 1
    assert len(jira.requests("GET", "/rest/api/3/search/jql")) == 1
    tracker.ready()
    assert len(jira.requests("GET", "/rest/api/3/search/jql")) == 2


def restricted(fake: FakeJira, visibility: dict[str, str] | None) -> JiraTracker:
    """A watcher whose claim comments only ``visibility`` sees (None: everyone)."""
    settings = JiraTrackerSettings.model_validate(
        {"kind": "jira", "site": fake.url, "project": "WID", "lease": 60, "claim_visibility": visibility}
    )
    return JiraTracker(settings, Api(fake.url, EMAIL, TOKEN), settle=0.0)


def test_claims_seen_by_a_group_notify_no_watcher_outside_it_and_still_hold_against_a_race(jira: FakeJira) -> None:
    key = jira.add_issue("Watched")
    ann = jira.user("Ann Watcher")["accountId"]
    bob = jira.user("Bob Bot-Keeper")["accountId"]
    jira.groups["beflow-bots"].add(bob)
    jira.watchers[key] = {ann, bob}
    open_claim = restricted(jira, None).claim(key, "open")
    assert jira.notified[-1][2] == {ann, bob}  # (without visibility every watcher is told of the claim)
    open_claim.release()
    group = {"type": "group", "value": "beflow-bots"}
    won = race([restricted(jira, group) for _ in range(4)], lambda w: w.claim(key, f"watcher-{id(w)}"))
    assert len(won) == 1
    told = [who for (k, cid, who) in jira.notified[1:] if k == key]
    assert told and all(who <= {bob} for who in told)  # Ann, outside the group, was told of none of them
    latest = jira.comments[key][-1]
    assert latest["visibility"] == group and latest["author"]["accountId"] == BOT
    assert not jira.sees(ann, latest.get("visibility"))
    with pytest.raises(LockedError):
        restricted(jira, group).claim(key, "late")
    won[0].renew()
    won[0].release()


def test_a_claim_for_a_role_the_account_is_not_in_is_refused_before_any_run(jira: FakeJira) -> None:
    key = jira.add_issue("Admins only")
    with pytest.raises(BeflowError, match="not a member"):
        restricted(jira, {"type": "role", "value": "Administrators"}).claim(key, "runner")
    assert claims_on(jira, key) == []


def test_doctor_says_who_sees_claims_and_whether_the_account_can_post_them(jira: FakeJira) -> None:
    def said(visibility: dict[str, str] | None) -> tuple[bool, bool, str, str]:
        tracker = restricted(jira, visibility)
        found = claims_check(tracker.api, tracker.settings)
        return found.ok, found.warning, found.detail, found.fix or ""

    assert "jira claims" in {f.name for f in restricted(jira, None).access_checks()}
    ok, warning, detail, fix = said(None)
    assert ok and warning and "notifies its watchers" in detail and "tracker.claim_visibility" in fix
    assert said({"type": "group", "value": "beflow-bots"})[:2] == (True, False)
    ok, _, detail, fix = said({"type": "group", "value": "site-admins"})
    assert not ok and "not in that group" in detail and "site-admins" in fix
    ok, warning, detail, _ = said({"type": "role", "value": "Developers"})
    assert ok and warning and "cannot verify" in detail  # (reading roles needs Administer projects)
    jira.project_admin = True
    assert said({"type": "role", "value": "Developers"})[:2] == (True, False)  # (in it through beflow-bots)
    ok, _, detail, _ = said({"type": "role", "value": "Administrators"})
    assert not ok and "not in that role" in detail
    ok, _, detail, _ = said({"type": "role", "value": "Testers"})
    assert not ok and "no such role" in detail and "Developers" in detail
