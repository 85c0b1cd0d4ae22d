"""Feedback on GitHub: the reviews, review threads, mentions and failed checks on the pull request beflow opened
for an issue (and on the issue, when the tracker is the same repository's), as :class:`~beflow.feedback.Feedback`.

- **Who counts.** Only people with write access: ``author_association`` OWNER, MEMBER or COLLABORATOR, a login of
  ``feedback.allow``, or (for anyone else) a collaborator permission of ``write``, ``maintain`` or ``admin``, looked
  up once and remembered a while. beflow's own comments (its hidden marker) and the token's own user never count.
  What is left out, and why, is in :attr:`~beflow.feedback.Gathered.ignored` (a piece GitHub gives in a shape beflow
  cannot read too).
- **What counts.** Submitted reviews that request changes or comment, each inline comment of them (its file, line,
  diff hunk and the trusted part of its thread), conversation comments that mention ``feedback.trigger``, and with
  ``feedback.checks`` the failed check runs (with up to 20 annotations) and commit statuses of the head commit
  (:mod:`beflow.codehosts.github_checks`).
  Approvals are not feedback. Every text has had what a reader cannot see stripped (:func:`strip_hidden`).
- **Cheap polling.** Three repository-wide listings (issues, issue comments and review comments, each ``since`` a
  watermark that only moves when something changed) are conditional requests: while nothing happens in the
  repository GitHub answers 304, which costs no rate limit, whatever the number of issues watched. An issue's own
  pull request, reviews and comments are read again only when those listings show it changed (and then as
  conditional requests too). Failed checks do not change a pull request's time, so with ``feedback.checks`` each
  issue costs two conditional requests a poll (free while its checks stay as they are).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from beflow.codehosts.github_checks import failed_checks, when
from beflow.config import Feedback as FeedbackSettings
from beflow.feedback import Feedback, Gathered, Ignored, ThreadComment, mentions, mirrored, strip_hidden
from beflow.trackers import github_wire as wire
from beflow.trackers.github_api import _NEXT, Api, GitHubError, RateLimited
from beflow.trackers.github_comments import MARKER, Authors
from beflow.trackers.quoting import inert

#: The repository-wide listings are read at most this often (seconds): every issue gathered in one poll shares them.
FRESH = 2.0
#: A listing's watermark starts this far back (seconds), for clocks and GitHub's own delays.
SLACK = 60.0
#: An issue whose time is this close to (or after) the start of its last reading is read again (GitHub's times are
#: to the second: a change in the same second as the reading would otherwise be missed).
SAME_SECOND = 1.0
#: The most pages (of 100) read of one list for one issue: the work per issue stays bounded.
MAX_PAGES = 10
FEEDBACK_REVIEWS = frozenset({"CHANGES_REQUESTED", "COMMENTED"})
#: Reviews whose inline comments are not feedback: an approval's remarks, a dismissed review's, one not submitted.
NOT_FEEDBACK_REVIEWS = frozenset({"APPROVED", "DISMISSED", "PENDING"})
_NUMBER = re.compile(r"/(?:pull|pulls|issues)/(\d+)(?:[/#?]|$)")
#: Before every time GitHub gives (a review comment without one sorts first).
_LONG_AGO = dt.datetime.min.replace(tzinfo=dt.UTC)


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unreadable(kind: str, unread: list[wire.Unread]) -> list[Ignored]:
    """Pieces GitHub gave in a shape of their own: left out (whose words they are is not known), and said why."""
    return [
        Ignored(
            id=f"{kind}:{'?' if item.id is None else item.id}",
            author="unknown",
            why=f"GitHub's answer for it cannot be read: {item.why}",
        )
        for item in unread
    ]


#: The prefixes of the ids of the pieces GitHub gives (:attr:`beflow.feedback.Feedback.id`).
GITHUB_KINDS = frozenset({"review", "review-comment", "issue-comment", "check-run", "status"})


@dataclass
class _Listing:
    """One repository-wide listing read ``since`` its watermark, which moves to the latest time it showed."""

    path: str
    params: dict[str, Any]
    since: str | None = None


@dataclass
class _Known:
    """What was last read for one issue: from when, its pull request, and what it gave."""

    read_from: str
    pull: int | None
    head: str | None
    gathered: Gathered
    pieces: list[Feedback] = field(default_factory=list)


class _Client:
    """What the parts below share: the API, the repository's path, and bounded, conditional reads."""

    def __init__(self, api: Api, repo: str) -> None:
        self.api = api
        self.repo = repo
        self._base = f"/repos/{repo}"

    # -- requests --------------------------------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.api.request("GET", path, params=params).data

    def _list(self, path: str, params: dict[str, Any]) -> list[Any]:
        """A list endpoint's items, at most :data:`MAX_PAGES` pages of 100, each page a conditional request (the
        items as GitHub gave them, for :mod:`~beflow.trackers.github_wire` to read)."""
        items: list[Any] = []
        url: str | None = path
        query: dict[str, Any] | None = {"per_page": 100, **params}
        for _ in range(MAX_PAGES):
            if url is None:
                break
            response = self.api.request("GET", url, params=query)
            items.extend(wire.listed(response.data, f"GET {path}"))
            match = _NEXT.search(response.headers.get("link", ""))
            url, query = (match.group(1), None) if match else (None, None)
        return items


class Replies(_Client):
    """beflow's answers where feedback was given, each posted once, masked and inert."""

    def __init__(self, api: Api, repo: str, secrets: Callable[[], Iterable[str]], me: Callable[[], str]) -> None:
        super().__init__(api, repo)
        self._secrets = secrets
        self._me = me  # the login of the token's user: the author of every answer of beflow's

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` in its review thread (an inline piece), else in the conversation it was given in (the
        pull request, or the issue). ``body`` is masked (every secret beflow holds) and made inert (no mention or
        reference in it acts), and carries beflow's marker (so it never counts as feedback itself).

        A piece is answered once, whoever answers it: the answer carries a token of the piece, and one already
        there by the token's user (another machine's, or this one's before it was stopped) is the answer."""
        if piece.id.partition(":")[0] not in GITHUB_KINDS:
            return  # another source's piece (the local tracker's --rework): not ours to answer on GitHub
        text = self._clean(body)
        answer = f"<!-- beflow:answer {hashlib.sha256(piece.id.encode()).hexdigest()[:16]} -->"
        number = piece.conversation or self._number_of(piece)
        if piece.kind == "inline" and piece.reply_to is not None:
            path = f"{self._base}/pulls/{number}/comments/{piece.reply_to}/replies"
            try:
                self._post_once(path, text, f"{self._base}/pulls/{number}/comments", answer)
                return
            except GitHubError as error:
                if error.status != 404 or number is None:
                    raise
                # The thread is gone (its comment deleted): the answer goes into the pull request's conversation.
        if number is None:
            raise GitHubError(f"feedback {piece.id} names no pull request or issue to answer in")
        conversation = f"{self._base}/issues/{number}/comments"
        self._post_once(conversation, text, conversation, answer)

    def mirror(self, number: int, piece: Feedback, body: str) -> None:
        """Say in pull request ``number``'s conversation what beflow answered to ``piece``, given on beflow's page
        (:func:`~beflow.feedback.mirrored`): once, masked, inert and marked, as every answer."""
        token = f"<!-- beflow:answer {hashlib.sha256(piece.id.encode()).hexdigest()[:16]} -->"
        conversation = f"{self._base}/issues/{number}/comments"
        self._post_once(conversation, self._clean(mirrored(piece, body)), conversation, token)

    def _clean(self, body: str) -> str:
        from beflow.mcp.redact import Redactor

        secrets = [self.api.token, *self._secrets()]
        return inert(Redactor(secrets=[s for s in secrets if s]).text(body))

    def _number_of(self, piece: Feedback) -> int | None:
        """The pull request or issue of a piece recorded without one: from its URL, or its review comment."""
        found = _NUMBER.search(piece.url or "")
        if found:
            return int(found.group(1))
        if piece.reply_to is not None:
            path = f"{self._base}/pulls/comments/{piece.reply_to}"
            comment = wire.parse(wire.Changed, self._get(path) or {}, f"GET {path}")
            found = _NUMBER.search(comment.pull_request_url or "")
            return int(found.group(1)) if found else None
        return None

    def _post_once(self, path: str, text: str, listing: str, token: str) -> None:
        """POST a comment carrying ``token`` once: not when ``listing`` has one already, and when a POST's answer
        was lost (no answer, a 5xx) it may have been made, so ``listing`` is searched again before trying again."""
        if self._posted(listing, token):
            return
        payload = {"body": f"{text.rstrip()}\n\n{token}\n{MARKER}"}
        for attempt in range(3):
            try:
                self.api.request("POST", path, json=payload)
                return
            except RateLimited:
                raise
            except GitHubError as error:
                if error.status is not None and error.status < 500:
                    raise
                try:
                    if self._posted(listing, token):
                        return
                except GitHubError:
                    pass
                if attempt == 2:
                    raise
                time.sleep(0.5 * (attempt + 1))

    def _posted(self, listing: str, token: str) -> bool:
        comments, _ = wire.read_each(wire.Authored, self._list(listing, {}), f"GET {listing}")
        # The token is of the piece, which anyone can work out: in a comment by anyone else it answers nothing.
        me = self._me().lower()
        return any(token in c.text and c.login.lower() == me for c in comments)


class GitHubFeedback(_Client):
    """The feedback on one repository's pull requests (and issues, with ``issues``), for review rounds."""

    def __init__(
        self,
        api: Api,
        repo: str,
        settings: FeedbackSettings,
        *,
        issues: bool = False,
        secrets: Callable[[], Iterable[str]] = lambda: (),
    ) -> None:
        super().__init__(api, repo)
        self.settings = settings
        #: Whether an issue's key is an issue number of this repository (the tracker is this repository's).
        self.issues = issues
        self.authors = Authors(api, repo, settings.allow)
        self.replies = Replies(api, repo, secrets, self.authors.me)
        self._lock = threading.RLock()
        self._listings = [
            _Listing(f"{self._base}/issues", {"state": "all", "sort": "updated", "direction": "asc"}),
            _Listing(f"{self._base}/issues/comments", {"sort": "updated", "direction": "asc"}),
            _Listing(f"{self._base}/pulls/comments", {"sort": "updated", "direction": "asc"}),
        ]
        self._listed_at = float("-inf")  # time.monotonic() of the last reading of the listings
        #: Issue or pull request number -> the latest time the listings showed for it.
        self._updated: dict[int, str] = {}
        self._known: dict[str, _Known] = {}

    # -- gathering -------------------------------------------------------------------------------------------------

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` where it was given (:meth:`Replies.reply`)."""
        self.replies.reply(piece, body)

    def look_again(self) -> None:
        """Read the repository's listings at the next gather, however recently they were read (a person asked to
        refresh; a poll that must see every change of the last :data:`FRESH` seconds)."""
        with self._lock:
            self._listed_at = float("-inf")

    def gather(self, key: str, branch: str) -> Gathered:
        """The feedback on issue ``key`` and the pull request of ``branch`` (see the module's description)."""
        with self._lock:
            self._refresh()
            known = self._known.get(key)
            number = int(key) if self.issues and key.isdigit() else None
            if known is not None and known.pull is not None and not self._changed(known, number):
                if not self.settings.checks or known.head is None or known.gathered.ended:
                    return known.gathered
                checks = failed_checks(self.api, self._base, known.head, known.pull)
                return self._assemble(known, checks)
            read_from = _iso(self.api.now() - SAME_SECOND)
            pull = self._pull(branch)
            issue = self._issue(number) if number is not None else None
            ended: Any = None
            if pull is not None and pull.merged_at is not None:
                ended = "merged"
            elif (pull is not None and pull.state == "closed") or (issue is not None and issue.state == "closed"):
                ended = "closed"
            head = (pull.head.sha if pull is not None and pull.head is not None else None) or None
            known = _Known(read_from, pull.number if pull else None, head, Gathered(ended=ended))
            if ended is None:
                pieces: list[Feedback] = []
                ignored: list[Ignored] = []
                if pull is not None:
                    self._reviews(pull.number, pieces, ignored)
                    self._conversation(pull.number, pieces, ignored)
                if number is not None and (pull is None or number != pull.number):
                    self._conversation(number, pieces, ignored)
                known.pieces = pieces
                known.gathered = Gathered(pieces=pieces, ignored=ignored)
            self._known[key] = known
            if ended is None and self.settings.checks and head is not None:
                return self._assemble(known, failed_checks(self.api, self._base, head, known.pull))
            return known.gathered

    def _assemble(self, known: _Known, checks: list[Feedback]) -> Gathered:
        return Gathered(pieces=[*known.pieces, *checks], ignored=known.gathered.ignored)

    def _changed(self, known: _Known, number: int | None) -> bool:
        """Whether the listings show the issue or its pull request changed since it was last read."""
        numbers = [n for n in (known.pull, number) if n is not None]
        return any(self._updated.get(n, "") >= known.read_from for n in numbers)

    def _refresh(self) -> None:
        """Read the repository-wide listings (at most every :data:`FRESH` seconds): which issues and pull requests
        changed. While nothing changed each is one conditional request that GitHub answers 304, for free."""
        if time.monotonic() - self._listed_at < FRESH:
            return
        if any(listing.since is None for listing in self._listings):
            self.authors.me()  # an answer first: its Date sets GitHub's clock, which the watermarks are on
        start = _iso(self.api.now() - SLACK)
        for listing in self._listings:
            listing.since = listing.since or start
            data = self._list(listing.path, {**listing.params, "since": listing.since})
            # An item GitHub gives in a shape of its own says nothing changed; the issue's next change shows.
            items, _ = wire.read_each(wire.Changed, data, f"GET {listing.path}")
            latest = listing.since
            for item in items:
                updated = item.updated_at or ""
                latest = max(latest, updated)
                number = item.number
                if number is None:
                    found = _NUMBER.search(item.issue_url or item.pull_request_url or "")
                    number = int(found.group(1)) if found else None
                if number is not None:
                    self._updated[number] = max(self._updated.get(number, ""), updated)
            # The watermark moves to the latest time shown (kept inclusive): the same answer next time, a 304.
            listing.since = latest
        self._listed_at = time.monotonic()

    def _pull(self, branch: str) -> wire.Pull | None:
        """The pull request of ``branch``: the open one, else the latest (merged or closed: the rounds end)."""
        owner = self.repo.split("/")[0]
        path = f"{self._base}/pulls"
        answer = self._list(path, {"head": f"{owner}:{branch}", "state": "all"})
        found = wire.parse_list(wire.Pull, answer, f"GET {path}")
        if not found:
            return None
        open_ = [p for p in found if p.state == "open"]
        return max(open_ or found, key=lambda p: p.number)

    def _issue(self, number: int) -> wire.IssueState:
        path = f"{self._base}/issues/{number}"
        return wire.parse(wire.IssueState, self._get(path), f"GET {path}")

    def _reviews(self, pull: int, pieces: list[Feedback], ignored: list[Ignored]) -> None:
        path = f"{self._base}/pulls/{pull}/reviews"
        reviews, unread = wire.read_each(wire.Review, self._list(path, {}), f"GET {path}")
        ignored += _unreadable("review", unread)
        states = {r.id: r.state or "" for r in reviews}
        for review in reviews:
            state = review.state or ""
            body = strip_hidden(review.text)
            if state not in FEEDBACK_REVIEWS or (state == "COMMENTED" and not body.strip()):
                continue  # an approval; a comment-only review is its inline comments
            piece_id = f"review:{review.id}"
            why = self.authors.why_not(review)
            if why is not None:
                ignored.append(Ignored(id=piece_id, author=review.login, why=why))
                continue
            pieces.append(
                Feedback(
                    id=piece_id,
                    kind="review",
                    author=review.login,
                    url=review.html_url,
                    body=body,
                    created=when(review.submitted_at),
                    conversation=pull,
                )
            )
        path = f"{self._base}/pulls/{pull}/comments"
        listed, unread = wire.read_each(wire.ReviewComment, self._list(path, {}), f"GET {path}")
        ignored += _unreadable("review-comment", unread)
        threads: dict[int, list[wire.ReviewComment]] = {}
        for comment in sorted(listed, key=lambda c: (c.created_at or _LONG_AGO, c.id)):
            threads.setdefault(comment.in_reply_to_id or comment.id, []).append(comment)
        for root, thread in threads.items():
            shown: list[ThreadComment] = []  # the thread so far, as far as it may reach a prompt
            for comment in thread:
                body = strip_hidden(comment.text)
                why = self.authors.why_not(comment)
                review_state = states.get(comment.pull_request_review_id or 0, "COMMENTED")
                if why is None or self.authors.own(comment):
                    if why is None and review_state not in NOT_FEEDBACK_REVIEWS:
                        pieces.append(
                            Feedback(
                                id=f"review-comment:{comment.id}",
                                kind="inline",
                                author=comment.login,
                                url=comment.html_url,
                                body=body,
                                created=when(comment.created_at),
                                path=comment.path,
                                line=comment.line or comment.original_line,
                                hunk=comment.diff_hunk,
                                thread=list(shown),
                                reply_to=str(root),
                                conversation=pull,
                            )
                        )
                    shown.append(ThreadComment(author=comment.login, body=body))
                elif review_state not in NOT_FEEDBACK_REVIEWS:
                    ignored.append(Ignored(id=f"review-comment:{comment.id}", author=comment.login, why=why))

    def _conversation(self, number: int, pieces: list[Feedback], ignored: list[Ignored]) -> None:
        """The comments of issue or pull request ``number`` that mention the trigger."""
        path = f"{self._base}/issues/{number}/comments"
        comments, unread = wire.read_each(wire.Comment, self._list(path, {}), f"GET {path}")
        ignored += _unreadable("issue-comment", unread)
        for comment in comments:
            body = strip_hidden(comment.text)
            if not mentions(body, self.settings.trigger):
                continue
            piece_id = f"issue-comment:{comment.id}"
            why = self.authors.why_not(comment)
            if why is not None:
                ignored.append(Ignored(id=piece_id, author=comment.login, why=why))
                continue
            pieces.append(
                Feedback(
                    id=piece_id,
                    kind="comment",
                    author=comment.login,
                    url=comment.html_url,
                    body=body,
                    created=when(comment.created_at),
                    conversation=number,
                )
            )
