"""Jira's claims: a chain of the account's own comments, the :class:`~beflow.trackers.comment_leases.CommentChain` of
a :class:`~beflow.trackers.comment_leases.CommentLeases` store, as on GitLab (the store says how the chain is read and
why two machines never both hold an issue).

Moving an issue to "In Progress" and reading it back is no claim: two watchers both move it, both read their own
write, the last writer wins. An issue property is no better (a PUT replaces it, with no version to compare), and Jira
has no compare-and-swap anywhere on an issue. What it has is comments with ids that grow, read back at once from
``GET /issue/{key}/comment`` (the listing is what is eventually consistent, not an issue's comments). So a claim is a
comment by the token's own account holding the lease in a code block (language :data:`LANGUAGE`) under one visible
line; a comment by anyone else, or one whose whole body is anything but that, is no claim. Renewals and releases edit
it without notifying anyone.

Posting a comment notifies the issue's watchers, and Jira's ``POST /comment`` has no ``notifyUsers``. Jira tells of a
comment only those who may see it, so with ``tracker.claim_visibility`` each claim comment is restricted to a project
role or group the account is in: the chain is the same (the account reads its own comments), the claim holds as
before, and no one outside that role or group is notified — or sees it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from beflow.config import JiraTrackerSettings
from beflow.trackers import jira_wire as wire
from beflow.trackers.comment_leases import SETTLE, CommentLeases, Lease, Link, Reading, link_of
from beflow.trackers.jira_api import Api, JiraError, Unavailable

#: Comments are read 100 a page, at most this many pages: an issue with more cannot be told free and counts as held.
PER_PAGE = 100
MAX_PAGES = 20

VISIBLE = "beflow is holding this issue for a run."
LANGUAGE = "beflow-claim"


def body_of(lease: Lease) -> dict[str, Any]:
    """The ADF document of a claim comment holding ``lease``."""
    data = json.dumps(lease.model_dump(), sort_keys=True)
    return {
        "type": "doc",
        "version": 1,
        "content": [
            {"type": "paragraph", "content": [{"type": "text", "text": VISIBLE}]},
            {"type": "codeBlock", "attrs": {"language": LANGUAGE}, "content": [{"type": "text", "text": data}]},
        ],
    }


def lease_in(body: Any) -> Lease | None:
    """The lease a comment's body holds, when the whole body is a claim's (else None)."""
    try:
        first, block = body["content"]
        if first["content"] != [{"type": "text", "text": VISIBLE}] or block["type"] != "codeBlock":
            return None
        if block.get("attrs", {}).get("language") != LANGUAGE:
            return None
        (text,) = block["content"]
        return Lease.model_validate(json.loads(text["text"]), strict=True)
    except (KeyError, TypeError, ValueError, ValidationError):
        return None


def is_claim(comment: wire.Comment) -> bool:
    """Whether ``comment`` has the shape of a claim (the tracker leaves them out of an issue's conversation; by
    anyone, since a stranger's imitation is no conversation either)."""
    return lease_in(comment.body) is not None


def claim_of(comment: wire.Comment, me: str) -> Link | None:
    """``comment`` as a claim, or None: only one by the token's own account whose whole body is a claim is one."""
    if comment.author is None or comment.author.accountId != me:
        return None
    lease = lease_in(comment.body)
    return None if lease is None else link_of(comment.number, lease, comment.created, comment.updated)


class IssueComments:
    """The claim comments of one project's issues: a :class:`~beflow.trackers.comment_leases.CommentChain`; ``me``:
    the token's account id (asked of Jira once, by the tracker)."""

    forge = "Jira"
    noun = "comments"
    unavailable = Unavailable

    def __init__(self, api: Api, me: Callable[[], str], visibility: dict[str, str] | None = None) -> None:
        self.api = api
        self._me = me
        #: Jira's ``visibility`` of each claim comment (None: everyone's).
        self.visibility = visibility

    def _payload(self, lease: Lease) -> dict[str, Any]:
        payload: dict[str, Any] = {"body": body_of(lease)}
        if self.visibility is not None:
            payload["visibility"] = self.visibility
        return payload

    def _comments(self, key: str) -> str:
        return f"/issue/{key}/comment"

    def listed(self, key: str) -> tuple[list[wire.Comment], bool]:
        """Issue ``key``'s comments, oldest first (up to :data:`MAX_PAGES` pages), and whether that is all of them;
        a comment that does not read is left out."""
        found: list[wire.Comment] = []
        path = self._comments(key)
        for page in range(MAX_PAGES):
            params = {"startAt": page * PER_PAGE, "maxResults": PER_PAGE, "orderBy": "created"}
            got = wire.parse(wire.CommentPage, self.api.get(path, params), f"GET {path}")
            for item in got.comments:
                with contextlib.suppress(ValidationError):
                    found.append(wire.Comment.model_validate(item))
            if not got.comments or page * PER_PAGE + len(got.comments) >= got.total:
                return found, True
        return found, False

    def most(self) -> int:
        return PER_PAGE * MAX_PAGES

    def read(self, key: str) -> Reading:
        me = self._me()
        comments, complete = self.listed(key)
        now = self.api.now()
        return Reading([link for c in comments if (link := claim_of(c, me)) is not None], complete, now)

    def post(self, key: str, lease: Lease) -> tuple[int, dt.datetime]:
        path = self._comments(key)
        made = self.api.request("POST", path, json=self._payload(lease))
        comment = wire.parse(wire.Comment, made.data, f"POST {path}")
        return comment.number, comment.created

    def edit(self, key: str, comment_id: int, lease: Lease) -> bool:
        path = f"{self._comments(key)}/{comment_id}"
        try:
            self.api.request("PUT", path, params={"notifyUsers": "false"}, json=self._payload(lease))
        except JiraError as error:
            if error.status != 404:
                raise
            return False
        return True

    def delete(self, key: str, comment_id: int) -> None:
        self.api.request("DELETE", f"{self._comments(key)}/{comment_id}", ok=(404,))

    def deadline(self, at: float) -> contextlib.AbstractContextManager[None]:
        return self.api.deadline(at)


class JiraLeases(CommentLeases):
    """The leases of one project's issues, as chains of the account's own comments (:class:`IssueComments`)."""

    def __init__(
        self, settings: JiraTrackerSettings, api: Api, me: Callable[[], str], *, settle: float = SETTLE
    ) -> None:
        seen = settings.claim_visibility
        self.comments = IssueComments(api, me, seen.model_dump() if seen is not None else None)
        super().__init__(settings.lease, self.comments, settle=settle)
