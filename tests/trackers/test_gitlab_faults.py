"""A storm of 502s from GitLab while ``beflow watch`` runs issues — answers lost after the change was made, and
changes refused, more in a row than a request is tried — loses nothing and does nothing twice: every issue ends in
review with one merge request and one note saying it succeeded (a run the storm failed is tried again, its own note
posted once or said unreported in its record), the watch keeps running and runs the issue filed after the storm."""

from __future__ import annotations

import json

import pytest

from tests.support.gitlab import TOKEN, FakeGitLab
from tests.support.gitlab_projects import ENV, branch_on_gitlab, public_notes, tracker_settings
from tests.support.projects import AutoProject
from tests.support.waiting import eventually
from tests.support.watching import Watcher

pytestmark = pytest.mark.slow


def test_a_502_storm_during_a_watch_loses_nothing_and_does_nothing_twice(
    on_gitlab: AutoProject, gitlab: FakeGitLab, no_leftover_processes: None
) -> None:
    # A run the storm failed may leave its claim unreleased: a short lease lets its retry take it back soon.
    on_gitlab.configure(
        watch={"interval": 0.3, "concurrency": 2, "backoff": 0.5}, tracker=tracker_settings(gitlab, lease=8)
    )
    for n in (1, 2, 3):
        work = f"acp-test: sleep 1\nacp-test: write out-{n}.txt {n}"  # the storm falls while they work
        gitlab.add_issue(f"Task {n}", labels=["beflow", "beflow:ready"], description=work)
    watch = Watcher(on_gitlab.config_path, on_gitlab.directory, ENV)
    try:
        watch.wait_for(lambda e: e.get("event") == "dispatched", "a run to start")
        # The storm: writes that GitLab made but whose answers a proxy lost, writes refused, reads refused.
        gitlab.fail(502, times=4, only="POST", after=True)
        gitlab.fail(502, times=4, only="PUT", after=True)
        gitlab.fail(502, times=4, only="POST")
        gitlab.fail(502, times=8, only="GET")
        eventually(lambda: not gitlab.faults, "the storm to pass", 120, interval=0.1)
        eventually(
            lambda: all("beflow:review" in gitlab.issues[n]["labels"] for n in (1, 2, 3)), "every issue in review", 180
        )
        gitlab.add_issue("After the storm", labels=["beflow", "beflow:ready"], description="acp-test: write calm.txt")
        watch.wait_for(lambda e: e.get("event") == "finished" and e.get("issue") == "4", "the run after the storm", 120)
        assert watch.process.poll() is None  # still watching
    finally:
        watch.stop()

    for n in (1, 2, 3):
        records = on_gitlab.records(str(n))
        succeeded = [r for r in records if r.outcome == "succeeded"]
        assert len(succeeded) == 1, [(r.outcome, r.stop_reason) for r in records]
        assert branch_on_gitlab(gitlab, f"beflow/{n}") == succeeded[0].commit
        notes = [note["body"] for note in public_notes(gitlab, n)]
        runs = [(r.outcome, r.stop_reason, r.unreported) for r in records]
        assert sum("**succeeded**" in b for b in notes) == 1 and len(set(notes)) == len(notes), (notes, runs)
        # A run the storm failed is tried again; its note, when the storm took that too, is no secret: the record
        # says it could not be posted. Each run's note is there once, or said unreported.
        posted = [r for r in records if any(f"`{r.id}`" in b for b in notes)]
        assert len(posted) == len(notes) and all(r.unreported for r in records if r not in posted), runs
    branches = sorted(mr["source_branch"] for mr in gitlab.mrs.values())
    assert branches == ["beflow/1", "beflow/2", "beflow/3", "beflow/4"]  # one merge request each, none twice
    assert on_gitlab.records("4")[0].outcome == "succeeded"
    assert TOKEN not in json.dumps(watch.events)
