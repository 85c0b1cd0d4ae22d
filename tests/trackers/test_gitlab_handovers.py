"""``triggers.label: false`` on GitLab (docs/config.md#triggers): beflow's hand-overs leave a note of its token ending
in the hand-over mark, the newest of which must be newer than the issue's last run (its progress note); a member's
copy of the mark hands nothing over, and a trigger (even of an issue labelled ready by hand) marks before it
labels. The tracker on the fake GitLab."""

from __future__ import annotations

import pytest

from beflow.trackers import Status
from beflow.trackers.base import MarksHandOvers
from beflow.trackers.handovers import HANDED_MARKER
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab import gitlab_tracker as tracker
from tests.support.projects import AutoProject


@pytest.fixture
def gl(auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(
        tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "lease": 30},
        triggers={"label": False, "assign": True},
    )
    return auto_project


def test_a_mark_of_beflows_token_hands_over_until_a_run_takes_it_and_a_trigger_marks_first(
    gl: AutoProject, gitlab: FakeGitLab
) -> None:
    gitlab_ = tracker(gl)
    assert isinstance(gitlab_, MarksHandOvers) and gitlab_.marks_hand_overs
    iid = gitlab.add_issue("labelled by hand", labels=["beflow", "beflow:ready"])["iid"]
    key = str(iid)
    maintainer = gitlab.user("maintainer", access_level=40)
    gitlab.add_note("Issue", iid, f"/label ~beflow:ready\n{HANDED_MARKER}", author=maintainer)
    assert "did not hand it over" in (gitlab_.unhanded(gitlab_.get(key)) or "")

    gitlab_.mark_handed(key, "alice moved it to ready")
    assert gitlab_.unhanded(gitlab_.get(key)) is None
    gitlab_.set_status(key, Status.IN_PROGRESS)  # its run's progress note takes the mark
    assert "earlier run" in (gitlab_.unhanded(gitlab_.get(key)) or "")
    gitlab.issues[iid]["labels"] = ["beflow", "beflow:ready"]  # a person puts the label back by hand
    assert "earlier run" in (gitlab_.unhanded(gitlab_.get(key)) or "")

    assigned = gitlab.add_issue("labelled by hand, then assigned", labels=["beflow", "beflow:ready"])["iid"]
    gitlab_.hear(None, assign=True)  # (the first poll: from now on)
    gitlab.assign(assigned, gitlab.bot)
    before = len(gitlab.requests())
    assert [one.key for one in gitlab_.hear(None, assign=True).handed] == [str(assigned)]
    writes = [r.method for r in gitlab.requests()[before:] if r.method != "GET"]
    assert writes[:2] == ["POST", "PUT"]  # the mark's note, then the labels
    assert gitlab_.unhanded(gitlab_.get(str(assigned))) is None
    assert gitlab_.hear(None, assign=True).handed == []  # handed over already: once
