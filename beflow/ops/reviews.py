"""The review operations: an issue's branch as a reviewer reads it (its change against the base, file by file, and
the comments given on beflow's page), and a comment on it — on a line or on the whole change — which is review
feedback: the next round on the same branch answers it (docs/dashboard.md#reviewing-a-runs-work).

The dashboard's review and ``POST /api/v1/issues/{key}/review`` go through these; the agent gets neither (a review
of its own work is a person's).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from beflow.errors import BeflowError, NotFoundError, UsageError
from beflow.ops.issues import tracker
from beflow.ops.operations import Context, Input, Key, operation
from beflow.records.reviews import PageComment, PageReviews
from beflow.repository import refs
from beflow.repository.branch_diff import BranchDiff, FileChange, branch_diff
from beflow.trackers.issue import MAX_TEXT, Status

#: The statuses of an issue whose branch takes comments: in review, or running (a round: the next one answers it).
REVIEWABLE = frozenset({Status.REVIEW, Status.IN_PROGRESS})
#: Lines of the diff quoted with a line comment (those up to it in its hunk), as a GitHub review comment's hunk is.
HUNK_LINES = 20


class ReviewConflict(BeflowError):
    """A review comment cannot start a round now (the issue is not in review, its branch is not there)."""

    code = "conflict"


class ReviewKey(Input):
    key: Key = Field(min_length=1, max_length=100, description="The issue whose branch is reviewed.")


class ReviewView(BaseModel):
    """An issue's branch against its base, and the page's comments on it with their answers."""

    key: str
    title: str
    status: str
    branch: str
    diff: BranchDiff | None = Field(description="None: the issue has no branch (yet).")
    comments: list[PageComment]


class ReviewComment(Input):
    key: Key = Field(min_length=1, max_length=100, description="The issue whose branch is reviewed.")
    body: str = Field(min_length=1, max_length=MAX_TEXT, description="The comment (Markdown).")
    path: str | None = Field(
        default=None, max_length=4096, description="The file commented on (one the branch changed); none: the change."
    )
    line: int | None = Field(
        default=None, ge=1, description="Its line in the branch's version (a line the diff shows); needs path."
    )


class Commented(BaseModel):
    key: str
    comment: PageComment
    message: str


def _diff(context: Context, key: str) -> tuple[BranchDiff | None, str]:
    project = context.project
    branch = refs.branch_for(key)
    return branch_diff(project.directory, branch, project.config.worktrees.base), branch


@operation(
    "review.show",
    title="Review an issue's branch",
    description="The change on an issue's branch (beflow/<key>) against its base, file by file with numbered lines "
    "(read from verified git objects), and the comments given on beflow's page with their answers.",
    safety="read",
    category="review",
    tags=("review", "read"),
    tracker=True,
)
def show(context: Context, payload: ReviewKey) -> ReviewView:
    issue = tracker(context).get(payload.key)
    diff, branch = _diff(context, issue.key)
    comments = PageReviews(context.project.directory).read(issue.key).comments
    return ReviewView(
        key=issue.key, title=issue.title, status=issue.status.value, branch=branch, diff=diff, comments=comments
    )


@operation(
    "review.comment",
    title="Comment on an issue's branch",
    description="Review feedback on an issue in review (or in a round): a comment on a line of a file its branch "
    "changed (path and line, as the diff numbers it) or on the whole change. The next review round on the same "
    "branch answers it (after feedback.settle), and the answer is kept beside the comment.",
    safety="action",
    category="review",
    tags=("review", "write", "feedback"),
    tracker=True,
)
def comment(context: Context, payload: ReviewComment) -> Commented:
    issue = tracker(context).get(payload.key)
    if issue.status not in REVIEWABLE:
        raise ReviewConflict(
            f"issue {issue.key} is {issue.status.value}: a review round answers an issue in review only",
            fix="Comment once a run of it has finished and it is in review.",
        )
    if payload.line is not None and payload.path is None:
        raise UsageError("review.comment: line: a line needs its path", fix="Name the file the line is in.")
    diff, branch = _diff(context, issue.key)
    if diff is None:
        raise ReviewConflict(f"issue {issue.key} has no branch {branch}: there is no change to review")
    hunk = None
    if payload.path is not None:
        change = next((f for f in diff.files if f.path == payload.path), None)
        if change is None:
            raise NotFoundError(
                f"review.comment: path: {branch} does not change {payload.path!r}",
                fix="Comment on a file the diff shows.",
            )
        if payload.line is not None:
            hunk = _hunk_at(change, payload.line)
            if hunk is None:
                raise UsageError(
                    f"review.comment: line: line {payload.line} of {payload.path} is not in the diff",
                    fix="Comment on a line the diff shows (its number in the branch's version).",
                )
    kept = PageReviews(context.project.directory).add(
        issue.key,
        author=context.actor,
        body=payload.body,
        commit=diff.tip,
        path=payload.path,
        line=payload.line,
        hunk=hunk,
    )
    return Commented(
        key=issue.key,
        comment=kept,
        message=f"comment {kept.number} on issue {issue.key}: the next review round answers it",
    )


def _hunk_at(change: FileChange, line: int) -> str | None:
    """The diff's lines up to ``line`` in its hunk (the branch's numbering; a deleted file's: the old one), at most
    :data:`HUNK_LINES`; None when the diff does not show that line."""
    for hunk in change.hunks:
        for index, shown in enumerate(hunk.lines):
            number = shown.old if change.status == "deleted" else shown.new
            if number == line:
                marks = {"add": "+", "del": "-", "same": " "}
                upto = hunk.lines[max(0, index + 1 - HUNK_LINES) : index + 1]
                quoted = [marks[each.kind] + each.text for each in upto]
                return "\n".join([hunk.header, *quoted])
    return None
