"""A fleet end to end: workflows started by dispatchers, runs on ``beflow worker`` processes."""

from __future__ import annotations

import signal

from beflow.trackers import Status
from tests.fleet.conftest import Fleet
from tests.support.waiting import eventually


def test_an_issue_runs_once_on_a_worker_and_its_workflow_ends(fleet: Fleet) -> None:
    key = fleet.project.new_issue("say hello from the fleet", "write notes.txt hi", title="Take notes")
    worker = fleet.worker("w1")
    dispatcher = fleet.beflow("watch", "--once", "--json")
    assert dispatcher.wait(60) == 0, dispatcher.communicate()
    eventually(lambda: fleet.status(key) == "COMPLETED", "the issue's workflow completing", alive=worker)
    assert fleet.project.issue(key).status == Status.REVIEW
    (record,) = fleet.project.records(key)
    assert record.outcome == "succeeded"
    assert fleet.project.branch_files(f"beflow/{key}")["notes.txt"] == "hi"
    end = fleet.result(key)
    assert end["action"] == "done" and end["run_id"] == record.id
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)
