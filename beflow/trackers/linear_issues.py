"""How the Linear tracker reads a team's issues: the active ones held in memory and brought up to date by asking
Linear only what changed (``BeflowChanged``: ids and times, a few points), each as beflow's
:class:`~beflow.trackers.issue.Issue`; an issue that does not read is that issue's problem, named and skipped.

A full listing of the active issues (not done, not canceled) is read every :data:`FULL_EVERY` seconds; between two,
a look is one question of what changed since the last change read, and a read of those issues alone (without the
labels in the filter: an issue that lost beflow's label is seen, and dropped). An idle watch costs one request a poll.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic

from beflow.config import LinearTrackerSettings
from beflow.errors import BeflowError
from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from beflow.trackers.issue import Comment, FileProblem, Issue
from beflow.trackers.linear_api import Api
from beflow.trackers.linear_claims import LinearLeases
from beflow.trackers.linear_identity import Identity
from beflow.trackers.linear_workflow import Workflow
from beflow.trackers.wire import Wire
from beflow.trackers.wire import problem as problem_in

#: The state types of the issues a watch holds in memory (a done or canceled issue starts no run).
ACTIVE = ("triage", "backlog", "unstarted", "started")
#: Seconds between full listings of the active issues (a look in between asks only what changed): an issue moved out of
#: the team or the project is dropped by the next one.
FULL_EVERY = 600.0
#: How far back the first look after a full listing may ask what changed: the listing and the clocks need not agree.
OVERLAP = 60.0
#: Linear's times are to the millisecond: "changed after" asks from a millisecond before the last change read.
_TICK = dt.timedelta(milliseconds=1)
SHAPE_FIX = (
    "Linear (or a proxy before it) answered differently from its schema; beflow skips the issue until it reads. "
    "Check tracker.api_url if it goes on."
)
_LABEL_FIX = "Rename or remove that label in Linear; beflow skips the issue until then."


class UnreadableIssue(BeflowError):
    """An issue beflow cannot take as Linear gives it: named and skipped, never a crash of the listing it is in."""

    code = "unreadable_issue"


class _Changed(Wire):
    id: wire.Id
    identifier: str
    updatedAt: dt.datetime


class _ChangedAnswer(Wire):
    issues: wire.Connection[_Changed]


class _Page(Wire):
    nodes: Any
    pageInfo: wire.PageInfo = wire.PageInfo(hasNextPage=False)


class _IssuesAnswer(Wire):
    issues: _Page


class TeamIssues:
    """The issues of one team that are beflow's, as last read (see the module's description)."""

    def __init__(
        self, api: Api, settings: LinearTrackerSettings, workflow: Workflow, leases: LinearLeases, identity: Identity
    ) -> None:
        self.api = api
        self.identity = identity
        self.settings = settings
        self.workflow = workflow
        self.leases = leases
        #: The issues the last look could not read, and why: they are skipped until fixed.
        self.unreadable: dict[str, str] = {}
        #: Issue id -> the active issue of beflow's, as last read.
        self.active: dict[str, wire.Issue] = {}
        #: Identifier -> issue id (every issue read).
        self.ids: dict[str, str] = {}
        #: Issue id -> why it does not read.
        self.problems: dict[str, FileProblem] = {}
        self._stamps: dict[str, dt.datetime] = {}  # issue id -> its updatedAt as last read (any issue of the team)
        self._since: dt.datetime | None = None  # what changed after this was not read yet
        self._full_at = 0.0
        self._reading = False
        self._looked = False

    @contextlib.contextmanager
    def reading_once(self) -> Iterator[None]:
        """Every question of the block is answered from one look at Linear (a watch tick)."""
        outer = self._reading
        self._reading, self._looked = True, False
        try:
            yield
        finally:
            self._reading = outer

    def look(self) -> None:
        """The active issues brought up to date: a full listing every :data:`FULL_EVERY` seconds, else one question
        of what changed since the last look and a read of those that did."""
        if self._reading and self._looked:
            return
        if self._since is None or time.monotonic() - self._full_at > FULL_EVERY:
            self._full()
        else:
            self._changes()
        self._looked = True

    def _full(self) -> None:
        begun = dt.datetime.fromtimestamp(self.api.now() - OVERLAP, dt.UTC)
        self.identity.viewer()  # (once: whose issues are handed to beflow is asked with the first listing, not later)
        flt = q.issue_filter(
            self.settings.team,
            project=self.settings.project,
            labels=self.settings.labels,
            state_types=ACTIVE,
            handed=True,
        )
        read = self.fetch(flt)
        self.active, self.problems = {}, {}
        self.take(read)
        # What changes next is asked from the latest change read (the same millisecond included), or from a while
        # before the listing began, whichever is later: the window of the next question stays small.
        latest = max((r.updatedAt for r in read if isinstance(r, wire.Issue)), default=begun)
        self._since, self._full_at = max(begun, latest) - _TICK, time.monotonic()

    def _changes(self) -> None:
        assert self._since is not None
        flt = q.issue_filter(self.settings.team, project=self.settings.project, updated_after=_iso(self._since))
        data = self.api.query(q.CHANGED, {"filter": flt, "first": q.PAGE})
        page = wire.parse(_ChangedAnswer, data, "BeflowChanged").issues
        if page.pageInfo.hasNextPage:  # more changed than a page: read them all again
            self._full()
            return
        changed = [n for n in page.nodes if self._stamps.get(n.id) != n.updatedAt]
        if changed:
            # (without the labels: an issue that lost beflow's label is seen, and dropped)
            since = min(n.updatedAt for n in changed) - _TICK
            self.take(self.fetch(q.issue_filter(self.settings.team, project=self.settings.project,
                                                   updated_after=_iso(since))))  # fmt: skip
        self._since = max([self._since, *(n.updatedAt - _TICK for n in page.nodes)])

    def fetch(self, flt: dict[str, Any]) -> list[wire.Issue | wire.Unread]:
        """Every issue matching ``flt``, a page at a time; one that does not read is its :class:`~wire.Unread`."""
        found: list[wire.Issue | wire.Unread] = []
        after: str | None = None
        while True:
            data = self.api.query(q.ISSUES, {"filter": flt, "first": q.PAGE, "after": after})
            page = wire.parse(_IssuesAnswer, data, "BeflowIssues").issues
            found.extend(wire.read(wire.Issue, item) for item in wire.listed(page.nodes, "BeflowIssues"))
            if not page.pageInfo.hasNextPage or not page.pageInfo.endCursor:
                return found
            after = page.pageInfo.endCursor

    def take(self, read: list[wire.Issue | wire.Unread]) -> None:
        for raw in read:
            if isinstance(raw, wire.Unread):
                if raw.id is not None:
                    self._drop(raw.id)
                    self.problem(raw.id, raw.identifier, raw.why, SHAPE_FIX)
                continue
            self._stamps[raw.id] = raw.updatedAt
            self.ids[raw.identifier] = raw.id
            self.problems.pop(raw.id, None)
            self.unreadable.pop(raw.identifier, None)
            if self.mine(raw) and raw.state.type in ACTIVE:
                self.active[raw.id] = raw
                self.leases.observe(raw.identifier, raw.id, raw.updatedAt)
            else:
                self._drop(raw.id)

    def _drop(self, issue_id: str) -> None:
        self.active.pop(issue_id, None)

    def problem(self, issue_id: str, identifier: str | None, why: str, fix: str) -> UnreadableIssue:
        which = identifier or issue_id
        error = UnreadableIssue(f"issue {which} of the Linear team {self.settings.team} cannot be read: {why}", fix=fix)
        self.problems[issue_id] = FileProblem(path=_where(which), message=error.message)
        self.unreadable[which] = error.message
        return error

    def mine(self, raw: wire.Issue) -> bool:
        """Whether ``raw`` is beflow's: of the team (and project), carrying every label of ``tracker.labels`` or
        delegated to beflow's app user."""
        if raw.team.key != self.settings.team:
            return False
        if self.settings.project is not None and (raw.project is None or raw.project.name != self.settings.project):
            return False
        names = {name.casefold() for name in self.workflow.names(raw)}
        return all(label.casefold() in names for label in self.settings.labels) or self.identity.handed(raw)

    def issue(self, raw: wire.Issue, comments: list[Comment] | None = None) -> Issue:
        names = self.workflow.names(raw)
        title = raw.title.strip()
        try:
            return Issue(
                key=raw.identifier,
                title=title.splitlines()[0] if title else "(untitled)",
                status=self.workflow.status_of(raw, names, delegated=self.delegated(raw)),
                labels=[name for name in names if not self.workflow.says_status(name)],
                priority=raw.rank,
                created=raw.createdAt,
                updated=raw.updatedAt,
                body=raw.description or "",
                comments=comments or [],
                url=raw.url,
                id=raw.id,
            )
        except pydantic.ValidationError as exc:  # a label a person made that no issue may carry
            raise self.problem(raw.id, raw.identifier, problem_in(exc), _LABEL_FIX) from None

    def delegated(self, raw: wire.Issue) -> bool:
        """Whether ``raw`` is delegated to beflow's app user (a person's delegation of an issue not started yet)."""
        return raw.delegate is not None and raw.delegate.app and self.identity.handed(raw)

    def readable(self, raws: list[wire.Issue]) -> list[Issue]:
        issues = []
        for raw in raws:
            try:
                issues.append(self.issue(raw))
            except UnreadableIssue:
                self.active.pop(raw.id, None)
        return issues


def comment_of(raw: wire.Comment) -> Comment | None:
    """A comment as beflow reads it (None: an empty one)."""
    if not raw.body.strip():
        return None
    author = (raw.user.displayName or raw.user.name) if raw.user else "Linear"
    try:
        return Comment(author=author, created=raw.createdAt, text=raw.body)
    except pydantic.ValidationError as exc:
        why = problem_in(exc)
        text = f"(comment {raw.id} cannot be read: {why})"
        return Comment(author="unknown", created=raw.createdAt, text=text).withholding(f"it cannot be read: {why}")


def _iso(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _where(which: str) -> Path:
    return Path(f"linear/{which}")
