"""Feedback on GitHub: the reviews, review threads, mentions and failed checks on the pull request beflow opened
for an issue (and on the issue, when the tracker is the same repository's), as :class:`~beflow.feedback.Feedback`.

- **Who counts.** Only people with write access: ``author_association`` OWNER, MEMBER or COLLABORATOR, a login of
  ``feedback.allow``, or (for anyone else) a collaborator permission of ``write``, ``maintain`` or ``admin``, looked
  up once and remembered a while. beflow's own comments (its hidden marker) and the token's own user never count.
  What is left out, and why, is in :attr:`~beflow.feedback.Gathered.ignored`.
- **What counts.** Submitted reviews that request changes or comment, each inline comment of them (its file, line,
  diff hunk and the trusted part of its thread), conversation comments that mention ``feedback.trigger``, and with
  ``feedback.checks`` the failed check runs (with up to 20 annotations) and commit statuses of the head commit.
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

from beflow.config import Feedback as FeedbackSettings
from beflow.feedback import Feedback, Gathered, Ignored, ThreadComment, mentions, strip_hidden
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
#: The most annotations of one failed check run that reach a prompt.
MAX_ANNOTATIONS = 20
FEEDBACK_REVIEWS = frozenset({"CHANGES_REQUESTED", "COMMENTED"})
#: Reviews whose inline comments are not feedback: an approval's remarks, a dismissed review's, one not submitted.
NOT_FEEDBACK_REVIEWS = frozenset({"APPROVED", "DISMISSED", "PENDING"})
FAILED_CHECKS = frozenset({"failure", "timed_out", "action_required"})
FAILED_STATUSES = frozenset({"failure", "error"})
_NUMBER = re.compile(r"/(?:pull|pulls|issues)/(\d+)(?:[/#?]|$)")


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(value: Any) -> dt.datetime:
    if isinstance(value, str) and value:
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return dt.datetime.now(dt.UTC)


def _login(raw: dict[str, Any]) -> str:
    user = raw.get("user") or {}
    return str(user.get("login") or "ghost")


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

    def _list(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """A list endpoint's items, at most :data:`MAX_PAGES` pages of 100, each page a conditional request."""
        items: list[dict[str, Any]] = []
        url: str | None = path
        query: dict[str, Any] | None = {"per_page": 100, **params}
        for _ in range(MAX_PAGES):
            if url is None:
                break
            response = self.api.request("GET", url, params=query)
            items.extend(response.data or [])
            match = _NEXT.search(response.headers.get("link", ""))
            url, query = (match.group(1), None) if match else (None, None)
        return items


class Replies(_Client):
    """beflow's answers where feedback was given, each posted once, masked and inert."""

    def __init__(self, api: Api, repo: str, secrets: Callable[[], Iterable[str]]) -> None:
        super().__init__(api, repo)
        self._secrets = secrets

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` in its review thread (an inline piece), else in the conversation it was given in (the
        pull request, or the issue). ``body`` is masked (every secret beflow holds) and made inert (no mention or
        reference in it acts), and carries beflow's marker (so it never counts as feedback itself).

        A piece is answered once, whoever answers it: the answer carries a token of the piece, and one already
        there (another machine's, or this one's before it was stopped) is the answer."""
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
            comment = self._get(f"{self._base}/pulls/comments/{piece.reply_to}") or {}
            found = _NUMBER.search(str(comment.get("pull_request_url") or ""))
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
        return any(token in str(c.get("body") or "") for c in self._list(listing, {}))


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
        self.replies = Replies(api, repo, secrets)
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
                checks = self._checks(known.head, known.pull)
                return self._assemble(known, checks)
            read_from = _iso(self.api.now() - SAME_SECOND)
            pull = self._pull(branch)
            issue = self._get(f"{self._base}/issues/{number}") if number is not None else None
            ended: Any = None
            if pull is not None and pull.get("merged_at"):
                ended = "merged"
            elif (pull is not None and pull.get("state") == "closed") or (issue or {}).get("state") == "closed":
                ended = "closed"
            head = str((pull or {}).get("head", {}).get("sha") or "") or None
            known = _Known(read_from, int(pull["number"]) if pull else None, head, Gathered(ended=ended))
            if ended is None:
                pieces: list[Feedback] = []
                ignored: list[Ignored] = []
                if pull is not None:
                    self._reviews(int(pull["number"]), pieces, ignored)
                    self._conversation(int(pull["number"]), pieces, ignored)
                if number is not None and (pull is None or number != int(pull["number"])):
                    self._conversation(number, pieces, ignored)
                known.pieces = pieces
                known.gathered = Gathered(pieces=pieces, ignored=ignored)
            self._known[key] = known
            if ended is None and self.settings.checks and head is not None:
                return self._assemble(known, self._checks(head, known.pull))
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
            items = self._list(listing.path, {**listing.params, "since": listing.since})
            latest = listing.since
            for item in items:
                updated = str(item.get("updated_at") or "")
                latest = max(latest, updated)
                number = item.get("number")
                if number is None:
                    found = _NUMBER.search(str(item.get("issue_url") or item.get("pull_request_url") or ""))
                    number = int(found.group(1)) if found else None
                if number is not None:
                    self._updated[int(number)] = max(self._updated.get(int(number), ""), updated)
            # The watermark moves to the latest time shown (kept inclusive): the same answer next time, a 304.
            listing.since = latest
        self._listed_at = time.monotonic()

    def _pull(self, branch: str) -> dict[str, Any] | None:
        """The pull request of ``branch``: the open one, else the latest (merged or closed: the rounds end)."""
        owner = self.repo.split("/")[0]
        found = self._list(f"{self._base}/pulls", {"head": f"{owner}:{branch}", "state": "all"})
        if not found:
            return None
        open_ = [p for p in found if p.get("state") == "open"]
        chosen: dict[str, Any] = max(open_ or found, key=lambda p: int(p["number"]))
        return chosen

    def _reviews(self, pull: int, pieces: list[Feedback], ignored: list[Ignored]) -> None:
        reviews = self._list(f"{self._base}/pulls/{pull}/reviews", {})
        states = {int(r["id"]): str(r.get("state") or "") for r in reviews}
        for review in reviews:
            state = str(review.get("state") or "")
            body = strip_hidden(str(review.get("body") or ""))
            if state not in FEEDBACK_REVIEWS or (state == "COMMENTED" and not body.strip()):
                continue  # an approval; a comment-only review is its inline comments
            piece_id = f"review:{review['id']}"
            why = self.authors.why_not(review)
            if why is not None:
                ignored.append(Ignored(id=piece_id, author=_login(review), why=why))
                continue
            pieces.append(
                Feedback(
                    id=piece_id,
                    kind="review",
                    author=_login(review),
                    url=review.get("html_url"),
                    body=body,
                    created=_when(review.get("submitted_at")),
                    conversation=pull,
                )
            )
        comments = sorted(
            self._list(f"{self._base}/pulls/{pull}/comments", {}), key=lambda c: (str(c["created_at"]), c["id"])
        )
        threads: dict[int, list[dict[str, Any]]] = {}
        for comment in comments:
            threads.setdefault(int(comment.get("in_reply_to_id") or comment["id"]), []).append(comment)
        for root, thread in threads.items():
            shown: list[ThreadComment] = []  # the thread so far, as far as it may reach a prompt
            for comment in thread:
                body = strip_hidden(str(comment.get("body") or ""))
                why = self.authors.why_not(comment)
                review_state = states.get(int(comment.get("pull_request_review_id") or 0), "COMMENTED")
                if why is None or self.authors.own(comment):
                    if why is None and review_state not in NOT_FEEDBACK_REVIEWS:
                        pieces.append(
                            Feedback(
                                id=f"review-comment:{comment['id']}",
                                kind="inline",
                                author=_login(comment),
                                url=comment.get("html_url"),
                                body=body,
                                created=_when(comment.get("created_at")),
                                path=comment.get("path"),
                                line=comment.get("line") or comment.get("original_line"),
                                hunk=comment.get("diff_hunk"),
                                thread=list(shown),
                                reply_to=str(root),
                                conversation=pull,
                            )
                        )
                    shown.append(ThreadComment(author=_login(comment), body=body))
                elif review_state not in NOT_FEEDBACK_REVIEWS:
                    ignored.append(Ignored(id=f"review-comment:{comment['id']}", author=_login(comment), why=why))

    def _conversation(self, number: int, pieces: list[Feedback], ignored: list[Ignored]) -> None:
        """The comments of issue or pull request ``number`` that mention the trigger."""
        for comment in self._list(f"{self._base}/issues/{number}/comments", {}):
            body = strip_hidden(str(comment.get("body") or ""))
            if not mentions(body, self.settings.trigger):
                continue
            piece_id = f"issue-comment:{comment['id']}"
            why = self.authors.why_not(comment)
            if why is not None:
                ignored.append(Ignored(id=piece_id, author=_login(comment), why=why))
                continue
            pieces.append(
                Feedback(
                    id=piece_id,
                    kind="comment",
                    author=_login(comment),
                    url=comment.get("html_url"),
                    body=body,
                    created=_when(comment.get("created_at")),
                    conversation=number,
                )
            )

    def _checks(self, sha: str, pull: int | None) -> list[Feedback]:
        """The failed check runs and commit statuses of commit ``sha`` (two conditional requests, and one for the
        annotations of each failed run)."""
        pieces: list[Feedback] = []
        runs = self._get(f"{self._base}/commits/{sha}/check-runs", {"per_page": 100}) or {}
        for run in runs.get("check_runs") or []:
            if run.get("conclusion") not in FAILED_CHECKS:
                continue
            output = run.get("output") or {}
            lines = [f"{run.get('name')}: {run.get('conclusion')}"]
            lines += [str(output[k]) for k in ("title", "summary") if output.get(k)]
            if output.get("annotations_count"):
                notes = self._get(f"{self._base}/check-runs/{run['id']}/annotations", {"per_page": MAX_ANNOTATIONS})
                for note in (notes or [])[:MAX_ANNOTATIONS]:
                    where = f"{note.get('path')}:{note.get('start_line')}"
                    title = f" {note['title']}:" if note.get("title") else ""
                    lines.append(f"- {where} ({note.get('annotation_level')}){title} {note.get('message')}")
            app = run.get("app") or {}
            pieces.append(
                Feedback(
                    id=f"check-run:{run['id']}",
                    kind="check",
                    author=str(app.get("slug") or app.get("name") or run.get("name") or "check"),
                    url=run.get("html_url"),
                    body=strip_hidden("\n".join(lines)),
                    created=_when(run.get("completed_at")),
                    conversation=pull,
                )
            )
        combined = self._get(f"{self._base}/commits/{sha}/status", {"per_page": 100}) or {}
        for status in combined.get("statuses") or []:
            if status.get("state") not in FAILED_STATUSES:
                continue
            context = str(status.get("context") or "status")
            text = "\n".join(str(v) for v in (f"{context}: {status.get('state')}", status.get("description")) if v)
            pieces.append(
                Feedback(
                    id=f"status:{sha}:{context}",
                    kind="check",
                    author=context,
                    url=status.get("target_url"),
                    body=strip_hidden(text),
                    created=_when(status.get("updated_at")),
                    conversation=pull,
                )
            )
        return pieces
