"""The comments of a Jira issue: read as Markdown (claims left out, the words of one who may not give feedback kept out
of prompts), and written as ADF — a run's one progress comment edited in place at most every ``PROGRESS_EVERY``
seconds and finally saying how the run ended."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from beflow.errors import BeflowError
from beflow.trackers import jira_adf as adf
from beflow.trackers import jira_wire as wire
from beflow.trackers.claims import ClaimLost, ClaimStore
from beflow.trackers.issue import Comment, Status
from beflow.trackers.jira_api import Api, JiraError

#: Edits of a run's progress comment are at most this often (seconds).
PROGRESS_EVERY = 15.0
#: How long a person's right to edit the project's issues is remembered (seconds).
PERMISSION_TTL = 300.0


class IssueComments:
    """The comments of one project's issues; ``me``: the token's account id; ``allow``: ``feedback.allow``."""

    def __init__(
        self, api: Api, project: str, claims: Callable[[], ClaimStore], me: Callable[[], str], allow: list[str]
    ) -> None:
        self.api = api
        self.project = project
        self._claims = claims
        self._me = me
        self.allow = {a.lower() for a in allow}
        self._progress: dict[str, tuple[str, float]] = {}  # issue key -> (the run's progress comment id, last edit)
        self._permissions: dict[str, tuple[bool, float]] = {}
        self._lock = threading.Lock()

    # -- reading -----------------------------------------------------------------------------------------------------

    def read(self, raw: wire.Comment) -> Comment | None:
        """One comment as Markdown (None: nothing visible in it)."""
        text = adf.markdown(raw.body)
        if not text.strip():
            return None
        author = raw.author
        name = (author.displayName or author.accountId) if author else "unknown"
        return Comment(author=name, created=raw.created, text=text).withholding(self.why_unread(author))

    def why_unread(self, author: wire.User | None) -> str | None:
        """None when a comment by ``author`` may reach an agent's prompt: beflow's own account, one in
        ``feedback.allow`` (by account id), or one who may edit the project's issues; else why not."""
        if author is None:
            return "its author is unknown"
        if author.accountId == self._me() or author.accountId.lower() in self.allow:
            return None
        if self._may_edit(author.accountId):
            return None
        return (
            f"{author.displayName or author.accountId} may not edit the issues of {self.project} and is not in "
            "feedback.allow"
        )

    def _may_edit(self, account: str) -> bool:
        with self._lock:
            held = self._permissions.get(account)
        if held is not None and time.monotonic() - held[1] < PERMISSION_TTL:
            return held[0]
        params = {"accountId": account, "projectKey": self.project, "permissions": "EDIT_ISSUES"}
        try:
            found = self.api.get("/user/permission/search", params)
        except JiraError:
            return False  # (not known: the words stay out, as a stranger's)
        ok = isinstance(found, list) and any(isinstance(u, dict) and u.get("accountId") == account for u in found)
        with self._lock:
            self._permissions[account] = (ok, time.monotonic())
        return ok

    # -- writing -----------------------------------------------------------------------------------------------------

    def post(self, key: str, text: str) -> wire.Comment:
        path = f"/issue/{key}/comment"
        made = self.api.request("POST", path, json={"body": adf.fitting(text)})
        return wire.parse(wire.Comment, made.data, f"POST {path}")

    def edit(self, key: str, comment_id: str, text: str) -> None:
        self.api.request("PUT", f"/issue/{key}/comment/{comment_id}", json={"body": adf.fitting(text)})

    def note(self, key: str, before: Status, after: Status, note: str) -> None:
        """The comment that goes with a change of status: a run's start opens its progress comment, and its end is
        said once, in that comment when it has one."""
        if after == Status.IN_PROGRESS and before != after:
            self.start_progress(key, note)
            return
        with self._lock:
            progress = self._progress.pop(key, None) if before == Status.IN_PROGRESS else None
        if progress is not None:
            try:
                self.edit(key, progress[0], note)  # the run's one comment now says how it ended
                return
            except JiraError as error:
                if error.status != 404:  # deleted by a person: said in a new comment
                    raise
        self.post(key, note)

    def start_progress(self, key: str, text: str) -> None:
        made = self.post(key, text)
        with self._lock:
            self._progress[key] = (made.id, time.monotonic())

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress comment (at most every ``PROGRESS_EVERY`` seconds); whether it was edited."""
        with self._lock:
            held = self._progress.get(key)
            if held is None or (not force and time.monotonic() - held[1] < PROGRESS_EVERY):
                return False
            self._progress[key] = (held[0], time.monotonic())
        try:
            with self._claims().under_lease(key, prove=False):
                self.edit(key, held[0], text)
        except (BeflowError, ClaimLost):
            return False  # progress is a courtesy: a failed edit never fails a run
        return True
