"""GitLab's blocking links hold an issue back (docs/trackers.md, "Blockers"): the tracker on the fake GitLab, checked
against the description of GitLab's API, in-process."""

from __future__ import annotations

import pytest

from beflow.trackers import Status
from beflow.trackers.base import KnowsBlockers
from beflow.trackers.blockers import held_by
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab import gitlab_tracker as tracker
from tests.support.projects import AutoProject


@pytest.fixture
def gl(auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "lease": 30})
    return auto_project


def test_an_issue_with_an_open_blocking_issue_is_held_until_it_is_closed(gl: AutoProject, gitlab: FakeGitLab) -> None:
    blocker = gitlab.add_issue("the schema", labels=["beflow", "beflow:ready"])["iid"]
    blocked = gitlab.add_issue("the migration", labels=["beflow", "beflow:ready"])["iid"]
    other = gitlab.add_issue("elsewhere")
    other["web_url"] = f"https://gitlab.example.com/acme/other/-/issues/{other['iid']}"
    gitlab.block(blocked, blocker, other["iid"])
    gitlab_ = tracker(gl)
    assert isinstance(gitlab_, KnowsBlockers)

    ready = {issue.key: issue for issue in gitlab_.ready()}
    before = len(gitlab.requests())
    found = gitlab_.blockers(ready[str(blocked)])
    assert [r.path for r in gitlab.requests()[before:]] == [f"/api/v4/projects/acme%2Fwidgets/issues/{blocked}/links"]
    assert [tuple(b) for b in found] == [
        (str(blocker), Status.READY, False),
        (f"acme/other#{other['iid']}", Status.OPEN, False),
    ]
    # The blocker's own links say it blocks: that holds nothing back.
    assert gitlab_.blockers(ready[str(blocker)]) == []

    gitlab.issues[blocker]["state"] = "closed"
    other["state"] = "closed"
    assert held_by(gitlab_.blockers(ready[str(blocked)])) is None
