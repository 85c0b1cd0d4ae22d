"""The comments beflow writes on a Linear issue: each posted once (with an id beflow chooses, so a retry after a lost
answer is refused rather than doubled), and a run's one progress comment, edited in place at most every
``PROGRESS_EVERY`` seconds and finally saying how the run ended."""

from __future__ import annotations

import threading
import time
import uuid

from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from beflow.trackers.claims import ClaimLost, ClaimStore
from beflow.trackers.issue import Status, normalize_key
from beflow.trackers.linear_api import Api, LinearError
from beflow.trackers.wire import Wire

#: Edits of a run's progress comment are at most this often (seconds): people see the progress, Linear is spared.
PROGRESS_EVERY = 15.0


class _Created(Wire):
    commentCreate: wire.CommentCreated


class _Found(Wire):
    comment: wire.CommentOnIssue


class IssueComments:
    """The comments beflow writes on one team's issues; a run's comments are written under its lease."""

    def __init__(self, api: Api, leases: ClaimStore) -> None:
        self.api = api
        self._leases = leases
        self._progress: dict[str, tuple[str, float]] = {}  # issue key -> (the run's progress comment, last edit)
        self._lock = threading.Lock()

    def post(self, issue_id: str, text: str) -> wire.CommentOnIssue:
        """Post a comment once: its id is chosen here, so a retry of a create whose answer was lost is refused
        (the id is taken) instead of posting it twice; the comment is then read by its id."""
        cid = str(uuid.uuid4())
        variables = {"input": {"id": cid, "issueId": issue_id, "body": text.rstrip()}}
        try:
            data = self.api.mutate(q.COMMENT_CREATE, variables, retry=True)
        except LinearError as error:
            if wire.INVALID_INPUT not in error.codes:
                raise
            try:  # refused because the first try made it: it is there
                found = self.api.query(q.COMMENT_BY_ID, {"id": cid})
            except LinearError:
                raise error from None
            return wire.parse(_Found, found, "BeflowComment").comment
        return wire.parse(_Created, data, "BeflowCommentCreate").commentCreate.comment

    def edit(self, comment_id: str, text: str) -> None:
        """Edit a comment of beflow's (harmless twice: the same text)."""
        self.api.mutate(q.COMMENT_UPDATE, {"id": comment_id, "input": {"body": text.rstrip()}}, retry=True)

    def note(self, key: str, issue_id: str, before: Status, after: Status, note: str) -> None:
        """The comment that goes with a change of status: a run's start opens its progress comment, and its end
        is said once, in that comment when it has one."""
        key = normalize_key(key)
        if after == Status.IN_PROGRESS and before != after:
            self.start_progress(key, issue_id, note)
            return
        with self._lock:
            progress = self._progress.pop(key, None) if before == Status.IN_PROGRESS else None
        if progress is not None:
            try:
                self.edit(progress[0], note)  # the run's one comment now says how it ended
                return
            except LinearError as error:
                if wire.INVALID_INPUT not in error.codes:  # deleted by a person: say it in a new comment
                    raise
        self.post(issue_id, note)

    def start_progress(self, key: str, issue_id: str, text: str) -> None:
        made = self.post(issue_id, text)
        with self._lock:
            self._progress[normalize_key(key)] = (made.id, time.monotonic())

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress comment (at most every ``PROGRESS_EVERY`` seconds); whether it was edited."""
        key = normalize_key(key)
        with self._lock:
            held = self._progress.get(key)
            if held is None or (not force and time.monotonic() - held[1] < PROGRESS_EVERY):
                return False
            self._progress[key] = (held[0], time.monotonic())
        try:
            with self._leases.under_lease(key, prove=False):
                self.edit(held[0], text)
        except (LinearError, ClaimLost):
            return False  # progress is a courtesy: a failed edit never fails a run
        return True
