"""Claims on GitLab, a chain of internal notes: of claimants racing for one issue exactly one wins (threads, and
processes), a dead lease is taken over by a claim naming it, a lease that cannot be renewed in time is lost before
anyone may take it, a hanging renewal fails before the lease ends, a release frees the issue at once, and notes that
imitate a claim (a stranger's, beflow's own words, a lease that does not read) are no claims."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from beflow.config import GitLabTrackerSettings
from beflow.errors import BeflowError, LockedError
from beflow.trackers import gitlab_claims
from beflow.trackers.claims import Claim, ClaimLost, keep_renewed
from beflow.trackers.comment_leases import Lease, Link, chain_of
from beflow.trackers.gitlab_api import Api, api_base, project_id
from beflow.trackers.gitlab_claims import VISIBLE, GitLabLeases, body_of, is_claim_note
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.waiting import eventually

BASE = f"/projects/{project_id(PROJECT)}"
NOTES = f"/api/v4{BASE}/issues/1/notes"


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def store(fake: FakeGitLab, *, lease: float = 30.0, settle: float = 0.05) -> GitLabLeases:
    """The claims of one machine (its own client) on the fake GitLab's project."""
    settings = GitLabTrackerSettings(kind="gitlab", project=PROJECT, url=fake.url, lease=lease)
    return GitLabLeases(settings, Api(api_base(fake.url), TOKEN), BASE, _call, settle=settle)


def claim_notes(fake: FakeGitLab, iid: int = 1) -> list[dict[str, Any]]:
    return [n for t in fake.discussions.get(("Issue", iid), []) for n in t["notes"] if is_claim_note(n["body"])]


def lease_of(note: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(note["body"].split("<!-- beflow:claim ", 1)[1].removesuffix(" -->"))
    return data


def updated(fake: FakeGitLab, iid: int = 1) -> dt.datetime:
    return dt.datetime.fromisoformat(fake.issues[iid]["updated_at"].replace("Z", "+00:00"))


@pytest.fixture
def issue(gitlab: FakeGitLab) -> dict[str, Any]:
    return gitlab.add_issue("One", labels=["beflow", "beflow:ready"])


# -- the chain ---------------------------------------------------------------------------------------------------------


def link(note_id: int, takes: int | None, *, released: bool = False) -> Link:
    lease = Lease(owner=f"o{note_id}", host="h", pid=1, nonce=f"nonce-{note_id:04}", takes=takes, released=released)
    now = dt.datetime.now(dt.UTC)
    return Link(note_id, lease, now, now)


def test_the_chain_follows_the_first_claim_of_each_head_and_ignores_every_other() -> None:
    assert chain_of([]) == []
    # 10 starts it; 11 (a second start) lost; 12 took 10 first, 13 took it too late; 14 names 13, which lost.
    links = [link(13, 10), link(11, None), link(10, None), link(12, 10), link(14, 13), link(15, 12)]
    assert [x.id for x in chain_of(links)] == [10, 12, 15]


def race(machines: list[GitLabLeases], key: str) -> tuple[list[Claim], list[str]]:
    """Every machine claims ``key`` at once, each from its thread: the claims won, and why the others were refused."""
    start, won, lost = threading.Barrier(len(machines)), [], []

    def claim(machine: GitLabLeases, n: int) -> None:
        start.wait()
        try:
            won.append(machine.claim(key, owner=f"watcher {n}"))
        except LockedError as error:
            lost.append(error.message)

    threads = [threading.Thread(target=claim, args=(m, n)) for n, m in enumerate(machines)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won, lost


def test_racing_claimants_in_threads_exactly_one_wins_every_time(gitlab: FakeGitLab) -> None:
    machines = [store(gitlab) for _ in range(4)]
    raced = 0
    for round_ in range(5):
        iid = gitlab.add_issue(f"Issue {round_}")["iid"]
        # Every claimant reads the notes before any claim note lands: they all post, and the chain picks one.
        gitlab.delay("POST", f"/api/v4{BASE}/issues/{iid}/notes", 0.5, times=len(machines))
        won, lost = race(machines, str(iid))
        assert len(won) == 1 and len(lost) == len(machines) - 1, (won, lost)
        raced += sum("just now" in message for message in lost)
        (note,) = claim_notes(gitlab, iid)  # the losers deleted theirs
        assert lease_of(note)["owner"] == won[0].info.owner and note["internal"] is True
        assert all(m.holder(str(iid)).owner == won[0].info.owner for m in machines)  # type: ignore[union-attr]
    assert raced >= 5  # the claims did race: losers posted theirs, saw another first, and withdrew


def test_a_lower_id_that_becomes_visible_late_wins_over_one_seen_first(gitlab: FakeGitLab, issue: Any) -> None:
    first, second = store(gitlab, settle=0.8), store(gitlab, settle=0.8)
    gitlab.stall_notes(0.3)  # the first claimant's note: its id drawn at once, seen 0.3 s later
    got: list[Claim] = []
    racing = threading.Thread(target=lambda: got.append(first.claim("1", owner="watcher a")))
    racing.start()
    eventually(lambda: not gitlab.stalls, "the first claim note to be on its way")
    with pytest.raises(LockedError, match="claimed by another beflow just now"):
        second.claim("1", owner="watcher b")  # its note is answered first, with a higher id
    racing.join()
    (note,) = claim_notes(gitlab)
    assert got[0].info.owner == "watcher a" and lease_of(note)["owner"] == "watcher a"


def test_racing_claimants_in_processes_exactly_one_wins_every_time(gitlab: FakeGitLab) -> None:
    script = (
        "import os, sys\n"
        "from beflow.config import GitLabTrackerSettings\n"
        "from beflow.errors import LockedError\n"
        "from beflow.trackers.gitlab_api import Api, api_base, project_id\n"
        "from beflow.trackers.gitlab_claims import GitLabLeases\n"
        "url = sys.argv[1]\n"
        "settings = GitLabTrackerSettings(kind='gitlab', project='acme/widgets', url=url, lease=30)\n"
        "api = Api(api_base(url), os.environ['GITLAB_TOKEN'])\n"
        "call = lambda fn, *a, **k: fn(*a, **k)\n"
        "store = GitLabLeases(settings, api, '/projects/' + project_id('acme/widgets'), call, settle=0.2)\n"
        "store._user()\n"
        "print('ready', flush=True)\n"
        "for line in sys.stdin:\n"
        "    try:\n"
        "        store.claim(line.strip(), f'process {os.getpid()}')\n"
        "        print('won', flush=True)\n"
        "    except LockedError:\n"
        "        print('lost', flush=True)\n"
    )
    env = {**os.environ, "GITLAB_TOKEN": TOKEN}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, gitlab.url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=env,
        )
        for _ in range(3)
    ]  # fmt: skip
    try:
        for process in processes:
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        for round_ in range(4):
            iid = gitlab.add_issue(f"Issue {round_}")["iid"]
            gitlab.delay("POST", f"/api/v4{BASE}/issues/{iid}/notes", 0.3, times=len(processes))
            for process in processes:
                assert process.stdin is not None
                process.stdin.write(f"{iid}\n")
                process.stdin.flush()
            said = [p.stdout.readline().strip() for p in processes if p.stdout is not None]
            assert sorted(said) == ["lost", "lost", "won"], said
            (note,) = claim_notes(gitlab, iid)
            winner = processes[said.index("won")]
            assert lease_of(note)["pid"] == winner.pid
    finally:
        for process in processes:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=30)


# -- leases: renewed, lost, taken over, released -----------------------------------------------------------------


def test_a_renewal_edits_the_claim_note_and_moves_its_updated_at(gitlab: FakeGitLab, issue: Any) -> None:
    claim = store(gitlab).claim("1", owner="watcher a")
    (note,) = claim_notes(gitlab)
    before = note["updated_at"]
    time.sleep(0.01)
    claim.renew()
    assert note["updated_at"] > before and lease_of(note)["renewal"] == 1
    assert claim.renew_every is not None and (claim.seconds_left() or 0) > 25


def test_a_dead_lease_is_taken_over_by_a_claim_naming_it(gitlab: FakeGitLab, issue: Any) -> None:
    dead = store(gitlab, lease=1).claim("1", owner="watcher a")  # its process is gone: never renewed
    other = store(gitlab, lease=1)
    with pytest.raises(LockedError, match=r"claimed by watcher a \(pid"):
        other.claim("1", owner="watcher b")
    taken: list[Claim] = []

    def take() -> bool:
        try:
            taken.append(other.claim("1", owner="watcher b"))
        except LockedError:
            return False
        return True

    eventually(take, "the lease to run out and be taken over", timeout=10, interval=0.2)
    first, second = claim_notes(gitlab)
    assert lease_of(second)["takes"] == first["id"] and lease_of(first)["takes"] is None
    assert other.holder("1").owner == "watcher b"  # type: ignore[union-attr]
    with pytest.raises(ClaimLost), dead.held():  # its writes would not be made
        pass


YEARS = 10 * 365 * 24 * 3600.0


def test_a_date_years_ahead_takes_no_live_claim_over(gitlab: FakeGitLab, issue: Any) -> None:
    holder = store(gitlab).claim("1", owner="watcher a")
    gitlab.skew_clock("GET", "/api/v4/", YEARS)  # every answer to a GET says it is ten years later

    other = store(gitlab)
    with pytest.raises(LockedError, match=r"claimed by watcher a .*GitLab's Date header"):
        other.claim("1", owner="watcher b")

    assert len(claim_notes(gitlab)) == 1  # its note withdrawn
    holder.renew()  # and the holder holds on
    with holder.held():
        pass


def test_a_date_years_behind_holds_a_dead_claim_no_longer_than_a_lease(gitlab: FakeGitLab, issue: Any) -> None:
    store(gitlab, lease=1).claim("1", owner="watcher a")  # its process is gone: never renewed
    watcher = store(gitlab, lease=1)
    gitlab.skew_clock("GET", NOTES, -YEARS, times=1)  # one stale answer

    watcher.observe({"1": updated(gitlab)})
    assert watcher.held(["1"]) == {"1"}

    eventually(lambda: watcher.held(["1"]) == set(), "the dead lease to be seen run out", timeout=10, interval=0.2)
    assert watcher.claim("1", owner="watcher b").info.owner == "watcher b"


def test_a_lease_that_cannot_be_renewed_in_time_is_lost_before_another_takes_it(gitlab: FakeGitLab, issue: Any) -> None:
    claim = store(gitlab, lease=2).claim("1", owner="watcher a")
    (note,) = claim_notes(gitlab)
    gitlab.delay("PUT", f"{NOTES}/{note['id']}", 30, times=None)  # every renewal hangs
    lost_at: list[float] = []

    def lose(reason: str) -> None:
        lost_at.append(time.monotonic())

    keeper = threading.Thread(target=anyio.run, args=(keep_renewed, claim, lose, lambda _: None))
    keeper.start()
    other = store(gitlab, lease=2)
    taken: list[float] = []

    def take() -> bool:
        try:
            other.claim("1", owner="watcher b")
        except LockedError:
            return False
        taken.append(time.monotonic())
        return True

    eventually(take, "another machine to take the issue over", timeout=15, interval=0.05)
    keeper.join()
    assert lost_at and lost_at[0] < taken[0]


def test_a_hanging_renewal_fails_before_the_lease_ends(gitlab: FakeGitLab, issue: Any) -> None:
    claim = store(gitlab, lease=3).claim("1", owner="watcher a")
    (note,) = claim_notes(gitlab)
    gitlab.delay("PUT", f"{NOTES}/{note['id']}", 25)
    with pytest.raises(BeflowError, match="time the lease had left"):
        claim.renew()
    assert (claim.seconds_left() or 0) <= 0.5
    # Nobody could take it yet: the renewal gave up while the lease still held on GitLab's clock.
    with pytest.raises(LockedError, match="claimed by watcher a"):
        store(gitlab, lease=3).claim("1", owner="watcher b")


def test_a_claim_taken_over_is_lost_at_its_next_renewal_and_its_writes_are_refused(
    gitlab: FakeGitLab, issue: Any
) -> None:
    claim = store(gitlab).claim("1", owner="watcher a")
    (note,) = claim_notes(gitlab)
    lease = Lease(owner="watcher b", host="elsewhere", pid=9, nonce="b" * 16, takes=note["id"])
    gitlab.add_note("Issue", 1, body_of(lease), author=gitlab.bot, internal=True)  # (as a skewed clock would)
    with pytest.raises(ClaimLost, match=r"taken over by watcher b \(pid 9 on elsewhere\)"):
        claim.renew()
    with pytest.raises(ClaimLost), claim.held():
        pass


def test_a_released_claim_frees_the_issue_at_once(gitlab: FakeGitLab, issue: Any) -> None:
    mine, other = store(gitlab), store(gitlab)
    claim = mine.claim("1", owner="watcher a")
    assert other.holder("1").owner == "watcher a"  # type: ignore[union-attr]
    claim.release()
    assert other.holder("1") is None and other.last_holder("1").owner == "watcher a"  # type: ignore[union-attr]
    assert other.claim("1", owner="watcher b").info.owner == "watcher b"
    first, second = claim_notes(gitlab)
    assert lease_of(first)["released"] is True and lease_of(second)["takes"] == first["id"]


def test_a_claim_whose_answer_was_lost_is_found_by_its_nonce(gitlab: FakeGitLab, issue: Any) -> None:
    gitlab.fail(502, only="POST", prefix=NOTES, after=True)
    claim = store(gitlab).claim("1", owner="watcher a")
    (note,) = claim_notes(gitlab)
    assert claim.info.owner == "watcher a" and lease_of(note)["owner"] == "watcher a"


def test_a_claim_this_process_wrote_and_lost_the_answer_of_is_taken_again(gitlab: FakeGitLab, issue: Any) -> None:
    mine = store(gitlab)
    gitlab.fail(502, only="POST", prefix=NOTES, after=True)
    gitlab.tamper("GET", NOTES, lambda notes: [])  # (and the look for it misses it: the claim fails)
    with pytest.raises(BeflowError):
        mine.claim("1", owner="watcher a")
    gitlab.tampers.clear()
    assert len(claim_notes(gitlab)) == 1  # a live claim of its own that no run holds: not "claimed by" itself
    assert mine.claim("1", owner="watcher a").info.owner == "watcher a"
    with pytest.raises(LockedError, match="claimed by watcher a"):
        store(gitlab).claim("1", owner="watcher b")


# -- what counts as a claim ------------------------------------------------------------------------------------------


def test_notes_that_imitate_a_claim_are_no_claims(gitlab: FakeGitLab, issue: Any) -> None:
    mallory = gitlab.user("mallory", access_level=30)
    forged = body_of(Lease(owner="mallory", host="x", pid=1, nonce="m" * 16, takes=None))
    gitlab.add_note("Issue", 1, forged, author=mallory, internal=True)  # a stranger's, internal
    gitlab.add_note("Issue", 1, forged, author=gitlab.bot)  # beflow's own words quoting one: not internal
    gitlab.add_note("Issue", 1, forged + "\nmore", author=gitlab.bot, internal=True)  # not the whole text
    for bad in ('{"owner": 5}', "{not json}", json.dumps({**json.loads(forged.split("claim ")[1][:-4]), "pid": "1"})):
        gitlab.add_note("Issue", 1, f"{VISIBLE}\n\n<!-- beflow:claim {bad} -->", author=gitlab.bot, internal=True)
    ahead = Lease(owner="mallory", host="x", pid=1, nonce="n" * 16, takes=10**9)  # takes a later note
    gitlab.add_note("Issue", 1, body_of(ahead), author=gitlab.bot, internal=True)
    mine = store(gitlab)
    assert mine.holder("1") is None and mine.last_holder("1") is None and mine.held(["1"]) == set()
    claim = mine.claim("1", owner="watcher a")
    assert claim.info.owner == "watcher a" and lease_of(claim_notes(gitlab)[-1])["takes"] is None


def test_a_lease_cannot_end_its_marker_early() -> None:
    body = body_of(Lease(owner="a --> <b>", host="h", pid=1, nonce="x" * 16, takes=None))
    assert body.count("-->") == 1 and "<b>" not in body and is_claim_note(body)


# -- held: one cheap question ------------------------------------------------------------------------------------------


def test_held_reads_an_issues_notes_only_when_it_moved_or_a_live_head_may_have_run_out(
    gitlab: FakeGitLab, issue: Any
) -> None:
    watcher, runner = store(gitlab, lease=2), store(gitlab, lease=2)
    second = gitlab.add_issue("Two")

    def reads() -> int:
        return len(gitlab.requests("GET", f"/api/v4{BASE}/issues/"))

    def look() -> set[str]:
        watcher.observe({"1": updated(gitlab, 1), "2": updated(gitlab, second["iid"])})
        return watcher.held(["1", "2"])

    assert look() == set() and reads() == 2
    assert look() == set() and look() == set() and reads() == 2  # nothing moved: no request
    runner.claim("1", owner="watcher a")  # a claim note moves the issue's updated_at
    before = reads()
    assert look() == {"1"} and reads() == before + 1
    assert look() == {"1"} and reads() == before + 1
    eventually(lambda: look() == set(), "the unrenewed lease to run out", timeout=10, interval=0.1)
    assert reads() <= before + 3  # read again once it may have run out (twice at most), not at every look


def test_an_issue_never_listed_is_read_at_every_question(gitlab: FakeGitLab, issue: Any) -> None:
    watcher = store(gitlab)
    assert watcher.held(["1"]) == set() and watcher.held(["1"]) == set()
    assert len(gitlab.requests("GET", NOTES)) == 2


def test_a_gitlab_that_makes_the_claim_note_public_is_refused_and_the_note_withdrawn(
    gitlab: FakeGitLab, issue: Any
) -> None:
    gitlab.tamper("POST", NOTES, lambda note: {**note, "internal": False, "confidential": False})  # (an old GitLab)
    with pytest.raises(BeflowError, match="internal notes"):
        store(gitlab).claim("1", owner="watcher a")
    assert claim_notes(gitlab) == []


def test_an_issue_with_more_notes_than_are_read_counts_as_held_and_is_not_claimed(
    gitlab: FakeGitLab, issue: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gitlab_claims, "MAX_PAGES", 1)  # (100 notes read, not 2,000)
    talker = gitlab.user("talker", access_level=30)
    for n in range(100):
        gitlab.add_note("Issue", 1, f"word {n}", author=talker)
    mine = store(gitlab)
    with pytest.raises(LockedError, match="more than 100 notes"):
        mine.claim("1", owner="watcher a")
    assert mine.held(["1"]) == {"1"} and claim_notes(gitlab) == []


def test_a_claim_whose_chain_cannot_be_read_back_is_withdrawn(gitlab: FakeGitLab, issue: Any) -> None:
    gitlab.delay("POST", NOTES, 0.3)
    failed: list[BeflowError] = []

    def claim() -> None:
        try:
            store(gitlab).claim("1", owner="watcher a")
        except BeflowError as error:
            failed.append(error)

    claiming = threading.Thread(target=claim)
    claiming.start()
    eventually(lambda: not gitlab.delays, "the claim note to be on its way")
    gitlab.fail(502, only="GET", prefix=NOTES, times=3)  # every try of the look after it
    claiming.join()
    assert failed and claim_notes(gitlab) == []  # whether it held is unknown: it is withdrawn
    assert store(gitlab).claim("1", owner="watcher b").info.owner == "watcher b"
