"""A review round with GitHub as the code host: the round starts from the branch as another machine pushed it
(fetched as the push is: the URL read when the host was opened, beflow's credential helper), answers only what
that machine's rounds did not, and is pushed on top (a fast-forward) to the same pull request."""

from __future__ import annotations

import pytest

from beflow.trackers import Status
from beflow.trackers.local_feedback import gathered
from tests.codehosts.test_github import local_on_github  # noqa: F401 - the fixture
from tests.support.github import FakeGitHub
from tests.support.projects import AutoProject, git

pytestmark = pytest.mark.slow


def test_a_round_continues_the_branch_another_machine_pushed_and_answers_only_what_it_left(
    local_on_github: AutoProject,  # noqa: F811
    github: FakeGitHub,
    beflow,
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    project = local_on_github
    key = project.new_issue("write notes.txt first", title="Add notes")
    assert beflow("--auto", key).exit_code == 0
    origin = project.directory.parent / "origin.git"
    first = git(origin, "rev-parse", "refs/heads/beflow/1").strip()
    assert beflow("issues", "comment", key, "acp-test: write a.txt a", "--rework").exit_code == 0
    assert beflow("issues", "comment", key, "acp-test: write b.txt b", "--rework").exit_code == 0
    answered_there, left = (p.id for p in gathered(project.issue(key)).pieces)

    # Another machine answered the first piece and pushed its round.
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "--branch", "beflow/1", str(origin), str(other))
    (other / "a.txt").write_text("a")
    git(other, "add", "a.txt")
    git(other, "-c", "user.name=o", "-c", "user.email=o@o", "commit", "-qm", f"a\n\nBeflow-Feedback: {answered_there}")
    git(other, "push", "-q", "origin", "beflow/1")
    theirs = git(other, "rev-parse", "HEAD").strip()
    assert git(project.directory, "rev-parse", "beflow/1").strip() == first  # (this machine has not seen it)

    done = beflow("--auto", key)

    assert done.exit_code == 0, done.stdout + done.stderr
    record = project.records(key)[0]
    assert record.round == 1 and [p.id for p in record.feedback] == [left]
    assert git(project.directory, "rev-parse", "beflow/1^").strip() == theirs  # on top of the other machine's
    assert git(origin, "rev-parse", "refs/heads/beflow/1").strip() == record.commit  # pushed: a fast-forward
    assert len(github.pulls) == 1 and record.pull_request == next(iter(github.pulls.values()))["html_url"]
    prompt = (project.run_dir(record) / "prompt.md").read_text()
    assert "write b.txt b" in prompt and "write a.txt a" not in prompt.split("Review round 1")[1]
    replies = [c.text for c in project.issue(key).comments if c.text.startswith("beflow answered")]
    assert len(replies) == 1 and record.commit is not None and record.commit[:12] in replies[0]
    assert project.issue(key).status == Status.REVIEW
