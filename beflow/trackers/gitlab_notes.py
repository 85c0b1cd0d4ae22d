"""The notes beflow writes on a GitLab issue: each posted once (a post whose answer was lost is found by a token of
its own), a run's one progress note, edited in place at most every ``PROGRESS_EVERY`` seconds and finally saying how
the run ended; and who of those who write notes may give beflow work (:class:`Members`).

Every note beflow writes ends with a hidden marker (an HTML comment GitLab does not show) and holds no line GitLab
would carry out as a quick action (:func:`beflow.trackers.gitlab_quoting.no_quick_actions`): a note is written as the
user of beflow's token, who may close, merge and approve.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from beflow.trackers import gitlab_wire as wire
from beflow.trackers.claims import ClaimLost, ClaimStore
from beflow.trackers.gitlab_api import Api, GitLabError, RateLimited
from beflow.trackers.gitlab_quoting import no_quick_actions
from beflow.trackers.issue import Status, normalize_key

#: The hidden marker at the end of every note beflow writes; the progress note of a run has its own.
MARKER = "<!-- beflow -->"
PROGRESS_MARKER = "<!-- beflow:progress -->"
#: The start every hidden marker of beflow's notes shares.
OWN_MARKER = "<!-- beflow"
#: Edits of a run's progress note are at most this often (seconds): people see the progress, GitLab is spared.
PROGRESS_EVERY = 15.0
#: How long a looked-up membership is remembered (seconds).
MEMBERSHIP_TTL = 600.0


class IssueNotes:
    """The notes of one project's issues that beflow writes (``call``: the tracker's way of calling the API; ``saw``:
    told of every note beflow wrote, as GitLab answered it)."""

    def __init__(self, api: Api, base: str, call: Callable[..., Any], leases: ClaimStore) -> None:
        self.api = api
        self._base = base
        self._call = call
        self._leases = leases
        self._progress: dict[str, tuple[int, float]] = {}  # issue key -> (the run's progress note, last edit)
        self._lock = threading.Lock()

    def _path(self, iid: int | str) -> str:
        return f"{self._base}/issues/{iid}/notes"

    def post(self, iid: int, text: str, marker: str = MARKER) -> wire.Note:
        """Post a note once: a POST whose answer was lost (no answer, a 5xx) may have been done, so before trying
        again the issue's notes are searched for this one (its marker carries a token of its own)."""
        token = f"<!-- beflow:post {secrets.token_hex(6)} -->"
        body = f"{no_quick_actions(text.rstrip())}\n\n{token}\n{marker}"
        path = self._path(iid)
        for attempt in range(3):
            try:
                data = self._call(self.api.request, "POST", path, json={"body": body}).data
                return wire.parse(wire.Note, data, f"POST {path}")
            except RateLimited:
                raise
            except GitLabError as error:
                if error.status is not None and error.status < 500:
                    raise
                found = self._find(iid, token)
                if found is not None:
                    return found
                if attempt == 2:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def _find(self, iid: int, token: str) -> wire.Note | None:
        path = self._path(iid)
        # The newest first: the note looked for is among the last ones.
        params = {"sort": "desc", "order_by": "created_at"}
        try:
            notes, _ = wire.read_each(wire.Note, self._call(self.api.paginate, path, params), f"GET {path}")
        except (GitLabError, wire.MalformedAnswer):
            return None
        return next((n for n in notes if token in n.text), None)

    def edit(self, iid: int | str, note_id: int, text: str, marker: str = PROGRESS_MARKER) -> None:
        body = f"{no_quick_actions(text.rstrip())}\n\n{marker}"
        self._call(self.api.request, "PUT", f"{self._path(iid)}/{note_id}", json={"body": body})

    def note(self, key: str, before: Status, after: Status, note: str) -> None:
        """Say ``note`` as the issue moves from ``before`` to ``after``: a run's start opens its progress note, and
        its end is said in that same note."""
        if after == Status.IN_PROGRESS and before != after:
            self.start_progress(key, note)
            return
        with self._lock:
            progress = self._progress.pop(key, None) if before == Status.IN_PROGRESS else None
        if progress is not None:
            try:
                self.edit(key, progress[0], note)  # the run's one note now says how it ended
                return
            except GitLabError as error:
                if error.status != 404:  # deleted by a person: say it in a new note
                    raise
        self.post(int(key), note)

    def start_progress(self, key: str, text: str) -> None:
        made = self.post(int(key), text, PROGRESS_MARKER)
        with self._lock:
            self._progress[key] = (made.id, time.monotonic())

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress note (at most every ``PROGRESS_EVERY`` seconds); whether it was edited."""
        key = normalize_key(key)
        with self._lock:
            held = self._progress.get(key)
            if held is None or (not force and time.monotonic() - held[1] < PROGRESS_EVERY):
                return False
            self._progress[key] = (held[0], time.monotonic())
        try:
            with self._leases.under_lease(key, prove=False):
                self.edit(key, held[0], text)
        except (GitLabError, ClaimLost):
            return False  # progress is a courtesy: a failed edit never fails a run
        return True


class Members:
    """Who may give beflow work on GitLab — a member of the project (its group's included) with Developer access or
    more, the user of beflow's token, a username of ``feedback.allow`` — and so whose words reach a prompt; the
    lookups it takes remembered :data:`MEMBERSHIP_TTL` seconds."""

    def __init__(self, api: Api, base: str, project: str, allow: list[str]) -> None:
        self.api = api
        self._base = base
        self.project = project
        self.allow = {name.lower() for name in allow}
        self._me: wire.User | None = None
        self._members: dict[int, tuple[wire.Member | None, float]] = {}
        self._lock = threading.Lock()

    def me(self) -> wire.User:
        """The user of beflow's token (read once)."""
        if self._me is None:
            self._me = wire.parse(wire.User, self.api.request("GET", "/user").data, "GET /user")
        return self._me

    def own(self, note: wire.Note) -> bool:
        """Whether ``note`` is beflow's: the token's user's (a marker proves nothing: anyone can write one, and a
        stranger's words shown as beflow's would reach a prompt)."""
        return note.author.id == self.me().id

    def why_not(self, note: wire.Note) -> str | None:
        """None when the author of ``note`` may give feedback (a review round's); else why not."""
        if OWN_MARKER in note.text:
            return "beflow's own note"
        if note.author.id == self.me().id:
            return f"{note.author.username} is the user of beflow's own token"
        return self.why_unread(note)

    def why_unread(self, note: wire.Note) -> str | None:
        """None when ``note`` (an issue's) may reach an agent's prompt: its author may give feedback, or is the user
        of beflow's own token; else why not. (A marker proves nothing here: anyone can write one.)"""
        author = note.author
        if author.username.lower() in self.allow or author.id == self.me().id:
            return None
        member = self.member(author.id)
        if member is not None and member.may_push:
            return None
        role = "not a member" if member is None else f"a member with access level {member.access_level}"
        return (
            f"{author.username} is {role} of {self.project} (Developer, 30, or more may give beflow work) "
            "and is not in feedback.allow"
        )

    def member(self, user_id: int) -> wire.Member | None:
        """User ``user_id`` as a member of the project, inherited membership included; None: no member (or the
        token may not see members). Remembered :data:`MEMBERSHIP_TTL` seconds."""
        with self._lock:
            held = self._members.get(user_id)
        if held is not None and time.monotonic() - held[1] < MEMBERSHIP_TTL:
            return held[0]
        path = f"{self._base}/members/all/{user_id}"
        found: wire.Member | None
        try:
            found = wire.parse(wire.Member, self.api.request("GET", path).data, f"GET {path}")
        except RateLimited:
            raise
        except GitLabError as error:
            if error.status not in (403, 404):
                raise
            found = None  # no member (404), or the token may not read members (403): not trusted
        except wire.MalformedAnswer:
            found = None  # a membership GitLab does not say as it should is no access
        with self._lock:
            self._members[user_id] = (found, time.monotonic())
        return found
