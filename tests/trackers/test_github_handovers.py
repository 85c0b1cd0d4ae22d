"""``triggers.label: false`` on GitHub (docs/config.md#triggers): beflow's own hand-overs (a trigger, a retry, a
person's move to ready through beflow) leave a comment of its token ending in the hand-over mark, and only an issue
bearing one newer than its last run is handed over. A ready label, a person's copy of the mark or an agent's words
hand nothing over. The tracker and the operations on the fake GitHub, in-process."""

from __future__ import annotations

import anyio
import pytest

import beflow.ops.issues  # noqa: F401 - registers the operations
from beflow.app import open_tracker
from beflow.config import load_project
from beflow.ops.operations import REGISTRY, Context
from beflow.run.issue_status import leave_finished
from beflow.trackers import Status
from beflow.trackers.base import MarksHandOvers
from beflow.trackers.handovers import HANDED_MARKER
from beflow.trackers.quoting import JOINER
from tests.support.github import FakeGitHub
from tests.support.github import github_tracker as tracker
from tests.support.projects import AutoProject

READY = ["beflow", "beflow:ready"]


@pytest.fixture
def marked(gh: AutoProject) -> AutoProject:
    gh.configure(triggers={"label": False, "assign": True})
    return gh


def test_only_a_mark_of_beflows_token_newer_than_the_last_run_hands_an_issue_over(
    marked: AutoProject, github: FakeGitHub
) -> None:
    github_ = tracker(marked)
    assert isinstance(github_, MarksHandOvers) and github_.marks_hand_overs
    number = github.add_issue("labelled by hand", labels=READY)
    key = str(number)
    assert "did not hand it over" in (github_.unhanded(github_.get(key)) or "")

    # A person's copy of the mark, and an agent's words posted with beflow's token, are no hand-over.
    github.add_comment(number, f"please run\n{HANDED_MARKER}", author="alice", association="OWNER")
    github_.comment(key, f"agent words\n{HANDED_MARKER}", "agent (run r1)")
    assert "did not hand it over" in (github_.unhanded(github_.get(key)) or "")

    github_.mark_handed(key, "@alice moved it to ready")
    assert github_.unhanded(github_.get(key)) is None
    mark = github.comments_of(number)[-1]
    assert mark["user"]["login"] == "octocat" and mark["body"].rstrip().endswith(HANDED_MARKER)
    assert f"@{JOINER}alice" in mark["body"]  # (a name in it notifies nobody)

    github_.set_status(key, Status.IN_PROGRESS)  # a run starts: its progress comment takes the mark
    assert "earlier run" in (github_.unhanded(github_.get(key)) or "")

    before = len(github.requests())
    assert leave_finished(github_, key, Status.READY, "failed, to be tried again", run_id="r1") is None
    assert github_.unhanded(github_.get(key)) is None  # a retry is handed over by beflow
    writes = [(r.method, r.path) for r in github.requests()[before:] if r.method != "GET"]
    assert writes[0] == ("POST", f"/repos/octo/hello/issues/{number}/comments")  # the mark before the label


def test_a_persons_move_to_ready_through_beflow_marks_and_a_trigger_marks_before_it_labels(
    marked: AutoProject, github: FakeGitHub
) -> None:
    context = Context(project=load_project(marked.config_path), opens_tracker=open_tracker, actor="alice")
    github_ = tracker(marked)
    by_hand = github.add_issue("labelled by hand", labels=READY)
    REGISTRY["issue.set_status"].call(context, {"key": str(by_hand), "status": "ready"})
    assert github_.unhanded(github_.get(str(by_hand))) is None  # a person said so, through beflow
    filed = REGISTRY["issue.new"].call(context, {"title": "filed ready through beflow"})
    assert github_.unhanded(github_.get(filed.key)) is None  # type: ignore[attr-defined]

    assigned = github.add_issue("assigned")
    github_.hear(None, assign=True)  # (the first look: from now on)
    github.assign(assigned, "octocat")
    before = len(github.requests())
    assert [one.key for one in github_.hear(None, assign=True).handed] == [str(assigned)]
    writes = [r.path for r in github.requests()[before:] if r.method == "POST"]
    assert writes[0].endswith(f"/issues/{assigned}/comments") and writes[-1].endswith(f"/issues/{assigned}/labels")
    assert github_.unhanded(github_.get(str(assigned))) is None


def test_with_the_label_a_trigger_no_mark_is_written(gh: AutoProject, github: FakeGitHub) -> None:
    github_ = tracker(gh)
    number = github.add_issue("ready", labels=READY)
    github_.mark_handed(str(number), "a retry")
    assert not github_.marks_hand_overs and github.comments_of(number) == []


def test_auto_without_keys_starts_no_issue_labelled_ready_by_hand(marked: AutoProject, github: FakeGitHub) -> None:
    from beflow.run import batch

    github.add_issue("labelled by hand", labels=READY)
    github_ = tracker(marked)
    project = load_project(marked.config_path)
    assert anyio.run(lambda: batch.run_many(project, github_, [], opens_code_host=lambda *_: None)) == []
    assert github.requests("POST") == [] and github.requests("PATCH") == []  # nothing written, no run


def test_a_trigger_hands_over_an_issue_labelled_ready_by_hand_once(marked: AutoProject, github: FakeGitHub) -> None:
    github_ = tracker(marked)
    number = github.add_issue("labelled by hand", labels=READY)
    github_.hear(None, assign=True)  # (the first look: from now on)
    github.assign(number, "octocat")
    assert [one.key for one in github_.hear(None, assign=True).handed] == [str(number)]
    assert github_.unhanded(github_.get(str(number))) is None
    assert github_.hear(None, assign=True).handed == []  # its mark changed it: seen again, handed over already
    assert len(github.comments_of(number)) == 1
