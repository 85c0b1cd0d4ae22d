"""Reconciliation on GitHub, as locally: an issue closed, or its label removed, on GitHub while a watch runs it
cancels the run; the run is recorded cancelled and leaves the issue as the person left it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.github import FakeGitHub, Watcher, wait_until
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow


def test_closing_or_unlabelling_an_issue_on_github_cancels_its_run(
    auto_project: AutoProject, github: FakeGitHub, tmp_path: Path
) -> None:
    auto_project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 30},
        watch={"interval": 0.3, "concurrency": 2},
    )
    for n, title in enumerate(("Closed meanwhile", "Unlabelled meanwhile"), start=1):
        body = f"acp-test: mark {tmp_path}/mark-{n}\nacp-test: say working\nacp-test: sleep 60"
        github.add_issue(title, labels=["beflow", "beflow:ready"], body=body)
    watch = Watcher(auto_project.config_path, auto_project.directory)
    try:
        for number in (1, 2):  # each agent is at work
            wait_until(lambda n=number: (tmp_path / f"mark-{n}").exists(), f"the agent of issue {number} to start")
        github.issues[1]["state"], github.issues[1]["state_reason"] = "closed", "not_planned"  # a person closes it
        github.issues[2]["labels"] = [label for label in github.issues[2]["labels"] if label["name"] != "beflow"]

        closed = watch.wait_for(lambda e: e.get("event") == "cancelled" and e.get("issue") == "1", "1 cancelled")
        unlabelled = watch.wait_for(lambda e: e.get("event") == "cancelled" and e.get("issue") == "2", "2 cancelled")
        for key in ("1", "2"):
            watch.wait_for(lambda e, k=key: e.get("event") == "finished" and e.get("issue") == k, f"{key} finishes")
    finally:
        watch.stop()

    assert closed["reason"] == "the issue is now closed"
    assert "does not carry the label(s) beflow" in unlabelled["reason"]
    outcomes = {r.issue: (r.outcome, r.stop_reason) for r in auto_project.records()}
    assert outcomes == {"1": ("cancelled", "the issue is now closed"), "2": ("cancelled", unlabelled["reason"])}
    assert github.issues[1]["state"] == "closed"  # the person's word stands
    assert "beflow:ready" not in [label["name"] for label in github.issues[2]["labels"]]
