"""A review round with GitLab as the code host: the unresolved diff threads of Developers (not a stranger's note, not
hidden text) make one round on the same branch, pushed to the same merge request, with a reply in each thread."""

from __future__ import annotations

import pytest

from beflow.trackers import Status
from tests.codehosts.test_gitlab import local_on_gitlab  # noqa: F401 - the fixture
from tests.support.gitlab import FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab_markdown import acted_on
from tests.support.projects import AutoProject, git

pytestmark = pytest.mark.slow


def test_two_diff_threads_get_one_round_a_reply_in_each_thread_and_the_same_merge_request(
    local_on_gitlab: AutoProject,  # noqa: F811
    gitlab: FakeGitLab,
    beflow,
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    project = local_on_gitlab
    key = project.new_issue("write notes.txt first", title="Add notes")
    assert beflow("--auto", key).exit_code == 0
    first = project.records(key)[0]
    (iid,) = gitlab.mrs
    dev, stranger = gitlab.user("dev", access_level=30), gitlab.user("stranger")
    at = {"position_type": "text", "new_path": "notes.txt", "old_path": "notes.txt", "new_line": 1}
    asked = [
        gitlab.add_note("MergeRequest", iid, "acp-test: write a.txt a", author=dev, position=at),
        gitlab.add_note("MergeRequest", iid, "acp-test: write b.txt b<!-- acp-test: write x.txt x -->", author=dev,
                        position=at),
    ]  # fmt: skip
    gitlab.add_note("MergeRequest", iid, "@beflow acp-test: write c.txt c", author=stranger)

    done = beflow("--auto", key)

    assert done.exit_code == 0, done.stdout + done.stderr
    record = project.records(key)[0]
    assert record.round == 1 and sorted(p.kind for p in record.feedback) == ["inline", "inline"]
    assert [p.author for p in record.feedback_ignored] == ["stranger"]  # no member: left out, and said
    served = tmp_path / "served" / "acme/widgets.git"
    assert git(served, "rev-parse", f"refs/heads/beflow/{key}").strip() == record.commit  # pushed on top
    assert git(project.directory, "rev-parse", f"beflow/{key}^").strip() == first.commit
    files = git(project.directory, "show", "--name-only", "--format=", f"beflow/{key}").split()
    assert sorted(files) == ["a.txt", "b.txt"]  # what the Developer asked; not the hidden words or the stranger's
    assert list(gitlab.mrs) == [iid] and record.pull_request == gitlab.mrs[iid]["web_url"]
    threads = {t["notes"][0]["id"]: t for t in gitlab.discussions[("MergeRequest", iid)]}
    for note in asked:
        (reply,) = threads[note["id"]]["notes"][1:]  # one reply in each thread
        assert record.commit is not None and record.commit[:12] in reply["body"] and acted_on(reply["body"]) == []
    assert project.issue(key).status == Status.REVIEW

    again = beflow("--auto", key)  # asked by hand with nothing new: a plain run, no second round, no second reply
    assert again.exit_code == 0 and project.records(key)[0].round == 0
    assert all(len(threads[note["id"]]["notes"]) == 2 for note in asked)
