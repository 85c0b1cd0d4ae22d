"""Triggers on GitLab (:mod:`beflow.trackers.triggers`): an open issue assigned to the token's user, or whose new note
by a member with Developer access (or ``feedback.allow``) mentions ``feedback.trigger``, is labelled ready (with
``tracker.labels``).

No request of its own a poll: the tracker's look at what changed (:mod:`beflow.trackers.gitlab_listing`) shows every
changed issue of the project with its assignees and its count of people's notes. An issue's notes are read only when
that count grew, and only the notes written since the watch's first poll count: what was said before it hands nothing
over. Each note is judged once."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from beflow.feedback import mentions
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.gitlab_api import Api
from beflow.trackers.gitlab_issues import IssueReader
from beflow.trackers.gitlab_labels import ProjectLabels
from beflow.trackers.gitlab_listing import ProjectIssues
from beflow.trackers.gitlab_notes import Members
from beflow.trackers.issue import Status
from beflow.trackers.triggers import NOTHING, Handed, Heard, Left

#: Notes remembered as judged, and issues' note counts (the oldest are forgotten first).
KEPT = 10_000


class GitLabTriggers:
    """The triggers of one project (see the module's description)."""

    def __init__(
        self,
        api: Api,
        base: str,
        call: Any,
        labels: ProjectLabels,
        members: Members,
        reader: IssueReader,
        issues: ProjectIssues,
    ) -> None:
        self.api = api
        self._base = base
        self._call = call
        self.labels = labels
        self.members = members
        self.reader = reader
        self.issues = issues
        #: When the first poll was (GitLab's clock): what changed or was said before it hands nothing over.
        self.start: float | None = None
        self._notes: OrderedDict[int, int] = OrderedDict()  # iid -> people's notes, as last seen
        self._judged: OrderedDict[int, None] = OrderedDict()
        #: Leaves the mark of a hand-over (``triggers.label: false``), before the label: the tracker's.
        self.marks: Callable[[str, str], None] = lambda _key, _why: None
        #: With marks (``triggers.label: false``), whether a ready issue is handed over already: one labelled ready by
        #: hand is not, so a trigger hands it over. None: a ready issue is beflow's already.
        self.handed: Callable[[str], bool] | None = None

    def hear(self, mention: str | None, assign: bool) -> Heard:
        self.issues.look()  # (the tick's own look, within reading_once: no request more)
        if self.start is None:
            self.start = self.api.now() - 1.0  # (GitLab's clock is known to the second: its Date header)
            self.issues.changes()
            return NOTHING
        handed: list[Handed] = []
        left: list[Left] = []
        ready: set[str] = set()  # (labelled ready: handed over only if it bears no mark, asked last)
        for raw in self.issues.changes():
            notes, self._notes[raw.iid] = self._notes.get(raw.iid, 0), raw.user_notes_count or 0
            _trim(self._notes)
            if raw.state != "opened" or raw.updated_at.timestamp() < self.start:
                continue
            status = self.labels.status_of(raw)
            if status not in (Status.OPEN, *([Status.READY] if self.handed else [])):
                continue  # beflow's already (ready, running, in review...)
            if self.reader.withheld(raw) is not None:
                continue  # confidential, and left alone
            if status == Status.READY:
                ready.add(str(raw.iid))
            me = self.members.me()
            if assign and any(user.id == me.id for user in raw.assignees or []):
                handed.append(Handed(str(raw.iid), "assign", me.username))
            elif mention is not None and (raw.user_notes_count or 0) > notes:
                found = self._mentioned(raw, mention, left)
                if found is not None:
                    handed.append(Handed(str(raw.iid), "mention", found))
        handed = [one for one in handed if one.key not in ready or (self.handed and not self.handed(one.key))]
        for one in handed:
            self.marks(one.key, one.reason(mention or ""))
            self._hand_over(one.key)
        return Heard(handed, left)

    def _mentioned(self, raw: wire.Issue, trigger: str, left: list[Left]) -> str | None:
        """Who, trusted, mentioned ``trigger`` in a note on ``raw`` since the first poll (None: nobody); a stranger's
        mention goes to ``left``. The latest page of notes (the newest first): those since are among them."""
        path = f"{self._base}/issues/{raw.iid}/notes"
        data = self._call(self.api.get, path, {"sort": "desc", "order_by": "created_at", "per_page": 100})
        notes, _ = wire.read_each(wire.Note, data, f"GET {path}")
        assert self.start is not None
        for note in reversed(notes):
            if note.system or note.created_at.timestamp() < self.start or note.id in self._judged:
                continue
            self._judged[note.id] = None
            _trim(self._judged)
            if not mentions(note.text, trigger):
                continue
            why = self.members.why_not(note)
            if why is None:
                return note.author.username
            left.append(Left(str(raw.iid), note.author.username, why))
        return None

    def _hand_over(self, key: str) -> None:
        ready = self.labels.of(Status.READY)
        names = [*self.reader.wanted, *([ready] if ready else [])]
        self.labels.ready()
        path = f"{self._base}/issues/{key}"
        answer = self._call(self.api.request, "PUT", path, json={"add_labels": ",".join(names)}).data
        moved = wire.read(wire.Issue, answer)
        if not isinstance(moved, wire.Unread):
            self.issues.saw(moved)  # (its status now ready: the tick's listing queues it)


def _trim(kept: OrderedDict[Any, Any]) -> None:
    while len(kept) > KEPT:
        kept.popitem(last=False)
