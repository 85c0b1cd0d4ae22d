"""The dispatcher behind ``beflow watch`` (docs/modes.md), run in-process with the real acpx and the test agent.

Timings are never asserted (two shared cores): concurrency is read from the start and end lines the test agent's
``mark`` directive appends, and everything else from events, run records and the tracker.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from beflow.app import open_project
from beflow.config import load_project
from beflow.errors import ConfigError, LockedError
from beflow.events import WatchEvent
from beflow.run import issue_status
from beflow.run.runner import Run, RunRequest
from beflow.trackers import Status
from beflow.trackers.local import LocalTracker
from beflow.watch.dispatcher import Dispatcher
from beflow.watch.lanes import Running
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

#: A watch section that keeps the suite fast: poll often, back off briefly.
FAST = {"interval": 0.1, "concurrency": 2, "max_attempts": 2, "backoff": 0.1, "backoff_max": 1}


def fast(**changes: Any) -> dict[str, Any]:
    return {**FAST, **changes}


@dataclass
class Watch:
    """A dispatcher ticking in the background of a test, and the events it emitted."""

    dispatcher: Dispatcher
    events: list[WatchEvent] = field(default_factory=list)

    def of(self, kind: str, issue: str | None = None) -> list[WatchEvent]:
        return [e for e in self.events if e.type == kind and (issue is None or e.issue == issue)]

    async def until(self, condition: Callable[[], bool], timeout: float = 90) -> None:
        """Wait until ``condition`` holds (the timeout only catches a hang; nothing is asserted on time)."""
        with anyio.fail_after(timeout):
            while not condition():
                await anyio.sleep(0.05)

    async def directories_watched(self) -> None:
        """Until the dispatcher watches the tracker's directories (or, with none yet, for one to appear): a change
        made from here on wakes it."""
        await self.until(lambda: self.dispatcher.wakeup is not None and self.dispatcher.wakeup.watching is not None)

    async def ticks(self, count: int) -> None:
        """Wait for ``count`` more ticks."""
        target = self.dispatcher.tick_count + count
        await self.until(lambda: self.dispatcher.tick_count >= target)


class Clock:
    """A wall clock a test moves by hand (``Dispatcher(clock=...)``): backoffs fall due without waiting for them."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@asynccontextmanager
async def watching(project: AutoProject, clock: Clock | None = None) -> AsyncIterator[Watch]:
    """``beflow watch`` on ``project`` for the body of the ``async with``; stopped (runs cancelled) after it."""
    dispatcher = Dispatcher(load_project(project.config_path), opens=open_project, clock=clock or time.time)
    watch = Watch(dispatcher)
    dispatcher.listener = lambda event: watch.events.append(event) if isinstance(event, WatchEvent) else None
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(dispatcher.watch)
        yield watch
        tasks.cancel_scope.cancel()


def intervals(marks: Path) -> dict[int, tuple[float, float]]:
    """The [start, end] of each agent process, from the lines ``mark`` appended."""
    seen: dict[int, dict[str, float]] = {}
    for line in marks.read_text().splitlines():
        what, epoch, pid = line.split()
        seen.setdefault(int(pid), {})[what] = float(epoch)
    return {pid: (times["start"], times["end"]) for pid, times in seen.items()}


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The largest number of spans open at one instant (an end at the very instant of a start does not count)."""
    points = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    best = current = 0
    for _, step in points:
        current += step
        best = max(best, current)
    return best


# -- concurrency and claims -------------------------------------------------------------------------------------


def test_never_more_than_concurrency_agents_run_at_once_and_that_many_do(
    auto_project: AutoProject, tmp_path: Path
) -> None:
    auto_project.configure(watch=fast(concurrency=2))
    marks = tmp_path / "marks.log"
    keys = [auto_project.new_issue("sleep 1", f"mark {marks}", title=f"task {n}") for n in range(5)]

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: len(watch.of("finished")) == 5)
        return watch

    watch = anyio.run(scenario)

    spans = intervals(marks)
    assert len(spans) == 5  # five agent processes, one per issue
    assert max_overlap(list(spans.values())) == 2  # never more than `concurrency`, and parallel for real
    assert sorted(e.issue for e in watch.of("dispatched")) == sorted(keys)
    assert {r.outcome for r in auto_project.records()} == {"no_changes"}
    assert {auto_project.issue(k).status for k in keys} == {Status.REVIEW}


def test_a_dispatch_whose_issue_is_no_longer_ready_once_claimed_does_not_run(auto_project: AutoProject) -> None:
    """Another watcher may run the issue between our poll and our claim: then ours is skipped, not a rerun."""
    key = auto_project.new_issue("write one.txt 1")
    auto_project.tracker.set_status(key, Status.IN_PROGRESS)
    auto_project.tracker.set_status(key, Status.REVIEW)
    project = load_project(auto_project.config_path)

    with pytest.raises(LockedError, match=f"issue {key} is no longer ready"):
        anyio.run(Run(project, auto_project.tracker, RunRequest(key=key, mode="watch", only_if_ready=True)).execute)

    assert auto_project.records() == []
    assert auto_project.issue(key).status == Status.REVIEW


# -- retries ----------------------------------------------------------------------------------------------------


def test_a_failing_issue_is_retried_with_backoff_on_its_branch_then_failed_after_max_attempts(
    auto_project: AutoProject,
) -> None:
    auto_project.configure(watch=fast(max_attempts=3, backoff=0.1, backoff_max=0.15))
    key = auto_project.new_issue("write progress.txt step", "fail out of ideas")

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("failed")))
            await watch.ticks(3)  # and nothing more happens
        return watch

    watch = anyio.run(scenario)

    # Delays double from `backoff`, capped by `backoff_max`; each names the attempt it is for.
    retries = [(e.data.attempt, e.data.delay) for e in watch.of("retry_scheduled", key)]
    assert retries == [(2, 0.1), (3, 0.15)]
    assert [e.data.attempt for e in watch.of("dispatched", key)] == [1, 2, 3]
    assert "gave up after 3 attempts" in watch.of("failed", key)[0].data.reason

    first, second, third = reversed(auto_project.records(key))
    assert [r.attempt for r in (first, second, third)] == [1, 2, 3]
    assert {r.outcome for r in (first, second, third)} == {"failed"}
    # Every attempt works on the same branch and continues where the previous one left it.
    assert {r.branch for r in (first, second, third)} == {f"beflow/{key}"}
    assert first.commit is not None and second.base_commit == third.base_commit == first.commit
    prompt = (auto_project.run_dir(second) / "prompt.md").read_text()
    assert "this is attempt 2: earlier work on this branch is already here" in prompt

    issue = auto_project.issue(key)
    assert issue.status == Status.FAILED
    assert "beflow gives up on this issue: 3 attempt(s)" in issue.comments[-1].text


def test_a_retry_waits_for_its_backoff_and_runs_when_it_falls_due(auto_project: AutoProject) -> None:
    """While backing off, the issue is ready on the tracker but not dispatched, and shows as backing off; an hour
    later (on the test's clock) the retry runs."""
    auto_project.configure(watch=fast(max_attempts=2, backoff=3600))
    key = auto_project.new_issue("fail once")
    clock = Clock()

    async def scenario() -> tuple[Watch, list[Any], int]:
        async with watching(auto_project, clock) as watch:
            await watch.until(lambda: bool(watch.of("retry_scheduled")))
            await watch.ticks(3)
            backoffs = watch.dispatcher.snapshot().backoffs
            dispatched_while_waiting = len(watch.of("dispatched", key))
            clock.advance(3600)
            await watch.until(lambda: len(watch.of("finished", key)) == 2)
        return watch, backoffs, dispatched_while_waiting

    watch, backoffs, dispatched_while_waiting = anyio.run(scenario)

    assert dispatched_while_waiting == 1
    assert [(b.key, b.attempt) for b in backoffs] == [(key, 2)]
    assert [e.data.attempt for e in watch.of("dispatched", key)] == [1, 2]
    assert auto_project.issue(key).status == Status.FAILED  # max_attempts reached


@pytest.mark.parametrize(
    "break_it",
    [
        pytest.param(
            lambda p: p.configure(prompt="Fix it.\nFirst label: {{ issue.labels[0] }}\n"), id="prompt-does-not-render"
        ),
        pytest.param(
            lambda p: p.configure(agent={"command": "env ACP_TEST_AUTH=required " + p.config["agent"]["command"]}),
            id="agent-not-logged-in",
        ),
    ],
)
def test_a_permanent_failure_is_not_retried_and_fails_the_issue(
    auto_project: AutoProject, break_it: Callable[[AutoProject], None]
) -> None:
    auto_project.configure(watch=fast(max_attempts=3))
    break_it(auto_project)
    key = auto_project.new_issue("write one.txt 1")

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("failed")))
            await watch.ticks(3)
        return watch

    watch = anyio.run(scenario)

    assert len(watch.of("dispatched", key)) == 1
    assert watch.of("retry_scheduled") == []
    assert watch.of("failed", key)[0].data.reason.startswith("not retried: ")
    (record,) = auto_project.records(key)
    assert record.outcome == "failed"
    issue = auto_project.issue(key)
    assert issue.status == Status.FAILED
    assert "beflow gives up on this issue: it cannot succeed as configured" in issue.comments[-1].text


def test_a_configuration_every_run_would_fail_on_holds_dispatching_back(auto_project: AutoProject) -> None:
    """A broken `.mcp.json` would fail every issue alike: nothing is dispatched, the problem is said once, and
    dispatching resumes when it is fixed; no issue is failed for it."""
    auto_project.configure(watch=fast())
    good = (auto_project.directory / ".mcp.json").read_text()
    (auto_project.directory / ".mcp.json").write_text(json.dumps({"mcpServers": {"broken": {"args": []}}}))
    key = auto_project.new_issue("write one.txt 1")

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.ticks(3)
            assert watch.of("dispatched") == []
            # Replaced whole, as an editor saves: the tick reads it in a worker thread, meanwhile.
            (auto_project.directory / ".mcp.json.new").write_text(good)
            os.replace(auto_project.directory / ".mcp.json.new", auto_project.directory / ".mcp.json")
            await watch.until(lambda: bool(watch.of("finished", key)))
        return watch

    watch = anyio.run(scenario)

    errors = [e for e in watch.of("error") if "not dispatching until this is fixed" in e.data.message]
    assert len(errors) == 1 and "mcpServers.broken" in errors[0].data.message
    assert watch.of("finished", key)[0].data.outcome == "succeeded"
    assert auto_project.issue(key).status == Status.REVIEW


@pytest.mark.parametrize(
    ("capability", "resumed"), [("resume", "session/resume"), ("load", "session/load"), ("none", None)]
)
def test_a_retry_resumes_the_agents_session_where_the_agent_can(
    auto_project: AutoProject,
    monkeypatch: pytest.MonkeyPatch,
    no_leftover_processes: None,
    capability: str,
    resumed: str | None,
) -> None:
    monkeypatch.setenv("ACP_TEST_RESUME", capability)
    auto_project.configure(watch=fast(max_attempts=2))
    key = auto_project.new_issue("write progress.txt step", "fail not yet")

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("failed", key)))
        return watch

    anyio.run(scenario)

    second, first = auto_project.records(key)
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.session is not None
    transcript = (auto_project.run_dir(second) / "transcript.jsonl").read_text()
    if resumed is None:
        assert second.resumed_session is None
        assert "does not support session/resume or session/load" in (second.resume_note or "")
        assert (second.resume_note or "").endswith("started cold")
        assert '"method":"session/new"' in transcript  # the retry started cold, in the same run
    else:
        assert second.resumed_session == first.session
        assert f'"method":"{resumed}"' in transcript and first.session in transcript
        assert second.session == first.session  # so that a third attempt would resume it too
    # acpx's record of the named session (it held the injected servers' values) is gone, and so is its owner.
    sessions = Path(os.environ["HOME"]) / ".acpx" / "sessions"
    if resumed is not None:
        assert sessions.is_dir()  # acpx kept its record of the named session there...
    assert not sessions.is_dir() or not list(sessions.glob(f"{first.session}.*"))  # ...and beflow removed it
    assert auto_project.secrets_in_records() == []


# -- reconciliation ---------------------------------------------------------------------------------------------


def test_closing_an_issue_mid_run_cancels_the_run_and_restores_its_worktree(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    marks = tmp_path / "marks.log"
    key = auto_project.new_issue("write partial.txt half", "sleep 60", f"mark {marks}")
    auto_project.configure(watch=fast())
    acpxrc_seen: list[bool] = []

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: marks.exists())
            assert [r.key for r in watch.dispatcher.snapshot().running] == [key]
            record = auto_project.only_record()
            acpxrc_seen.append((Path(record.worktree or "") / ".acpxrc.json").exists())
            auto_project.tracker.set_status(key, Status.CLOSED, note="not needed after all", author="someone")
            await watch.until(lambda: bool(watch.of("finished")))
        return watch

    watch = anyio.run(scenario)

    assert acpxrc_seen == [True]  # injected while the agent ran
    assert "the issue is now closed" in watch.of("cancelled", key)[0].data.reason
    (record,) = auto_project.records(key)
    assert record.outcome == "cancelled" and record.stop_reason == "the issue is now closed"
    assert any("removed" in line for line in record.restored)
    # The agent was stopped before its `sleep` ended (its mark has an end line from the cancellation) ...
    assert [line.split()[0] for line in marks.read_text().splitlines()] == ["start", "end"]
    # ... its worktree is gone (nothing managed left in it), its work kept on the branch.
    assert not Path(record.worktree or "").exists()
    assert auto_project.branch_files(f"beflow/{key}")["partial.txt"] == "half"
    # The person's word stands: the issue stays closed, and is not picked up again.
    issue = auto_project.issue(key)
    assert issue.status == Status.CLOSED
    assert watch.of("dispatched", key) and len(watch.of("dispatched", key)) == 1


def test_an_issue_moved_out_of_the_ready_set_by_hand_mid_run_is_cancelled(
    auto_project: AutoProject, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.log"
    key = auto_project.new_issue("sleep 60", f"mark {marks}")
    auto_project.configure(watch=fast())

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: marks.exists())
            auto_project.tracker.set_status(key, Status.READY, author="someone")
            auto_project.tracker.set_status(key, Status.OPEN, author="someone")
            await watch.until(lambda: bool(watch.of("finished")))
        return watch

    watch = anyio.run(scenario)

    assert watch.of("cancelled", key)[0].data.reason == "the issue is now open"
    assert auto_project.only_record().outcome == "cancelled"
    assert auto_project.issue(key).status == Status.OPEN


def test_a_run_that_moved_its_issue_on_as_it_finished_is_not_cancelled_by_a_look_before_its_lane_heard_so(
    auto_project: AutoProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run tells the tracker how it ended (review) before its lane hears that it finished: a reconciliation that
    looks in between sees the issue out of in_progress by the run's own doing, no person's."""
    key = auto_project.new_issue("write one.txt 1")
    auto_project.configure(watch=fast())
    moved, looked_since = threading.Event(), threading.Event()
    leave, moved_on = issue_status.leave_issue, Running.moved_on
    waited: list[bool] = []

    def leave_then_let_a_look_in(*args: Any, **kwargs: Any) -> bool:
        left = leave(*args, **kwargs)
        moved.set()
        waited.append(looked_since.wait(60))  # the run says it finished only after a reconciliation looked
        return left

    def looking(self: Running, *args: Any) -> str | None:
        since = moved.is_set()
        reason = moved_on(self, *args)
        if since:
            looked_since.set()
        return reason

    monkeypatch.setattr(issue_status, "leave_issue", leave_then_let_a_look_in)
    monkeypatch.setattr(Running, "moved_on", looking)

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("finished")))
        return watch

    watch = anyio.run(scenario)

    assert not watch.of("cancelled"), watch.of("cancelled")
    assert waited == [True]
    assert [e.type for e in watch.events if e.issue == key] == ["dispatched", "finished"]
    assert auto_project.only_record().outcome == "succeeded"
    assert auto_project.issue(key).status == Status.REVIEW


def test_a_run_that_starts_while_a_reconciliation_looks_at_its_issue_is_not_cancelled_by_that_look(
    auto_project: AutoProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconciliation reads the issue, then asks whether its run has started: a run that moved its issue to
    in_progress and said so in between is seen in that reading as its issue was before (ready), no move by hand."""
    key = auto_project.new_issue("write one.txt 1")
    auto_project.configure(watch=fast())
    looked = threading.Event()
    move, get, moved_on = issue_status.move_to_in_progress, LocalTracker.get, Running.moved_on
    reconciling = threading.local()
    waited: list[bool] = []

    def start_after_a_look(*args: Any, **kwargs: Any) -> None:
        waited.append(looked.wait(60))  # a reconciliation read the issue while it was still ready
        move(*args, **kwargs)

    def looking(self: Running, *args: Any) -> str | None:
        reconciling.lane = self
        try:
            return moved_on(self, *args)
        finally:
            reconciling.lane = None

    def reading(tracker: LocalTracker, wanted: str) -> Any:
        issue = get(tracker, wanted)
        lane = getattr(reconciling, "lane", None)
        if lane is not None and lane.run_id is None and not looked.is_set():
            looked.set()  # the run starts now, before this reading is judged
            eventually(lambda: lane.run_id is not None, "the run started", 60)
        return issue

    monkeypatch.setattr(issue_status, "move_to_in_progress", start_after_a_look)
    monkeypatch.setattr(Running, "moved_on", looking)
    monkeypatch.setattr(LocalTracker, "get", reading)

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("finished")))
        return watch

    watch = anyio.run(scenario)

    assert not watch.of("cancelled"), watch.of("cancelled")
    assert waited == [True]
    assert [e.type for e in watch.events if e.issue == key] == ["dispatched", "finished"]
    assert auto_project.only_record().outcome == "succeeded"


def test_an_issue_a_killed_run_left_in_progress_is_put_back_and_run(auto_project: AutoProject) -> None:
    key = auto_project.new_issue("write one.txt 1")
    auto_project.tracker.set_status(key, Status.IN_PROGRESS)  # and nobody holds its claim

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("finished")))
        return watch

    watch = anyio.run(scenario)

    assert [e.type for e in watch.events if e.issue == key][:2] == ["requeued", "dispatched"]
    assert auto_project.only_record().outcome == "succeeded"


def test_a_tick_waiting_for_an_issue_lock_holds_its_worker_thread_not_the_loop(auto_project: AutoProject) -> None:
    """Putting an orphan back waits for the issue's lock (another writer holds it; the local tracker waits up to
    30 s): the watch's loop — runs' output, signal handling, here this test — goes on meanwhile."""
    key = auto_project.new_issue("write one.txt 1")
    auto_project.tracker.set_status(key, Status.IN_PROGRESS)  # and nobody holds its claim
    lock = auto_project.tracker._lock(f"issue-{key}")  # type: ignore[attr-defined]
    loop_ran_while_the_lock_was_held: list[bool] = []

    async def scenario() -> Watch:
        lock.acquire()
        try:
            async with watching(auto_project) as watch:
                await watch.until(lambda: watch.dispatcher.tick_count >= 1)
                for _ in range(3):  # the tick is still waiting for the lock, and the loop turns
                    await anyio.sleep(0.05)
                loop_ran_while_the_lock_was_held.append(not watch.of("requeued"))
                lock.release()
                await watch.until(lambda: bool(watch.of("finished")))
        finally:
            if lock.is_locked:
                lock.release()
        return watch

    watch = anyio.run(scenario)

    assert loop_ran_while_the_lock_was_held == [True]
    assert [e.type for e in watch.events if e.issue == key][:2] == ["requeued", "dispatched"]
    assert auto_project.only_record().outcome == "succeeded"


# -- configuration ----------------------------------------------------------------------------------------------


def test_config_changes_are_picked_up_between_ticks_and_a_broken_config_keeps_the_last_good_one(
    auto_project: AutoProject,
) -> None:
    auto_project.configure(watch=fast(concurrency=1))
    tracker = auto_project.tracker
    dispatcher = Dispatcher(load_project(auto_project.config_path), opens=open_project)
    events: list[WatchEvent] = []
    dispatcher.listener = lambda event: events.append(event) if isinstance(event, WatchEvent) else None

    def tick() -> list[str]:
        """One tick (and the runs it started); the event types it emitted."""
        before = len(events)
        anyio.run(lambda: dispatcher.watch(once=True))
        return [e.type for e in events[before:]]

    assert tick() == []
    auto_project.configure(watch=fast(concurrency=3))
    assert tick() == ["config_reloaded"]
    assert dispatcher.project.config.watch.concurrency == 3

    auto_project.config_path.write_text('{"watch": {"concurrency": "many"}}\n')
    assert tick() == ["error"]
    message = events[-1].data.message
    assert message.startswith("config not reloaded, keeping the last good one: ")
    assert "config.json" in message and "watch.concurrency" in message
    assert tick() == []  # reported once, not every tick

    # The last good config is the one in force: three issues go out in one tick.
    keys = [tracker.create(title=f"task {n}", body="acp-test: say done").key for n in range(3)]
    assert tick()[:3] == ["dispatched"] * 3
    assert {tracker.get(k).status for k in keys} == {Status.REVIEW}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"watch": ' + '{"a": ' * 2000 + "1" + "}" * 2000 + "}", "nested more than 64 levels deep"),
        ('{"watch": {"interval": ' + "1" * 5000 + "}}", "a number of 5000 digits"),
        ('{"①": 1, "' + "9" * 5000 + '": 2}', "①: unknown key"),
    ],
)
def test_a_config_edited_into_a_hostile_file_keeps_the_watch_on_its_last_good_one(
    auto_project: AutoProject, text: str, expected: str
) -> None:
    auto_project.configure(watch=fast(concurrency=2))
    dispatcher = Dispatcher(load_project(auto_project.config_path), opens=open_project)
    events: list[WatchEvent] = []
    dispatcher.listener = lambda event: events.append(event) if isinstance(event, WatchEvent) else None

    auto_project.config_path.write_text(text)
    anyio.run(lambda: dispatcher.watch(once=True))

    [error] = [e for e in events if e.type == "error"]
    assert error.data.message.startswith("config not reloaded, keeping the last good one: ")
    assert expected in error.data.message
    assert dispatcher.project.config.watch.concurrency == 2


def test_a_watch_error_about_mcp_json_never_echoes_a_value(auto_project: AutoProject) -> None:
    auto_project.configure(watch=fast())
    auto_project.new_issue("say hi")
    mcp = {"mcpServers": {"api": {"type": "http", "url": "https://x", "headers": "Bearer sk-live-9f8e7d"}}}
    (auto_project.directory / ".mcp.json").write_text(json.dumps(mcp))
    dispatcher = Dispatcher(load_project(auto_project.config_path), opens=open_project)
    events: list[WatchEvent] = []
    dispatcher.listener = lambda event: events.append(event) if isinstance(event, WatchEvent) else None

    with pytest.raises(ConfigError):
        anyio.run(lambda: dispatcher.watch(once=True))

    [error] = [e for e in events if e.type == "error"]
    assert "mcpServers.api.headers: expected an object (got a string of 21 characters)" in error.data.message
    assert "sk-live" not in json.dumps([e.to_json() for e in events])
