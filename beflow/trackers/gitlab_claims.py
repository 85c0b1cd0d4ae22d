"""GitLab's claims: a chain of internal notes, the :class:`~beflow.trackers.comment_leases.CommentChain` of a
:class:`~beflow.trackers.comment_leases.CommentLeases` store (which says how the chain is read and why two machines
never both hold an issue).

GitLab has no compare-and-swap on labels or issues, so a claim is a note on the issue — internal (``internal: true``),
written by the token's own user — whose hidden marker holds the lease as JSON. A note by anyone else, a public one
(a GitLab before internal notes makes every note public: claiming is then refused), a system note, or one whose text is
anything but a claim note is no claim. The ``updated_at`` a listing of issues shows moves when a note is posted, which
is what lets the store read an issue's notes only when it moved. An issue's notes are read 100 a page, at most
:data:`MAX_PAGES` pages (2,000 notes).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from beflow.config import GitLabTrackerSettings
from beflow.errors import BeflowError
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.comment_leases import SETTLE, CommentLeases, Lease, Link, Reading, link_of
from beflow.trackers.gitlab_api import Api, GitLabError, Unavailable

#: Notes are read 100 a page, at most this many pages (2,000 notes): an issue with more cannot be told free, and
#: counts as held (a claim on it is refused, naming the bound).
PER_PAGE = 100
MAX_PAGES = 20

#: The visible line of a claim note; the lease follows it in beflow's hidden marker.
VISIBLE = "beflow is holding this issue for a run."
CLAIM_MARKER = "<!-- beflow:claim "
_BODY = re.compile(r"\A" + re.escape(VISIBLE) + r"\n\n" + re.escape(CLAIM_MARKER) + r"(\{[^\n]*\}) -->\Z")


class ClaimNote(wire.Note):
    """A note as the claims read it: whether it is internal (older GitLab versions call it ``confidential``)."""

    internal: bool = False
    confidential: bool = False


def body_of(lease: Lease) -> str:
    """The text of a claim note holding ``lease`` (``<`` and ``>`` escaped: nothing in it can end the comment)."""
    data = json.dumps(lease.model_dump(), sort_keys=True).replace("<", "\\u003c").replace(">", "\\u003e")
    return f"{VISIBLE}\n\n{CLAIM_MARKER}{data} -->"


def is_claim_note(text: str) -> bool:
    """Whether ``text`` has the shape of a claim note (the tracker leaves them out of an issue's conversation)."""
    return _BODY.match(text) is not None


def claim_of(note: ClaimNote, me: int) -> Link | None:
    """``note`` as a claim, or None: only an internal note by the token's own user whose whole text is a claim note
    with a lease that reads is one (a stranger's imitation, or beflow's own words quoting a marker, are not)."""
    if note.author.id != me or note.system or not (note.internal or note.confidential):
        return None
    found = _BODY.match(note.text)
    if found is None:
        return None
    try:
        lease = Lease.model_validate(json.loads(found.group(1)), strict=True)
    except (ValueError, ValidationError):
        return None
    return link_of(note.id, lease, note.created_at, note.updated_at)


class ProjectNotes:
    """The claim notes of one project's issues: a :class:`~beflow.trackers.comment_leases.CommentChain`. ``call`` is
    the tracker's way of calling the API (its errors name the tracker's settings); ``me``: the token's user id, when
    the tracker already knows it (else ``GET /user``, once)."""

    forge = "GitLab"
    noun = "notes"
    unavailable = Unavailable

    def __init__(self, api: Api, base: str, call: Callable[..., Any], *, me: Callable[[], int] | None = None) -> None:
        self.api = api
        self._base = base
        self._call = call
        self._me_of = me
        self._me: int | None = None

    def user(self) -> int:
        """The token's user id (asked once)."""
        if self._me is None:
            if self._me_of is not None:
                self._me = self._me_of()
            else:
                self._me = wire.parse(wire.User, self._call(self.api.get, "/user"), "GET /user").id
        return self._me

    def _notes(self, key: str) -> str:
        return f"{self._base}/issues/{key}/notes"

    def most(self) -> int:
        return PER_PAGE * MAX_PAGES

    def read(self, key: str) -> Reading:
        """Issue ``key``'s claim notes (every page, up to :data:`MAX_PAGES`)."""
        me = self.user()
        path = self._notes(key)
        params = {"sort": "asc", "order_by": "created_at", "per_page": PER_PAGE}
        raw = self._call(self.api.paginate, path, params, max_pages=MAX_PAGES)
        now = self.api.now()
        notes, _ = wire.read_each(ClaimNote, raw, f"GET {path}")  # (a note that does not read is no claim)
        links = [link for note in notes if (link := claim_of(note, me)) is not None]
        return Reading(links, len(raw) < PER_PAGE * MAX_PAGES, now)

    def post(self, key: str, lease: Lease) -> tuple[int, dt.datetime]:
        path = self._notes(key)
        made = self._call(self.api.request, "POST", path, json={"body": body_of(lease), "internal": True})
        note = wire.parse(ClaimNote, made.data, f"POST {path}")
        if not (note.internal or note.confidential):  # (a GitLab before internal notes: anyone would see a claim)
            with contextlib.suppress(BeflowError):
                self.delete(key, note.id)
            raise GitLabError(
                f"GitLab made the claim note on issue {key} a public one: it has no internal notes",
                fix="beflow's claims on GitLab need internal notes (GitLab 15.0 or later).",
            )
        return note.id, note.created_at

    def edit(self, key: str, comment_id: int, lease: Lease) -> bool:
        try:
            self._call(self.api.request, "PUT", f"{self._notes(key)}/{comment_id}", json={"body": body_of(lease)})
        except GitLabError as error:
            if error.status != 404:
                raise
            return False
        return True

    def delete(self, key: str, comment_id: int) -> None:
        self._call(self.api.request, "DELETE", f"{self._notes(key)}/{comment_id}", ok=(404,))

    def deadline(self, at: float) -> contextlib.AbstractContextManager[None]:
        return self.api.deadline(at)


class GitLabLeases(CommentLeases):
    """The leases of one project's issues, as chains of internal notes (:class:`ProjectNotes`); ``settle``:
    :data:`~beflow.trackers.comment_leases.SETTLE` (shorter in unit tests, where the fake commits at once)."""

    def __init__(
        self,
        settings: GitLabTrackerSettings,
        api: Api,
        base: str,
        call: Callable[..., Any],
        *,
        me: Callable[[], int] | None = None,
        settle: float = SETTLE,
    ) -> None:
        self.notes = ProjectNotes(api, base, call, me=me)
        super().__init__(settings.lease, self.notes, settle=settle)

    def _user(self) -> int:
        return self.notes.user()
