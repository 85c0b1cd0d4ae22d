"""The comments beflow writes on a GitHub issue: each posted once (a post whose answer was lost is found by a token
of its own), and a run's one progress comment, edited in place at most every ``PROGRESS_EVERY`` seconds and
finally saying how the run ended; and who of those who comment may give beflow work (:class:`Authors`)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from beflow.feedback import trusted
from beflow.trackers import github_wire as wire
from beflow.trackers.claims import ClaimLost, ClaimStore
from beflow.trackers.github_api import Api, GitHubError, RateLimited
from beflow.trackers.issue import Status, normalize_key

#: The hidden marker at the end of every comment beflow writes; the progress comment of a run has its own.
MARKER = "<!-- beflow -->"
PROGRESS_MARKER = "<!-- beflow:progress -->"
#: Edits of a run's progress comment are at most this often (seconds): people see the progress, GitHub is spared.
PROGRESS_EVERY = 15.0
#: The start every hidden marker of beflow's comments shares (``<!-- beflow -->``, ``<!-- beflow:progress -->``).
OWN_MARKER = "<!-- beflow"
#: How long a looked-up collaborator permission is remembered (seconds).
PERMISSION_TTL = 600.0
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})


class IssueComments:
    """The comments of one repository's issues that beflow writes (``call``: the tracker's way of calling the API)."""

    def __init__(self, api: Api, base: str, call: Callable[..., Any], leases: ClaimStore) -> None:
        self.api = api
        self._base = base
        self._call = call
        self._leases = leases
        self._progress: dict[str, tuple[int, float]] = {}  # issue key -> (the run's progress comment, last edit)
        self._lock = threading.Lock()

    def post(self, number: int, text: str, marker: str = MARKER) -> wire.Comment:
        """Post a comment once: a POST whose answer was lost (no answer, a 5xx) may have been done, so before trying
        again the issue's comments are searched for this one (its marker carries a token of its own)."""
        token = f"<!-- beflow:post {secrets.token_hex(6)} -->"
        body = f"{text.rstrip()}\n\n{token}\n{marker}"
        path = f"{self._base}/issues/{number}/comments"
        for attempt in range(3):
            try:
                data = self._call(self.api.request, "POST", path, json={"body": body}).data
                return wire.parse(wire.Comment, data, f"POST {path}")
            except RateLimited:
                raise
            except GitHubError as error:
                if error.status is not None and error.status < 500:
                    raise
                found = self._find(number, token)
                if found is not None:
                    return found
                if attempt == 2:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def _find(self, number: int, token: str) -> wire.Comment | None:
        path = f"{self._base}/issues/{number}/comments"
        try:
            comments, _ = wire.read_each(wire.Comment, self._call(self.api.paginate, path), f"GET {path}")
        except (GitHubError, wire.MalformedAnswer):
            return None
        return next((c for c in reversed(comments) if token in c.text), None)

    def edit(self, comment_id: int, text: str, marker: str = PROGRESS_MARKER) -> None:
        body = f"{text.rstrip()}\n\n{marker}"
        self._call(self.api.request, "PATCH", f"{self._base}/issues/comments/{comment_id}", json={"body": body})

    def note(self, key: str, before: Status, after: Status, note: str) -> None:
        if after == Status.IN_PROGRESS and before != after:
            self.start_progress(key, note)
            return
        with self._lock:
            progress = self._progress.pop(key, None) if before == Status.IN_PROGRESS else None
        if progress is not None:
            try:
                self.edit(progress[0], note)  # the run's one comment now says how it ended
                return
            except GitHubError as error:
                if error.status != 404:  # deleted by a person: say it in a new comment
                    raise
        self.post(int(key), note)

    def start_progress(self, key: str, text: str) -> None:
        made = self.post(int(key), text, PROGRESS_MARKER)
        with self._lock:
            self._progress[key] = (made.id, time.monotonic())

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
        except (GitHubError, ClaimLost):
            return False  # progress is a courtesy: a failed edit never fails a run
        return True


class Authors:
    """Who may give feedback on GitHub (an owner, member or collaborator, one with write access, a login of
    ``feedback.allow``: beflow.codehosts.github_feedback), and so whose words reach a prompt; the lookups it takes
    remembered."""

    def __init__(self, api: Api, repo: str, allow: list[str]) -> None:
        self.api = api
        self._base = f"/repos/{repo}"
        self.allow = allow
        self._me: str | None = None
        self._permissions: dict[str, tuple[bool, float]] = {}

    def own(self, words: wire.Authored) -> bool:
        """Whether ``words`` are beflow's: the token's user's (a marker proves nothing: anyone can write one, and a
        stranger's words shown as beflow's would reach a prompt)."""
        return words.login.lower() == self.me().lower()

    def why_not(self, words: wire.Authored) -> str | None:
        """None when the author of ``words`` may give feedback; else why not."""
        login = words.login
        if OWN_MARKER in words.text:
            return "beflow's own comment"
        if login.lower() == self.me().lower():
            return f"{login} is the user of beflow's own token"
        why = trusted(words.author_association, login, self.allow)
        if why is None or self._may_write(login):
            return None
        return why

    def why_unread(self, words: wire.Authored) -> str | None:
        """None when ``words`` (an issue's comment) may reach an agent's prompt: its author may give feedback, or
        is the user of beflow's own token; else why not. (A marker proves nothing here: anyone can write one.)"""
        login = words.login
        why = trusted(words.author_association, login, self.allow)
        if why is None or login.lower() == self.me().lower() or self._may_write(login):
            return None
        return why

    def me(self) -> str:
        """The login of the token's user (read once)."""
        if self._me is None:
            self._me = wire.parse(wire.User, self._data("/user"), "GET /user").login or ""
        return self._me

    def _may_write(self, login: str) -> bool:
        """Whether ``login`` has write access by the repository's collaborator permission (an owner of an
        organisation whose membership is private shows no association), remembered :data:`PERMISSION_TTL`."""
        held = self._permissions.get(login.lower())
        if held is not None and time.monotonic() - held[1] < PERMISSION_TTL:
            return held[0]
        path = f"{self._base}/collaborators/{login}/permission"
        try:
            ok = wire.parse(wire.Permission, self._data(path), f"GET {path}").permission in WRITE_PERMISSIONS
        except RateLimited:
            raise
        except GitHubError as error:
            if error.status not in (403, 404):
                raise
            ok = False  # not a collaborator (404), or the token may not read permissions (403): not trusted
        except wire.MalformedAnswer:
            ok = False  # a permission GitHub does not say as it should is no write access
        self._permissions[login.lower()] = (ok, time.monotonic())
        return ok

    def _data(self, path: str) -> Any:
        return self.api.request("GET", path).data
