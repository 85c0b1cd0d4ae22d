"""How the GitHub tracker reads an issue: what GitHub says of it (:mod:`beflow.trackers.github_wire`) as beflow's
:class:`~beflow.trackers.issue.Issue`, its status and priority from its labels, its comments without beflow's hidden
markers and with the words of those who may not give feedback withheld.

An issue beflow cannot take as GitHub gives it (a label a person made that no issue may carry, an answer of another
shape) is :class:`UnreadableIssue`: in a listing that issue's problem, named and skipped, never a stall of every
listing; a comment that cannot be read is kept in its place, its text left out of prompts, saying why.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pydantic

from beflow.errors import BeflowError
from beflow.trackers import github_wire as wire
from beflow.trackers.github_comments import Authors
from beflow.trackers.github_labels import RepoLabels
from beflow.trackers.issue import DEFAULT_PRIORITY, Comment, FileProblem, Issue
from beflow.trackers.wire import problem as problem_in

#: Before the marker, a comment beflow posted holds a token of its own: a post whose answer was lost is found by it.
_MARKERS = re.compile(r"\s*(<!-- beflow:post [0-9a-f]+ -->\s*)?<!-- beflow(:progress)? -->\s*$")
_PRIORITY = re.compile(r"^priority:\s*(\d+)$")
_LABEL_FIX = "Rename or remove that label on GitHub; beflow skips the issue until then."
_SHAPE_FIX = (
    "GitHub (or a proxy before it) answered differently from its API's description; beflow skips the issue until "
    "it reads. Check tracker.api_url if it goes on."
)


class UnreadableIssue(BeflowError):
    """An issue beflow cannot take as it is on GitHub (a label holding a line break or control characters, or
    longer than labels may be; an answer that does not read): named and skipped, never a crash of the listing it
    is in."""

    code = "unreadable_issue"


class IssueReader:
    """The issues of one repository as beflow reads them (``wanted``: the labels that make an issue beflow's)."""

    def __init__(self, repo: str, labels: RepoLabels, authors: Authors, wanted: list[str]) -> None:
        self.repo = repo
        self.labels = labels
        self.authors = authors
        self.wanted = wanted
        #: How many open issues each issue of the last listing is blocked by, as GitHub said (none: it did not).
        self.blocked_counts: dict[str, int] = {}

    def mine(self, issue: wire.Issue) -> bool:
        """Whether ``issue`` is beflow's: no pull request, and it carries every label of ``tracker.labels``."""
        names = issue.label_names
        return not issue.is_pull and all(label in names for label in self.wanted)

    def one(self, data: Any, number: str) -> wire.Issue:
        """GitHub's answer for issue ``number``, read; else :class:`UnreadableIssue`."""
        got = wire.read(wire.Issue, data)
        if isinstance(got, wire.Unread):
            raise self.unreadable(number, got.why, _SHAPE_FIX)
        return got

    def listing(self, data: Any, what: str) -> tuple[list[Issue], list[FileProblem], dict[str, str]]:
        """The issues of a listing's answer that are beflow's and read, the problem of each one that does not
        (in the listing's order), and why each unreadable one (by its key) is skipped."""
        issues: list[Issue] = []
        problems: list[FileProblem] = []
        unreadable: dict[str, str] = {}
        self.blocked_counts = {}
        for item in wire.listed(data, what):
            got = wire.read(wire.Issue, item)
            try:
                if isinstance(got, wire.Unread):
                    if got.is_pull:
                        continue  # a pull request is never an issue, however it reads
                    raise self.unreadable(None if got.number is None else str(got.number), got.why, _SHAPE_FIX)
                if self.mine(got):
                    issues.append(self.issue(got))
                    summary = got.issue_dependencies_summary
                    if summary is not None and summary.blocked_by is not None:
                        self.blocked_counts[str(got.number)] = summary.blocked_by
            except UnreadableIssue as error:
                number = str(got.number) if got.number is not None else "?"
                if got.number is not None:
                    unreadable[number] = error.message
                problems.append(FileProblem(path=Path(f"{self.repo}#{number}"), message=error.message))
        return issues, problems, unreadable

    def issue(self, raw: wire.Issue, comments: list[Comment] | None = None) -> Issue:
        """``raw`` as beflow's issue; :class:`UnreadableIssue` when a label (or anything else) is not what an issue
        may carry."""
        names = raw.label_names
        priorities = []
        shown = []
        for name in names:
            match = _PRIORITY.match(name)
            if match:
                priorities.append(int(match.group(1)))
            elif not self.labels.says_status(name):
                shown.append(name)
        title = (raw.title or "").strip()
        try:
            return Issue(
                key=str(raw.number),
                title=title.splitlines()[0] if title else "(untitled)",
                status=self.labels.status_of(raw, names),
                labels=shown,
                priority=min(priorities) if priorities else DEFAULT_PRIORITY,
                created=raw.created_at,
                updated=raw.updated_at,
                body=raw.body or "",
                comments=comments or [],
                url=raw.html_url,
            )
        except pydantic.ValidationError as exc:  # a label a person (or an agent) made that no issue may carry
            raise self.unreadable(str(raw.number), problem_in(exc), _LABEL_FIX) from None

    def unreadable(self, number: str | None, problem: str, fix: str) -> UnreadableIssue:
        which = f"issue {number}" if number is not None else "an issue"
        return UnreadableIssue(f"{which} in {self.repo} cannot be read: {problem}", fix=fix)

    def comments(self, data: Any, what: str, issue: wire.Issue) -> list[Comment]:
        """The comments of ``issue`` in a listing's answer, oldest first, without the empty ones."""
        found = [self.comment(item, issue.updated_at) for item in wire.listed(data, what)]
        return [comment for comment in found if comment is not None]

    def comment(self, item: Any, at: dt.datetime) -> Comment | None:
        """One comment (None: nothing but beflow's markers); one that cannot be read is kept, at ``at``, saying
        so, its text left out of prompts."""
        got = item if isinstance(item, wire.Comment) else wire.read(wire.Comment, item)
        if isinstance(got, wire.Unread):
            return _left_out(got.id, got.why, at)
        text = _MARKERS.sub("", got.text)
        if not text.strip():
            return None
        try:
            comment = Comment(author=got.login, created=got.created_at, text=text)
        except pydantic.ValidationError as exc:
            return _left_out(got.id, problem_in(exc), got.created_at)
        # The text of one who may not give feedback stays out of prompts, as in review rounds.
        return comment.withholding(self.authors.why_unread(got))


def _left_out(id_: int | None, why: str, at: dt.datetime) -> Comment:
    text = f"(comment {'?' if id_ is None else id_} cannot be read: {why})"
    return Comment(author="unknown", created=at, text=text).withholding(f"it cannot be read: {why}")
