"""Two ``beflow watch`` processes on one GitLab project — separate homes, separate clones of the project's repository
on GitLab — race for the same ready issues: the claims (a chain of internal notes on each issue) let each issue run
exactly once, by one of them, into one merge request and one outcome note."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from beflow.records.store import RunStore
from tests.support import watching
from tests.support.gitlab import FakeGitLab
from tests.support.gitlab_projects import ENV, branch_on_gitlab, gitlab_origin, public_notes, tracker_settings
from tests.support.projects import AutoProject, git
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

ISSUES = 6


def test_two_watchers_racing_over_the_same_issues_run_each_once(
    auto_project: AutoProject,
    gitlab: FakeGitLab,
    acpx_bin: Path,
    test_agent_command: str,
    tmp_path: Path,
    no_leftover_processes: None,
) -> None:
    bare = gitlab_origin(auto_project, gitlab)
    marks = tmp_path / "marks"
    marks.mkdir()
    for n in range(1, ISSUES + 1):
        gitlab.add_issue(f"Task {n}", labels=["beflow", "beflow:ready"],
                         description=f"acp-test: mark {marks}/{n}\nacp-test: write out-{n}.txt done {n}")  # fmt: skip
    tracker = tracker_settings(gitlab, lease=5)
    machines = []
    for name in ("a", "b"):
        path = watching.machine_clone(tmp_path, bare, name, acpx_bin, test_agent_command, tracker,
                                      watch={"interval": 0.2, "concurrency": 2, "backoff": 0.5},
                                      after_run={"pull_request": True})  # fmt: skip
        git(path, "remote", "set-url", "origin", gitlab.git_url)  # as a clone of the project on GitLab
        machines.append(path)
    # Both start at once: each sees every issue ready on its first poll.
    watchers = [watching.start_watch(p, tmp_path / f"home-{p.name}", tmp_path / f"{p.name}.log", ENV) for p in machines]
    try:

        def ended(n: int) -> bool:  # in review, and its note says how the run ended (edited after the labels)
            notes = public_notes(gitlab, n)
            return "beflow:review" in gitlab.issues[n]["labels"] and any("**succeeded**" in x["body"] for x in notes)

        eventually(lambda: all(ended(n) for n in range(1, ISSUES + 1)), "every issue's run to end", 180, interval=0.2)
    finally:
        for process in watchers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for path in machines:
            print(path.name, (tmp_path / f"{path.name}.log").read_text(errors="replace")[-3000:])

    for n in range(1, ISSUES + 1):  # the agent ran once on each issue, to the end
        assert (marks / str(n)).read_text().split()[::3] == ["start", "end"], n
    records = [r for path in machines for r in RunStore(path).records()]
    assert sorted(r.issue for r in records) == sorted(str(n) for n in range(1, ISSUES + 1))
    assert all(r.outcome == "succeeded" for r in records), [(r.issue, r.stop_reason) for r in records]
    assert {r.issue for r in RunStore(machines[0]).records()} and {r.issue for r in RunStore(machines[1]).records()}
    branches = sorted(mr["source_branch"] for mr in gitlab.mrs.values())
    assert branches == sorted(f"beflow/{n}" for n in range(1, ISSUES + 1))  # one merge request each
    for record in records:
        assert branch_on_gitlab(gitlab, f"beflow/{record.issue}") == record.commit
        (note,) = public_notes(gitlab, int(record.issue))
        assert "**succeeded**" in note["body"]
