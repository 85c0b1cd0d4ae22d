"""The watch is event-driven: a run ending, an issue filed or edited (by any process), a claim released — each
starts the next tick at once; ``watch.interval`` is only the fallback poll. The interval here is an hour, so a run
that starts at all was started by an event (nothing is asserted on time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio

from beflow.trackers import Status
from beflow.watch.wake import Wakeup
from tests.support.projects import AutoProject
from tests.watch.test_dispatcher import fast, watching

HOUR = {"interval": 3600, "concurrency": 1}


def file_from_another_process(project: AutoProject, title: str, body: str) -> None:
    """``beflow issues new`` as a person types it in another terminal."""
    argv = [sys.executable, "-m", "beflow", "--config", str(project.config_path)]
    subprocess.run([*argv, "issues", "new", title, "--body", body], cwd=project.directory, check=True)


def test_an_issue_filed_in_another_process_is_dispatched_without_waiting_for_the_poll(
    auto_project: AutoProject,
) -> None:
    auto_project.configure(watch=fast(**HOUR))

    async def scenario() -> None:
        async with watching(auto_project) as watch:
            await watch.ticks(1)
            await watch.directories_watched()  # the tracker has no directory yet: the watcher waits for it
            file_from_another_process(auto_project, "first", "acp-test: say one")
            await watch.until(lambda: bool(watch.of("finished")), timeout=120)
            # An edit by hand (open -> ready) wakes it too.
            key = auto_project.new_issue("say two", status=Status.OPEN)
            await watch.directories_watched()
            path = Path(str(auto_project.issue(key).path))
            path.write_text(path.read_text().replace("status: open", "status: ready"))
            await watch.until(lambda: len(watch.of("finished")) == 2, timeout=120)

    anyio.run(scenario)
    assert [r.outcome for r in auto_project.records()] == ["no_changes", "no_changes"]


def test_a_freed_slot_is_filled_when_the_run_ends_not_at_the_next_poll(auto_project: AutoProject) -> None:
    auto_project.configure(watch=fast(**HOUR))
    keys = [auto_project.new_issue(f"say {n}", title=f"task {n}") for n in range(3)]

    async def scenario() -> None:
        async with watching(auto_project) as watch:
            await watch.until(lambda: len(watch.of("finished")) == 3, timeout=180)

    anyio.run(scenario)
    assert {auto_project.issue(k).status for k in keys} == {Status.REVIEW}


def test_a_released_claim_wakes_the_watch(auto_project: AutoProject) -> None:
    auto_project.configure(watch=fast(**HOUR))
    key = auto_project.new_issue("say claimed")
    claim = auto_project.tracker.claim(key, owner="someone else")

    async def scenario() -> None:
        async with watching(auto_project) as watch:
            await watch.ticks(1)
            await watch.directories_watched()
            assert not watch.of("dispatched")  # held by someone else
            claim.release()
            await watch.until(lambda: bool(watch.of("finished")), timeout=120)

    anyio.run(scenario)
    assert auto_project.issue(key).status == Status.REVIEW


def test_a_wakeup_returns_its_reasons_once() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        wakeup = Wakeup()
        wakeup.set("a run ended")
        wakeup.set("files changed")
        first = await wakeup.wait(10)
        second = await wakeup.wait(0.01)
        return first, second

    assert anyio.run(scenario) == (["a run ended", "files changed"], [])


def test_a_refresh_or_a_webhook_has_every_sources_feedback_read_afresh_and_other_wake_ups_do_not() -> None:
    from beflow.watch.wake import HOOKED, REFRESH, looks_again

    assert looks_again([REFRESH])
    assert looks_again(["files changed", f"{HOOKED} (gitlab)"])
    assert not looks_again(["files changed", "run of 7 ended", "woken"])
    assert not looks_again([])  # (the poll)
