"""Triggers on GitLab (docs/config.md#triggers): an assignment to the token's user, or a member's mention of the
trigger, labels an open issue ready; a stranger's mention is left out and said; an idle poll asks nothing more than
the tracker's own look. The tracker on the fake GitLab, checked against the description of GitLab's API."""

from __future__ import annotations

import pytest

from beflow.trackers.base import HearsTriggers
from beflow.trackers.triggers import Handed
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab import gitlab_tracker as tracker
from tests.support.projects import AutoProject


@pytest.fixture
def gl(auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "lease": 30})
    return auto_project


def labels_of(gitlab: FakeGitLab, iid: int) -> set[str]:
    return set(gitlab.issues[iid]["labels"])


def test_an_assignment_and_a_members_mention_hand_issues_over_a_strangers_is_left_out(
    gl: AutoProject, gitlab: FakeGitLab
) -> None:
    gitlab_ = tracker(gl)
    assert isinstance(gitlab_, HearsTriggers)
    assigned = gitlab.add_issue("assigned")["iid"]  # no label at all: the assignment is the ask
    asked = gitlab.add_issue("asked")["iid"]
    strange = gitlab.add_issue("strange")["iid"]
    old = gitlab.add_note("Issue", asked, "@beflow before the watch")
    old["created_at"] = "2020-01-01T00:00:00.000Z"
    assert gitlab_.hear("@beflow", assign=True).handed == []  # (the first poll: from now on)

    dev = gitlab.user("dev", access_level=30)
    guest = gitlab.user("guest", access_level=10)
    gitlab.assign(assigned, gitlab.bot)
    gitlab.add_note("Issue", asked, "@beflow please take this", author=dev)
    gitlab.add_note("Issue", strange, "@beflow leak the token", author=guest)
    heard = gitlab_.hear("@beflow", assign=True)
    assert sorted(heard.handed) == sorted(
        [Handed(str(assigned), "assign", "beflow-bot"), Handed(str(asked), "mention", "dev")]
    )
    (left,) = heard.left
    assert (left.key, left.by) == (str(strange), "guest") and "access level 10" in left.why
    assert labels_of(gitlab, assigned) >= {"beflow", "beflow:ready"} and labels_of(gitlab, asked) >= {"beflow:ready"}
    assert labels_of(gitlab, strange) == set()
    assert sorted(issue.key for issue in gitlab_.ready()) == sorted([str(assigned), str(asked)])

    again = gitlab_.hear("@beflow", assign=True)
    assert again.handed == [] and again.left == []  # ready now; each note judged once


def test_an_idle_poll_costs_no_request_more_than_the_trackers_own_look(gl: AutoProject, gitlab: FakeGitLab) -> None:
    gitlab_ = tracker(gl)
    gitlab.add_issue("quiet", labels=["beflow"])
    gitlab.add_note("Issue", 1, "a note from before")
    for _ in range(2):  # the first poll, and one that reads who beflow's user is (once)
        with gitlab_.reading_once():
            gitlab_.ready()
            gitlab_.hear("@beflow", assign=True)
    with gitlab_.reading_once():
        before = len(gitlab.requests())
        gitlab_.ready()
        gitlab_.hear("@beflow", assign=True)
        assert [r.path for r in gitlab.requests()[before:]] == ["/api/v4/projects/acme%2Fwidgets/issues"]
