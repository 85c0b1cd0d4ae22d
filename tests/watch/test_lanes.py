"""A watch's lanes (beflow.watch.lanes, the dispatcher's accounting of them), in-process: no run starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio

from beflow.app import open_project
from beflow.config import load_project
from beflow.watch.dispatcher import Dispatcher
from tests.support.projects import config_file


class Started:
    """A task group that only notes what it was asked to start."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def start_soon(self, *args: Any) -> None:
        self.calls.append(args)


def test_best_of_n_takes_a_lane_per_candidate_and_waits_ahead_of_later_issues_for_them(repo: Path) -> None:
    path = config_file(repo)
    path.write_text(json.dumps({"watch": {"concurrency": 3}, "attempts": {"max": 4}}))
    dispatcher = Dispatcher(load_project(path), opens=open_project)
    tracker = dispatcher.tracker
    two = tracker.create("two candidates", labels=["attempts:2"])
    four = tracker.create("four candidates, capped at the watch's lanes", labels=["attempts:4"])
    plain = tracker.create("plain")
    dispatcher.queue = dispatcher.blockers.sift(tracker, [two, four, plain], 3)  # (as a tick's look does)
    tasks = Started()

    async def dispatch() -> dict[str, int]:
        dispatcher._dispatch(tasks, [])  # type: ignore[arg-type]
        return {key: lane.lanes for key, lane in dispatcher.running.items()}

    assert anyio.run(dispatch) == {two.key: 2}
    assert [issue.key for issue in dispatcher.queue] == [four.key, plain.key]  # four waits for its lanes, first
    dispatcher.running.clear()
    assert anyio.run(dispatch) == {four.key: 3}
    assert len(tasks.calls) == 2
