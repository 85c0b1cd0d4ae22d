"""The GitLab tracker holds its issues in memory and keeps them up to date with one request per look (GitLab's
listings answer no 304): what a person changes shows on the next look, a watch tick looks once, and an idle watch
over fifty issues costs one request per poll."""

from __future__ import annotations

import copy
import datetime as dt
import time
from typing import Any

import anyio
import pytest

from beflow.trackers import Status, reading_once
from beflow.trackers import gitlab_listing as listing
from beflow.trackers.gitlab_api import Unavailable
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab, Seen
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab import gitlab_tracker as tracker
from tests.support.projects import AutoProject

ISSUES = "/api/v4/projects/acme%2Fwidgets/issues"


@pytest.fixture
def gl(auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "lease": 30})
    return auto_project


def stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def edit(gitlab: FakeGitLab, iid: int, *, labels: list[str], ago: float = 0.0) -> None:
    """A person's edit of issue ``iid``'s labels, written ``ago`` seconds back (a transaction committed late)."""
    with gitlab.lock:
        gitlab.issues[iid]["labels"] = labels
        gitlab.issues[iid]["updated_at"] = stamp(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=ago))


def looks(gitlab: FakeGitLab) -> list[Seen]:
    """The listings of the project's issues GitLab was asked for."""
    return [s for s in gitlab.requests("GET", ISSUES) if s.path == ISSUES]


def since(count: int, gitlab: FakeGitLab) -> list[Seen]:
    return gitlab.seen[count:]


def test_a_look_after_the_first_asks_only_for_what_changed(gl: AutoProject, gitlab: FakeGitLab) -> None:
    for n in range(3):
        gitlab.add_issue(f"Issue {n}", labels=["beflow", "beflow:ready"])
    gitlab.add_issue("Someone else's", labels=["bug"])
    opened = tracker(gl)
    assert [i.key for i in opened.listing().issues] == ["1", "2", "3"]
    (first,) = looks(gitlab)
    assert first.query["labels"] == "beflow" and "updated_after" not in first.query

    seen = len(gitlab.seen)
    edit(gitlab, 2, labels=["beflow", "beflow:review"])  # a person moves it on
    edit(gitlab, 3, labels=["beflow:ready"])  # ... and takes this one from beflow
    edit(gitlab, 4, labels=["bug", "beflow"])  # ... and hands this one over
    issues = opened.listing().issues

    assert [(i.key, i.status) for i in issues] == [("1", Status.READY), ("2", Status.REVIEW), ("4", Status.OPEN)]
    (again,) = since(seen, gitlab)  # one request, for what changed, whatever the labels now
    assert again.path == ISSUES and "labels" not in again.query and again.query["updated_after"].endswith("Z")


def test_an_update_written_before_the_last_look_began_is_not_missed(gl: AutoProject, gitlab: FakeGitLab) -> None:
    """A change GitLab shows with a time before the previous look (the same second, a transaction committed while
    that look was read) is still seen: each look starts a margin before the previous one began."""
    edit(gitlab, gitlab.add_issue("One")["iid"], labels=["beflow", "beflow:ready"], ago=120.0)
    opened = tracker(gl)
    opened.listing()
    opened.listing()
    edit(gitlab, 1, labels=["beflow", "beflow:failed"], ago=20.0)  # written 20 s back, shown only now
    assert [i.status for i in opened.listing().issues] == [Status.FAILED]


def test_a_look_gitlab_failed_loses_no_change(
    gl: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 502 storm fails a look (after the client's retries); the next look starts where the last good one did, not
    where the failed one would have (no margin here to hide it: GitLab's clock shows whole seconds)."""
    monkeypatch.setattr(listing, "SLACK", 0.0)
    gitlab.add_issue("One", labels=["beflow", "beflow:ready"])
    opened = tracker(gl)
    opened.listing()
    edit(gitlab, 1, labels=["beflow", "beflow:review"])
    time.sleep(1.5)  # the failed look begins well after the change
    gitlab.fail(502, times=3, prefix=ISSUES)
    with pytest.raises(Unavailable):
        opened.listing()
    assert [i.status for i in opened.listing().issues] == [Status.REVIEW]


def test_a_listing_that_lags_behind_beflows_own_write_does_not_undo_it(gl: AutoProject, gitlab: FakeGitLab) -> None:
    """GitLab may answer a listing from a replica a moment behind: beflow's own write, as GitLab answered it, stands
    until a later state of the issue shows."""
    gitlab.add_issue("One", labels=["beflow", "beflow:ready"])
    opened = tracker(gl)
    opened.listing()
    before = copy.deepcopy(gitlab.issues[1])
    time.sleep(0.01)  # (the fake's clock shows milliseconds)
    opened.set_status("1", Status.IN_PROGRESS)

    def lagging(items: Any) -> Any:
        return [before if item["iid"] == 1 else item for item in items] if isinstance(items, list) else items

    gitlab.tamper("GET", ISSUES, lagging)
    assert [i.status for i in opened.listing().issues] == [Status.IN_PROGRESS]


def test_a_deleted_issue_leaves_at_the_next_whole_listing(
    gl: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    gitlab.add_issue("One", labels=["beflow"])
    gitlab.add_issue("Two", labels=["beflow"])
    opened = tracker(gl)
    opened.listing()
    with gitlab.lock:
        del gitlab.issues[2]  # deleted: no listing of changes shows it
    assert [i.key for i in opened.listing().issues] == ["1", "2"]
    monkeypatch.setattr(listing, "RESYNC", 0.0)
    assert [i.key for i in opened.listing().issues] == ["1"]
    assert "labels" in looks(gitlab)[-1].query  # the whole listing again


def test_a_tick_looks_once_and_its_own_writes_need_no_look(gl: AutoProject, gitlab: FakeGitLab) -> None:
    gitlab.add_issue("Ready", labels=["beflow", "beflow:ready"])
    gitlab.add_issue("Open", labels=["beflow"])
    opened = tracker(gl)
    with reading_once(opened):
        assert [i.key for i in opened.ready()] == ["1"]
        opened.orphaned()
        opened.listing(status=Status.REVIEW)
        opened.set_status("2", Status.READY)
        assert [i.key for i in opened.ready()] == ["1", "2"]  # its own write, as GitLab answered it
    assert len(looks(gitlab)) == 1


def test_an_idle_watch_over_fifty_issues_costs_one_request_per_poll(gl: AutoProject, gitlab: FakeGitLab) -> None:
    """Fifty issues in every status — the ten ready ones and the ten running all held by another machine — and a
    watch polling: after its first look, each tick is one request (what changed since the last), and nothing else."""
    from tests.watch.test_dispatcher import fast, watching

    statuses = ["ready", "review", "failed", "in-progress", None]
    for n in range(50):
        status = statuses[n % 5]
        gitlab.add_issue(f"Issue {n}", labels=["beflow"] + ([f"beflow:{status}"] if status else []))
    elsewhere = tracker(gl)
    elsewhere.leases.settle = 0.0
    for key in [str(n) for n in range(4, 51, 5)]:
        elsewhere.leases.claim(key, "a watch elsewhere")  # running there: no orphan here
    for key in [str(n) for n in range(1, 51, 5)]:
        elsewhere.leases.claim(key, "a watch elsewhere")  # and the ready ones taken there too: nothing to start
    gl.configure(watch=fast(concurrency=1))

    async def main() -> tuple[int, list[Seen], list[str]]:
        async with watching(gl) as watch:
            await watch.ticks(2)  # the first look reads everything (and who holds what), once
            start, ticks = len(gitlab.seen), watch.dispatcher.tick_count
            await watch.ticks(10)
            events = [e.type for e in watch.events]
            return watch.dispatcher.tick_count - ticks, since(start, gitlab), events

    ticks, idle, events = anyio.run(main)
    assert "dispatched" not in events and "error" not in events, events
    assert all(s.method == "GET" and s.path == ISSUES and "updated_after" in s.query for s in idle), {
        (s.method, s.path) for s in idle
    }
    assert ticks - 1 <= len(idle) <= ticks + 1  # one per tick (a tick may be under way at either end)
