"""How the GitLab tracker reads an issue: what GitLab says of it (:mod:`beflow.trackers.gitlab_wire`) as beflow's
:class:`~beflow.trackers.issue.Issue` — its key the issue's ``iid``, its status from its labels
(:mod:`beflow.trackers.gitlab_labels`), its priority from a ``priority:N`` label, else from GitLab's weight — and its
notes without GitLab's own (system notes), without beflow's hidden markers, and with the words of those who may not
give feedback withheld.

Priority: a ``priority:N`` label says it (the lowest, when there are several); else an issue's weight is its
priority as it is (weight 0 runs first, then 1, 2...: the lighter issues first); else the default, 2.

An issue beflow cannot take as GitLab gives it (a label a person made that no issue may carry, an answer of another
shape) is :class:`UnreadableIssue`: in a listing that issue's problem, named and skipped, never a stall of every
listing. A confidential issue is skipped (named, once, by a watch) unless ``tracker.confidential`` says otherwise:
an agent's words about it end up in a branch and a merge request others may read. Internal notes stay out of
prompts on the same terms.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pydantic

from beflow.errors import BeflowError
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.gitlab_claims import is_claim_note
from beflow.trackers.gitlab_labels import ProjectLabels
from beflow.trackers.gitlab_notes import Members
from beflow.trackers.issue import DEFAULT_PRIORITY, Comment, FileProblem, Issue
from beflow.trackers.wire import problem as problem_in

#: Before the marker, a note beflow posted holds a token of its own: a post whose answer was lost is found by it.
_MARKERS = re.compile(r"\s*(<!-- beflow:post [0-9a-f]+ -->\s*)?<!-- beflow(:progress)? -->\s*$")
_PRIORITY = re.compile(r"^priority:\s*(\d+)$")
_LABEL_FIX = "Rename or remove that label on GitLab; beflow skips the issue until then."
_SHAPE_FIX = (
    "GitLab (or a proxy before it) answered differently from its API's description; beflow skips the issue until "
    "it reads. Check tracker.url if it goes on."
)


class UnreadableIssue(BeflowError):
    """An issue beflow cannot take as it is on GitLab (a label holding a line break or control characters, or
    longer than labels may be; an answer that does not read): named and skipped, never a crash of the listing it
    is in."""

    code = "unreadable_issue"


class IssueReader:
    """The issues of one project as beflow reads them (``wanted``: the labels that make an issue beflow's;
    ``confidential``: whether confidential issues are beflow's too)."""

    def __init__(
        self, project: str, labels: ProjectLabels, members: Members, wanted: list[str], *, confidential: bool
    ) -> None:
        self.project = project
        self.labels = labels
        self.members = members
        self.wanted = wanted
        self.confidential = confidential

    def mine(self, issue: wire.Issue) -> bool:
        """Whether ``issue`` is beflow's: it carries every label of ``tracker.labels``."""
        return all(label in issue.labels for label in self.wanted)

    def mine_raw(self, item: Any) -> bool | None:
        """Whether an item of a listing that does not read carries beflow's labels, as far as it says (None: it does
        not say so that it can be told)."""
        labels = item.get("labels") if isinstance(item, dict) else None
        if not isinstance(labels, list):
            return None
        names = {x.get("name") if isinstance(x, dict) else x for x in labels}
        return all(label in names for label in self.wanted)

    def withheld(self, issue: wire.Issue) -> str | None:
        """Why beflow leaves ``issue`` alone though it carries its labels (it is confidential), if it does."""
        if issue.confidential and not self.confidential:
            return (
                f"issue {issue.iid} in {self.project} is confidential: beflow leaves confidential issues alone "
                "unless tracker.confidential is true"
            )
        return None

    def one(self, data: Any, iid: str) -> wire.Issue:
        """GitLab's answer for issue ``iid``, read; else :class:`UnreadableIssue`."""
        got = wire.read(wire.Issue, data)
        if isinstance(got, wire.Unread):
            raise self.unreadable(iid, got.why, _SHAPE_FIX)
        return got

    def issue(self, raw: wire.Issue, comments: list[Comment] | None = None) -> Issue:
        """``raw`` as beflow's issue; :class:`UnreadableIssue` when a label (or anything else) is not what an issue
        may carry."""
        priorities = []
        shown = []
        for name in raw.labels:
            match = _PRIORITY.match(name)
            if match:
                priorities.append(int(match.group(1)))
            elif not self.labels.says_status(name):
                shown.append(name)
        if priorities:
            priority = min(priorities)
        elif raw.weight is not None and raw.weight >= 0:
            priority = raw.weight
        else:
            priority = DEFAULT_PRIORITY
        title = (raw.title or "").strip()
        try:
            return Issue(
                key=str(raw.iid),
                title=title.splitlines()[0] if title else "(untitled)",
                status=self.labels.status_of(raw),
                labels=shown,
                priority=priority,
                created=raw.created_at,
                updated=raw.updated_at,
                body=raw.description or "",
                comments=comments or [],
                url=raw.web_url,
            )
        except pydantic.ValidationError as exc:  # a label a person (or an agent) made that no issue may carry
            raise self.unreadable(str(raw.iid), problem_in(exc), _LABEL_FIX) from None

    def problem(self, iid: str | None, message: str) -> FileProblem:
        """A listing's problem for issue ``iid``: it names the issue as people write it (``acme/widgets#3``)."""
        return FileProblem(path=Path(f"{self.project}#{iid or '?'}"), message=message)

    def unreadable(self, iid: str | None, problem: str, fix: str = _SHAPE_FIX) -> UnreadableIssue:
        which = f"issue {iid}" if iid is not None else "an issue"
        return UnreadableIssue(f"{which} in {self.project} cannot be read: {problem}", fix=fix)

    def comments(self, data: Any, what: str, issue: wire.Issue) -> list[Comment]:
        """The notes of ``issue`` in a listing's answer as its comments, oldest first: none of GitLab's own (label
        changes, mentions), none that is empty but for beflow's markers."""
        found = [self.comment(item, issue.updated_at) for item in wire.listed(data, what)]
        return sorted((c for c in found if c is not None), key=lambda c: c.created)

    def comment(self, item: Any, at: dt.datetime) -> Comment | None:
        """One note (None: GitLab's own, or nothing but beflow's markers); one that cannot be read is kept, at
        ``at``, saying so, its text left out of prompts."""
        got = item if isinstance(item, wire.Note) else wire.read(wire.Note, item)
        if isinstance(got, wire.Unread):
            if isinstance(item, dict) and item.get("system") is True:
                return None
            return _left_out(got.id, got.why, at)
        if got.system or is_claim_note(got.text):
            return None  # GitLab's own words, and the claims (beflow.trackers.gitlab_claims) are no conversation
        text = _MARKERS.sub("", got.text)
        if not text.strip():
            return None
        try:
            comment = Comment(author=got.author.username, created=got.created_at, text=text)
        except pydantic.ValidationError as exc:
            return _left_out(got.id, problem_in(exc), got.created_at)
        if got.hidden and not self.confidential:
            return comment.withholding("it is an internal note, and tracker.confidential is off")
        # The text of one who may not give feedback stays out of prompts, as in review rounds.
        return comment.withholding(self.members.why_unread(got))


def _left_out(id_: int | None, why: str, at: dt.datetime) -> Comment:
    text = f"(note {'?' if id_ is None else id_} cannot be read: {why})"
    return Comment(author="unknown", created=at, text=text).withholding(f"it cannot be read: {why}")
