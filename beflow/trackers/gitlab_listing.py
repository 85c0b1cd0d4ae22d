"""The GitLab tracker's issues held in memory, kept up to date with one request per look (docs/scaling.md).

GitLab answers no listing with a 304, so polling a whole listing would cost a request per page per poll however
quiet the project is. Instead the tracker reads every issue carrying ``tracker.labels`` once, and then asks only for
what changed since its last look: ``GET /projects/:id/issues?updated_after=...`` — one request, empty while nothing
happens. The question is asked without the labels, so that an issue which lost a label shows up (and leaves); each
look starts :data:`SLACK` seconds before the previous one began, on GitLab's clock (an answer's ``Date``), so that an
update written in the same second, or committed while the previous look was read, is seen again rather than missed
(seen twice is harmless: the newer answer wins). Every :data:`RESYNC` seconds the whole listing is read again: an
issue deleted on GitLab shows in no listing of changes.

Within :meth:`ProjectIssues.reading_once` (a watch tick) one look answers every question of the thread; the
tracker's own writes are applied to what it holds from their answers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from beflow.trackers import gitlab_wire as wire
from beflow.trackers.gitlab_api import Api
from beflow.trackers.gitlab_issues import IssueReader, UnreadableIssue
from beflow.trackers.issue import FileProblem, Issue

#: Each look for changes starts this far before the previous look began (seconds, on GitLab's clock).
SLACK = 60.0
#: The whole listing is read again this often (seconds): deletions show in no listing of changes.
RESYNC = 900.0
#: Changed issues held for the triggers at most (the oldest go first).
CHANGES_KEPT = 1_000


@dataclass(frozen=True)
class _Entry:
    """What is known of one issue carrying beflow's labels: beflow's issue, or why it is skipped."""

    raw: wire.Issue | None
    issue: Issue | None
    #: Why it is skipped (it cannot be read, it is confidential); None when it is one of beflow's issues.
    skipped: str | None = None
    #: Whether the skip is a problem of the issue (it cannot be read) rather than a rule (a confidential issue).
    problem: bool = False


@dataclass(frozen=True)
class Look:
    """The issues as one look saw them: beflow's (in the order of their keys), the problems of those that cannot be
    read, and why each skipped issue is skipped (by key)."""

    issues: list[Issue]
    problems: list[FileProblem]
    skipped: dict[str, str]
    #: When each of beflow's issues was last updated, as GitLab says it (``updated_at``), by key.
    updated: dict[str, dt.datetime]


class _Reading(threading.local):
    holding = 0
    looked = False


class ProjectIssues:
    """The issues of one project that carry beflow's labels (``call``: the tracker's calls of ``api``; ``seen``:
    told of every look, with each issue's key and ``updated_at``)."""

    def __init__(
        self,
        api: Api,
        base: str,
        call: Callable[..., Any],
        reader: IssueReader,
        seen: Callable[[dict[str, dt.datetime]], None] | None = None,
    ) -> None:
        self.api = api
        self._path = f"{base}/issues"
        self._call = call
        self.reader = reader
        self._seen = seen
        self._entries: dict[int, _Entry] = {}
        self._since: float | None = None  # GitLab's clock: where the next look for changes starts
        self._synced = 0.0  # monotonic: when the whole listing was last read
        self._lock = threading.Lock()
        #: One look at a time: a look that began earlier never lands over a later one.
        self._looking = threading.Lock()
        self._reading = _Reading()
        #: The issues looks for changes showed, any of the project's (labelled or not), until a trigger takes them
        #: (:meth:`changes`): assignments and new notes are read from them, at no request of their own.
        self._changed: dict[int, wire.Issue] = {}
        #: How many looks asked GitLab (and how many of them read the whole listing): the cost of keeping up.
        self.looks = 0
        self.resyncs = 0

    @contextlib.contextmanager
    def reading_once(self) -> Iterator[None]:
        """Within the block, this thread's questions are answered from one look."""
        reading = self._reading
        if reading.holding == 0:
            reading.looked = False
        reading.holding += 1
        try:
            yield
        finally:
            reading.holding -= 1

    def look(self) -> Look:
        """The issues now (or as this thread's look within :meth:`reading_once` saw them)."""
        reading = self._reading
        if not (reading.holding and reading.looked):
            self._refresh()
            reading.looked = bool(reading.holding)
        with self._lock:
            entries = dict(self._entries)
        issues = sorted((e.issue for e in entries.values() if e.issue is not None), key=lambda i: int(i.key))
        problems = [
            self.reader.problem(str(iid), e.skipped)
            for iid, e in sorted(entries.items())
            if e.skipped is not None and e.problem
        ]
        skipped = {str(iid): e.skipped for iid, e in sorted(entries.items()) if e.skipped is not None}
        updated = {str(iid): e.raw.updated_at for iid, e in entries.items() if e.issue is not None and e.raw}
        look = Look(issues, problems, skipped, updated)
        if self._seen is not None:
            self._seen(updated)
        return look

    def changes(self) -> list[wire.Issue]:
        """The issues the looks for changes showed since the last call, each as last shown."""
        with self._lock:
            changed, self._changed = list(self._changed.values()), {}
        return changed

    def saw(self, raw: wire.Issue) -> None:
        """GitLab's answer about one issue (read by the tracker, or the answer to its own write): what is held of it
        is brought up to date."""
        with self._lock:
            self._take(raw, self._entries)

    def forget(self, iid: int) -> None:
        """Issue ``iid`` is gone (GitLab says 404)."""
        with self._lock:
            self._entries.pop(iid, None)

    def _refresh(self) -> None:
        with self._looking:
            self._look_now()

    def _look_now(self) -> None:
        with self._lock:
            full = self._since is None or time.monotonic() - self._synced >= RESYNC
            since = self._since
        params: dict[str, Any] = {"state": "all", "order_by": "created_at", "sort": "asc"}
        if full:
            if self.reader.wanted:
                params["labels"] = ",".join(self.reader.wanted)
        else:
            assert since is not None
            params["updated_after"] = _iso(since)
        started = time.monotonic()
        data = self._call(self.api.paginate, self._path, params)
        # Where the next look starts: when this one began on GitLab's clock (the answer's Date set it), less SLACK.
        began = self.api.now() - (time.monotonic() - started)
        items = wire.listed(data, f"GET {self._path}")
        with self._lock:
            self.looks += 1
            held = self._entries
            if full:
                self.resyncs += 1
                self._entries = {}
                self._synced = started
            for item in items:
                self._item(item, full, held)
            self._since = began - SLACK

    def _item(self, item: Any, full: bool, held: dict[int, _Entry]) -> None:
        got = wire.read(wire.Issue, item)
        if isinstance(got, wire.Unread):
            mine = True if full else self.reader.mine_raw(item)
            if got.iid is None:
                return  # nothing names it: its next change, or the next whole listing, shows it
            if mine is False or (mine is None and got.iid not in held):
                self._entries.pop(got.iid, None)
                return
            message = self.reader.unreadable(str(got.iid), got.why).message
            self._entries[got.iid] = _Entry(None, None, message, problem=True)
            return
        if not full:
            self._changed[got.iid] = got
            while len(self._changed) > CHANGES_KEPT:  # (nobody takes them: a tracker without triggers)
                self._changed.pop(next(iter(self._changed)))
        self._take(got, held)

    def _take(self, raw: wire.Issue, held: dict[int, _Entry]) -> None:
        """``raw`` as what is held of its issue, unless ``held`` (what was held before) knows a later state of it (an
        answer to a write, read while the listing was) (the lock held)."""
        before = held.get(raw.iid)
        if before is not None and before.raw is not None and before.raw.updated_at > raw.updated_at:
            self._entries[raw.iid] = before
            return
        if not self.reader.mine(raw):
            self._entries.pop(raw.iid, None)
            return
        withheld = self.reader.withheld(raw)
        if withheld is not None:
            self._entries[raw.iid] = _Entry(raw, None, withheld)
            return
        try:
            self._entries[raw.iid] = _Entry(raw, self.reader.issue(raw))
        except UnreadableIssue as error:
            self._entries[raw.iid] = _Entry(raw, None, error.message, problem=True)


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
