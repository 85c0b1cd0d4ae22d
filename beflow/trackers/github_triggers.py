"""Triggers on GitHub (:mod:`beflow.trackers.triggers`): an open issue assigned to the token's user, or whose new
comment by a person with write access mentions ``feedback.trigger``, is labelled ready (with ``tracker.labels``).

One repository-wide listing a poll, of the open issues changed since its watermark (``since``, moved to the latest
time it showed): a conditional request, which GitHub answers 304 — costing no rate limit — while nothing changes.
An issue's comments are read only when it changed and has some, from the watermark on: what was said before the
watch started hands nothing over. Each comment is judged once."""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from beflow.feedback import mentions
from beflow.trackers import github_wire as wire
from beflow.trackers.github_api import Api
from beflow.trackers.github_comments import Authors
from beflow.trackers.github_labels import RepoLabels
from beflow.trackers.issue import Status
from beflow.trackers.triggers import Handed, Heard, Left

#: Comment ids remembered as judged (the oldest are forgotten first): each mention is said once.
JUDGED_KEPT = 10_000
#: The most pages (of 100) of changed issues read in one poll, and of one issue's new comments.
MAX_PAGES = 10


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class GitHubTriggers:
    """The triggers of one repository (see the module's description)."""

    def __init__(self, api: Api, base: str, call: Any, labels: RepoLabels, authors: Authors, wanted: list[str]):
        self.api = api
        self._base = base
        self._call = call
        self.labels = labels
        self.authors = authors
        #: The labels that make an issue beflow's (``tracker.labels``): a handed-over issue gets them too.
        self.wanted = wanted
        #: Where the next listing starts (GitHub's time, as it writes it); None until the first poll.
        self.since: str | None = None
        self._judged: OrderedDict[int, None] = OrderedDict()
        #: Leaves the mark of a hand-over (``triggers.label: false``), before the label: the tracker's.
        self.marks: Callable[[str, str], None] = lambda _key, _why: None
        #: With marks (``triggers.label: false``), whether a ready issue is handed over already: one labelled ready by
        #: hand is not, so a trigger hands it over. None: a ready issue is beflow's already.
        self.handed: Callable[[str], bool] | None = None

    def hear(self, mention: str | None, assign: bool) -> Heard:
        if self.since is None:
            self.authors.me()  # an answer first: its Date sets GitHub's clock, which the watermark is on
            self.since = _iso(self.api.now())
        since = self.since
        path = f"{self._base}/issues"
        params = {"state": "open", "since": since, "sort": "updated", "direction": "asc", "per_page": 100}
        raws, _ = wire.read_each(wire.Issue, self._call(self.api.paginate, path, params), f"GET {path}")
        handed: list[Handed] = []
        left: list[Left] = []
        latest = since
        ready: set[str] = set()  # (labelled ready: handed over only if it bears no mark, asked last)
        for raw in raws[: MAX_PAGES * 100]:
            latest = max(latest, raw.updated_at.strftime("%Y-%m-%dT%H:%M:%SZ"))
            status = self.labels.status_of(raw, raw.label_names)
            if raw.is_pull or status not in (Status.OPEN, *([Status.READY] if self.handed else [])):
                continue  # beflow's already (ready, running, in review...), or done
            key = str(raw.number)
            if status == Status.READY:
                ready.add(key)
            me = self.authors.me()
            if assign and any((user.login or "").lower() == me.lower() for user in raw.assignees or []):
                handed.append(Handed(key, "assign", me))
            elif mention is not None and raw.comments:
                found = self._mentioned(raw, mention, since, left)
                if found is not None:
                    handed.append(Handed(key, "mention", found))
        handed = [one for one in handed if one.key not in ready or (self.handed and not self.handed(one.key))]
        for one in handed:
            self.marks(one.key, one.reason(mention or ""))
            self._hand_over(one.key)
        self.since = latest  # (inclusive: the same answer next time, a 304)
        return Heard(handed, left)

    def _mentioned(self, raw: wire.Issue, trigger: str, since: str, left: list[Left]) -> str | None:
        """Who, trusted, mentioned ``trigger`` in a comment on ``raw`` since ``since`` (None: nobody); a stranger's
        mention goes to ``left``."""
        path = f"{self._base}/issues/{raw.number}/comments"
        data = self._call(self.api.paginate, path, {"since": since, "per_page": 100})
        comments, _ = wire.read_each(wire.Comment, data, f"GET {path}")
        for comment in comments[: MAX_PAGES * 100]:
            if comment.id in self._judged:
                continue
            self._judged[comment.id] = None
            while len(self._judged) > JUDGED_KEPT:
                self._judged.popitem(last=False)
            if not mentions(comment.text, trigger):
                continue
            why = self.authors.why_not(comment)
            if why is None:
                return comment.login
            left.append(Left(str(raw.number), comment.login, why))
        return None

    def _hand_over(self, key: str) -> None:
        ready = self.labels.of(Status.READY)
        names = [*self.wanted, *([ready] if ready else [])]
        self.labels.ready()
        self._call(self.api.request, "POST", f"{self._base}/issues/{key}/labels", json={"labels": names})
