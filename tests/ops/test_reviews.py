"""A review of an issue's branch from beflow's page (``review.show``, ``review.comment``): the change read from git
objects, a comment on a line or on the whole change kept as a piece of feedback, and every refusal changing
nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import BeflowError
from beflow.feedback import Feedback
from beflow.mcpserver.schema import load_all
from beflow.ops.operations import REGISTRY, Context
from beflow.records.reviews import PageReviews, ReviewsDamaged
from beflow.trackers import Status
from tests.conftest import git
from tests.support.projects import AutoProject
from tests.support.projects import git as project_git

load_all()


def in_review(repo: Path) -> Context:
    """Issue 1 in review, its branch changing app.py's second line; a context acting as alice."""
    context = Context(project=load_project(), opens_tracker=open_tracker, actor="alice")
    tracker = context.open_tracker()
    tracker.create("Tidy the app", "")
    tracker.create("Not reviewed", "")
    tracker.set_status("1", Status.IN_PROGRESS)
    tracker.set_status("1", Status.REVIEW)
    (repo / "app.py").write_text("import os\nprint('x')\n")
    git(repo, "add", "app.py")
    git(repo, "commit", "-qm", "app")
    git(repo, "checkout", "-qb", "beflow/1")
    (repo / "app.py").write_text("import os\nprint('<b>y</b>')\nvalue = 1\n")
    git(repo, "commit", "-qam", "work")
    git(repo, "checkout", "-q", "main")
    return context


def call(context: Context, name: str, **arguments: object) -> object:
    return REGISTRY[name].call(context, arguments)


def test_a_comment_on_a_line_is_feedback_with_its_hunk_and_its_answer_is_kept_beside_it(repo: Path) -> None:
    context = in_review(repo)
    shown = call(context, "review.show", key="1")
    (change,) = shown.diff.files  # type: ignore[attr-defined]
    assert (change.path, change.status, change.added, change.removed) == ("app.py", "modified", 2, 1)

    said = call(context, "review.comment", key="1", path="app.py", line=2, body="no markup here")
    whole = call(context, "review.comment", key="1", body="and a test, please")
    assert said.comment.id == "page:1" and whole.comment.id == "page:2"  # type: ignore[attr-defined]
    line, change_wide = PageReviews(repo).gather("1", "beflow/1").pieces
    assert (line.kind, line.path, line.line, line.author, line.reply_to) == ("inline", "app.py", 2, "alice", "1")
    assert line.hunk is not None and line.hunk.splitlines()[-1] == "+print('<b>y</b>')"
    assert (change_wide.kind, change_wide.path, change_wide.line) == ("review", None, None)

    # A round's answer: kept beside its comment; a piece another source gave is not the page's to answer.
    PageReviews(repo).reply(line, "beflow answered this in review round 1")
    PageReviews(repo).reply(Feedback.model_validate({**line.model_dump(), "id": "review-comment:9"}), "elsewhere")
    first, second = call(context, "review.show", key="1").comments  # type: ignore[attr-defined]
    assert first.answer == "beflow answered this in review round 1" and first.answered is not None
    assert second.answer is None


@pytest.mark.parametrize(
    ("arguments", "code", "said"),
    [
        ({"key": "2", "body": "x"}, "conflict", "issue 2 is ready: a review round answers an issue in review only"),
        ({"key": "1", "body": "x", "path": "README.md"}, "not_found", "beflow/1 does not change 'README.md'"),
        ({"key": "1", "body": "x", "path": "app.py", "line": 40}, "usage", "line 40 of app.py is not in the diff"),
        ({"key": "1", "body": "x", "line": 2}, "usage", "a line needs its path"),
        ({"key": "1", "body": ""}, "usage", "review.comment: body: "),
        ({"key": "9", "body": "x"}, "not_found", "9"),
    ],
)
def test_a_comment_the_branch_cannot_take_is_refused_saying_why_and_nothing_is_kept(
    repo: Path, arguments: dict[str, object], code: str, said: str
) -> None:
    context = in_review(repo)
    with pytest.raises(BeflowError) as refused:
        REGISTRY["review.comment"].call(context, arguments)
    assert refused.value.code == code and said in refused.value.message
    assert PageReviews(repo).read("1").comments == [] and not (repo / ".beflow" / "reviews" / "1.json").exists()


def test_a_reviews_file_that_is_a_symlink_is_refused_never_followed(repo: Path, tmp_path: Path) -> None:
    context = in_review(repo)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"issue": "1", "comments": []}')
    (repo / ".beflow" / "reviews").mkdir(parents=True)
    os.symlink(elsewhere, repo / ".beflow" / "reviews" / "1.json")
    with pytest.raises(ReviewsDamaged):
        call(context, "review.comment", key="1", body="x")
    assert elsewhere.read_text() == '{"issue": "1", "comments": []}'


def test_a_round_answers_a_page_comment_on_the_same_branch_and_the_answer_is_kept(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:  # type: ignore[no-untyped-def]
    key = auto_project.new_issue("write hello.txt hi")
    assert beflow("--auto", key).exit_code == 0
    assert auto_project.issue(key).status == Status.REVIEW
    context = Context(project=load_project(), opens_tracker=open_tracker, actor="alice")
    call(context, "review.comment", key=key, path="hello.txt", line=1, body="acp-test: write hello.txt bye")

    done = beflow("--auto", key)  # (--auto answers feedback at once: no settle wait)
    assert done.exit_code == 0, done.stdout + done.stderr
    first, second = reversed(auto_project.records(key))
    assert second.round == 1 and [piece.id for piece in second.feedback] == ["page:1"]
    assert auto_project.branch_files(first.branch or "")["hello.txt"] == "bye"
    (comment,) = call(context, "review.show", key=key).comments  # type: ignore[attr-defined]
    assert comment.answer is not None and (second.commit or "")[:12] in comment.answer
    assert project_git(auto_project.directory, "rev-parse", f"{first.branch}^").strip() == first.commit
