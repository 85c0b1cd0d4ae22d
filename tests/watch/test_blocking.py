"""A watch holds back an issue that waits for others (docs/trackers.md, "Blockers"), in-process: each tick's look is
the dispatcher's own survey, called from the test (no agent runs, nothing waits on a clock)."""

from __future__ import annotations

import re

from beflow.app import open_project
from beflow.config import load_project
from beflow.events import WatchEvent
from beflow.trackers import Status
from beflow.watch.dispatcher import Dispatcher
from tests.support.projects import AutoProject


def blocked_by(project: AutoProject, key: str, *keys: str) -> None:
    """Give the local issue ``key`` a ``blocked_by`` line, as a person editing its file would."""
    path = project.issue(key).path
    assert path is not None
    text = path.read_text()
    path.write_text(re.sub(r"^priority: .*$", rf"\g<0>\nblocked_by: [{', '.join(keys)}]", text, count=1, flags=re.M))


def dispatcher(project: AutoProject, concurrency: int = 2) -> tuple[Dispatcher, list[WatchEvent]]:
    project.configure(watch={"interval": 60, "concurrency": concurrency})
    events: list[WatchEvent] = []
    watch = Dispatcher(load_project(project.config_path), opens=open_project)
    watch.listener = lambda event: events.append(event) if isinstance(event, WatchEvent) else None
    return watch, events


def look(watch: Dispatcher) -> list[str]:
    """One tick's look at the tracker (no dispatch): the queue's keys."""
    watch._survey(False)
    return [issue.key for issue in watch.queue]


def test_an_issue_waits_for_its_open_blocker_says_why_once_and_is_queued_once_the_blocker_is_done(
    auto_project: AutoProject,
) -> None:
    first = auto_project.new_issue("reply: one", title="the schema")
    second = auto_project.new_issue("reply: two", title="the migration")
    blocked_by(auto_project, second, first)
    watch, events = dispatcher(auto_project)

    assert look(watch) == [first]
    assert watch.snapshot().held == {second: f"blocked by {first} (ready)"}
    assert look(watch) == [first]  # said once, not at every look
    assert [(e.type, e.issue, e.data.fields()) for e in events if e.type == "held"] == [
        ("held", second, {"reason": f"blocked by {first} (ready)"})
    ]

    tracker = auto_project.tracker
    tracker.set_status(first, Status.OPEN)
    assert look(watch) == []
    assert watch.snapshot().held == {second: f"blocked by {first} (open)"}  # the new reason, said again
    assert len([e for e in events if e.type == "held"]) == 2

    tracker.set_status(first, Status.CLOSED)
    assert look(watch) == [second]
    assert watch.snapshot().held == {}
    assert watch.blockers.may_start(watch.tracker, watch.queue[0])


def test_a_cycle_holds_both_issues_saying_so_and_a_missing_blocker_holds_too(auto_project: AutoProject) -> None:
    one, two, three = (auto_project.new_issue("reply: x", title=t) for t in ("one", "two", "three"))
    blocked_by(auto_project, one, two)
    blocked_by(auto_project, two, one)
    blocked_by(auto_project, three, "99")
    watch, _ = dispatcher(auto_project, concurrency=3)

    assert look(watch) == []  # (returns: a cycle is read one level deep, never walked)
    held = watch.snapshot().held
    assert held[one] == f"blocked by {two} (ready, which waits for it in turn)"
    assert held[two] == f"blocked by {one} (ready, which waits for it in turn)"
    assert held[three] == "blocked by 99 (no such issue)"


def test_only_the_issues_a_dispatch_would_start_are_looked_at(auto_project: AutoProject) -> None:
    first = auto_project.new_issue("reply: x", title="first", priority=0)
    second = auto_project.new_issue("reply: x", title="second", priority=1)
    third = auto_project.new_issue("reply: x", title="third", priority=2)
    blocked_by(auto_project, first, third)
    watch, _ = dispatcher(auto_project, concurrency=1)

    # One free lane: the first is held, the second is the one to start, the third was not looked at.
    assert look(watch) == [second, third]
    assert watch.blockers.cleared == {second}
    assert not watch.blockers.may_start(watch.tracker, watch.queue[1])
