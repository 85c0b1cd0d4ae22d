"""A ready GitLab issue, run by ``beflow watch --once`` as a real process through the pinned acpx: its branch pushed to
the project's repository on GitLab (over HTTP, the token through beflow's credential helper), one merge request
opened — then updated, not duplicated, by the next run — the status labels moved, and one note on the issue, edited
in place, that says how the run ended; merging the merge request makes the issue done. The token is in no output,
file, git config or record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.faults.conftest import beflow_run
from tests.support.gitlab import TOKEN, FakeGitLab
from tests.support.gitlab_markdown import acted_on
from tests.support.gitlab_projects import ENV, branch_on_gitlab, public_notes, served
from tests.support.projects import AutoProject, git

pytestmark = pytest.mark.slow


def test_a_ready_issue_is_run_by_watch_once_and_proposed_as_one_merge_request(
    on_gitlab: AutoProject, gitlab: FakeGitLab, no_leftover_processes: None
) -> None:
    gitlab.add_issue("Add notes", labels=["beflow", "beflow:ready"], description="acp-test: write notes.txt first")

    first = beflow_run(on_gitlab, "watch", "--once", env=ENV)

    assert first.code == 0, first.stdout + first.stderr
    record = on_gitlab.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    (mr,) = gitlab.mrs.values()
    assert (mr["source_branch"], mr["target_branch"], mr["draft"]) == ("beflow/1", "main", True)
    assert mr["title"].removeprefix("Draft: ") == "Add notes"
    assert "**succeeded**" in mr["description"] and "notes.txt" in mr["description"]
    assert "Closes #1" not in mr["description"]  # after_run.closes_issue is off: the issue is linked, not closed
    assert branch_on_gitlab(gitlab, "beflow/1") == record.commit  # pushed
    assert record.pull_request == mr["web_url"]
    labels = gitlab.issues[1]["labels"]
    assert "beflow:review" in labels and not {"beflow:ready", "beflow:in-progress"} & set(labels)
    (note,) = public_notes(gitlab, 1)  # one note a run, edited in place: started, then how it ended
    assert "**succeeded**" in note["body"] and mr["web_url"] in note["body"]
    assert gitlab.requests("PUT", "/api/v4/projects/acme%2Fwidgets/issues/1/notes/")

    # Asked again: the same branch moves on, the same merge request is updated.
    gitlab.issues[1]["description"] = "acp-test: write second.txt more"
    gitlab.issues[1]["labels"] = ["beflow", "beflow:ready"]
    again = beflow_run(on_gitlab, "watch", "--once", env=ENV)

    assert again.code == 0, again.stdout + again.stderr
    latest = on_gitlab.records("1")[0]
    assert len(gitlab.mrs) == 1 and "second.txt" in gitlab.mrs[mr["iid"]]["description"]
    assert branch_on_gitlab(gitlab, "beflow/1") == latest.commit != record.commit
    assert git(on_gitlab.directory, "rev-parse", "beflow/1^").strip() == record.commit  # on top: no force push
    assert len(public_notes(gitlab, 1)) == 2  # one more run, one more note

    seen = first.stdout + first.stderr + again.stdout + again.stderr
    assert TOKEN not in seen
    roots = [on_gitlab.directory, served(gitlab), Path(os.environ["BEFLOW_HOME"])]
    assert [p for root in roots for p in root.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()] == []
    assert TOKEN not in git(on_gitlab.directory, "config", "--list")
    assert all(TOKEN not in str(s.query) for s in gitlab.seen)


def test_closes_issue_puts_the_closing_line_in_the_merge_request(
    on_gitlab: AutoProject, gitlab: FakeGitLab, no_leftover_processes: None
) -> None:
    on_gitlab.configure(after_run={"pull_request": True, "closes_issue": True, "draft": False})
    gitlab.add_issue("Add notes", labels=["beflow", "beflow:ready"], description="acp-test: write notes.txt first")

    done = beflow_run(on_gitlab, "watch", "--once", env=ENV)

    assert done.code == 0, done.stdout + done.stderr
    (mr,) = gitlab.mrs.values()
    assert not mr["draft"] and mr["title"] == "Add notes"
    acting = [line for line in mr["description"].splitlines() if acted_on(line)]
    assert acting == [f"Closes #1 ({gitlab.issues[1]['web_url']})"]  # beflow's own line, and only it


def test_confidential_issues_are_left_alone_unless_configured(
    on_gitlab: AutoProject, gitlab: FakeGitLab, no_leftover_processes: None
) -> None:
    secret = gitlab.add_issue("Security fix", labels=["beflow", "beflow:ready"], description="acp-test: write s.txt s")
    secret["confidential"] = True

    skipped = beflow_run(on_gitlab, "watch", "--once", env=ENV)

    assert skipped.code == 0, skipped.stdout + skipped.stderr
    assert on_gitlab.records() == [] and gitlab.mrs == {} and public_notes(gitlab, 1) == []
    assert "beflow:ready" in gitlab.issues[1]["labels"]

    on_gitlab.configure(tracker={**on_gitlab.config["tracker"], "confidential": True})
    taken = beflow_run(on_gitlab, "watch", "--once", env=ENV)

    assert taken.code == 0, taken.stdout + taken.stderr
    assert on_gitlab.only_record().outcome == "succeeded" and len(gitlab.mrs) == 1


def test_a_merged_merge_request_makes_its_issue_done(
    on_gitlab: AutoProject, gitlab: FakeGitLab, no_leftover_processes: None
) -> None:
    gitlab.add_issue("Add notes", labels=["beflow", "beflow:ready"], description="acp-test: write notes.txt first")
    assert beflow_run(on_gitlab, "watch", "--once", env=ENV).code == 0
    (iid,) = gitlab.mrs
    gitlab.merge(iid)  # a person merges it

    done = beflow_run(on_gitlab, "watch", "--once", env=ENV)

    assert done.code == 0, done.stdout + done.stderr
    assert on_gitlab.issue("1").status == Status.DONE
    issue = gitlab.issues[1]
    assert issue["state"] == "closed" and not {"beflow:review", "beflow:closed"} & set(issue["labels"])
    assert len(on_gitlab.records("1")) == 1  # no round, no run
