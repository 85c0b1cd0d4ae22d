"""Feedback on GitLab: the discussions of the merge request beflow opened for an issue, and its failed pipeline, as
:class:`~beflow.feedback.Feedback`.

- **What counts.** Each note of an unresolved diff thread (a comment on a line of the change: its file, its line and
  the earlier notes of the thread), and each general note that mentions ``feedback.trigger``; with ``feedback.checks``
  the failed latest pipeline of the merge request's head commit (:mod:`beflow.codehosts.gitlab_pipelines`). A
  resolved thread is done with; GitLab's own notes (a push, a label) are nobody's words. Every text has had what a
  reader cannot see stripped (:func:`strip_hidden`).
- **Who counts.** Members of the project with the Developer role or above (their role looked up once and remembered a
  while: :class:`beflow.trackers.gitlab_notes.Members`), and the usernames of ``feedback.allow``. beflow's own notes
  (its hidden marker) and the token's own user never count. What is left out, and why, is in
  :attr:`~beflow.feedback.Gathered.ignored`.
- **Where the answers go.** Each piece is answered in its own thread, once across machines: the answer carries a
  token of the piece, and one already there is the answer. Answers are masked and act on nothing
  (:mod:`beflow.trackers.gitlab_quoting`).
- **Cheap polling.** GitLab's listings never answer 304, so what changed is read from at most two project-wide
  listings a poll, whatever the number of merge requests watched: the merge requests updated since a watermark (a
  note or a resolved thread updates its merge request) and, with ``feedback.checks``, the pipelines updated since
  another. A merge request's discussions are read again only when the listing shows it changed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from beflow.codehosts.gitlab_pipelines import Pipelines
from beflow.config import Feedback as FeedbackSettings
from beflow.feedback import Feedback, Gathered, Ignored, ThreadComment, mentions, mirrored, strip_hidden
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.gitlab_api import Api, GitLabError, RateLimited
from beflow.trackers.gitlab_notes import MARKER, Members
from beflow.trackers.gitlab_quoting import inert_markdown

#: The project-wide listings are read at most this often (seconds): every issue gathered in one poll shares them.
FRESH = 2.0
#: A listing's watermark starts this far back (seconds), for clocks and GitLab's own delays.
SLACK = 60.0
#: A merge request whose time is this close to (or after) the start of its last reading is read again.
SAME_SECOND = 1.0
#: The most pages (of 100) read of one listing in one poll: the work per poll stays bounded.
MAX_PAGES = 10
#: The prefixes of the ids of the pieces GitLab's merge requests give (:attr:`beflow.feedback.Feedback.id`).
GITLAB_KINDS = frozenset({"mr-note", "pipeline"})


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unreadable(unread: list[wire.Unread]) -> list[Ignored]:
    """Discussions GitLab gave in a shape of their own: left out (whose words they are is not known), and why."""
    return [
        Ignored(
            id=f"mr-discussion:{item.id or '?'}", author="unknown", why=f"GitLab's answer cannot be read: {item.why}"
        )
        for item in unread
    ]


class Replies:
    """beflow's answers in a merge request's threads, each posted once, masked and inert."""

    def __init__(self, api: Api, base: str, secrets: Callable[[], Iterable[str]], me: Callable[[], int]) -> None:
        self.api = api
        self._base = base
        self._secrets = secrets
        self._me = me  # the id of the token's user: the author of every answer of beflow's

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` in its thread (a failed pipeline, which has none: in a note of the merge request).
        ``body`` is masked (every secret beflow holds), made inert and carries beflow's marker (so it never counts
        as feedback itself). A piece is answered once, whoever answers it: the answer carries a token of the piece,
        and one already there by the token's user (another machine's, or this one's before it was stopped) is the
        answer."""
        if piece.id.partition(":")[0] not in GITLAB_KINDS:
            return  # another source's piece: not ours to answer on GitLab
        mr = piece.conversation
        if mr is None:
            raise GitLabError(f"feedback {piece.id} names no merge request to answer in")
        token = f"<!-- beflow:answer {hashlib.sha256(piece.id.encode()).hexdigest()[:16]} -->"
        payload = {"body": f"{self._clean(body).rstrip()}\n\n{token}\n{MARKER}"}
        if self._posted(mr, token):
            return
        if piece.reply_to:
            try:
                self._post(f"{self._base}/merge_requests/{mr}/discussions/{piece.reply_to}/notes", payload, mr, token)
                return
            except GitLabError as error:
                if error.status != 404:
                    raise
                # The thread is gone (its note deleted): the answer goes into the merge request's own notes.
        self._post(f"{self._base}/merge_requests/{mr}/notes", payload, mr, token)

    def mirror(self, mr: int, piece: Feedback, body: str) -> None:
        """Say in merge request ``mr``'s notes what beflow answered to ``piece``, given on beflow's page
        (:func:`~beflow.feedback.mirrored`): once, masked, inert and marked, as every answer."""
        token = f"<!-- beflow:answer {hashlib.sha256(piece.id.encode()).hexdigest()[:16]} -->"
        if self._posted(mr, token):
            return
        payload = {"body": f"{self._clean(mirrored(piece, body)).rstrip()}\n\n{token}\n{MARKER}"}
        self._post(f"{self._base}/merge_requests/{mr}/notes", payload, mr, token)

    def _clean(self, body: str) -> str:
        from beflow.mcp.redact import Redactor

        secrets = [self.api.token, *self._secrets()]
        return inert_markdown(Redactor(secrets=[s for s in secrets if s]).text(body))

    def _post(self, path: str, payload: dict[str, Any], mr: int, token: str) -> None:
        """POST a note; when its answer was lost (no answer, a 5xx) it may have been made, so the merge request is
        searched for ``token`` again before trying again."""
        for attempt in range(3):
            try:
                self.api.request("POST", path, json=payload)
                return
            except RateLimited:
                raise
            except GitLabError as error:
                if error.status is not None and error.status < 500:
                    raise
                try:
                    if self._posted(mr, token):
                        return
                except GitLabError:
                    pass
                if attempt == 2:
                    raise
                time.sleep(0.5 * (attempt + 1))

    def _posted(self, mr: int, token: str) -> bool:
        path = f"{self._base}/merge_requests/{mr}/discussions"
        threads, _ = wire.read_each(wire.Discussion, self.api.paginate(path, max_pages=MAX_PAGES), f"GET {path}")
        # The token is of the piece, which anyone can work out: in a note by anyone else it answers nothing.
        me = self._me()
        return any(token in note.text and note.author.id == me for thread in threads for note in thread.notes)


@dataclass
class _Known:
    """What was last read for one branch: from when, its merge request, and what it gave."""

    read_from: dt.datetime
    mr: wire.MergeRequest | None
    gathered: Gathered
    pieces: list[Feedback] = field(default_factory=list)


@dataclass
class _Listing:
    """One project-wide listing read ``updated_after`` its watermark, which moves to the latest time it showed."""

    path: str
    params: dict[str, Any]
    since: str | None = None


class GitLabFeedback:
    """The feedback on one project's merge requests, for review rounds (see the module's description)."""

    def __init__(
        self,
        api: Api,
        project: str,
        base: str,
        settings: FeedbackSettings,
        *,
        secrets: Callable[[], Iterable[str]] = lambda: (),
    ) -> None:
        self.api = api
        self._base = base
        self.settings = settings
        self.members = Members(api, base, project, settings.allow)
        self.replies = Replies(api, base, secrets, lambda: self.members.me().id)
        self.pipelines = Pipelines(api, base)
        self._lock = threading.RLock()
        order = {"order_by": "updated_at", "sort": "asc"}
        self._mrs = _Listing(f"{base}/merge_requests", {"state": "all", **order})
        self._runs = _Listing(f"{base}/pipelines", dict(order))
        self._listed_at = float("-inf")  # time.monotonic() of the last reading of the listings
        #: Source branch -> the latest time the listing showed for a merge request of it.
        self._updated: dict[str, dt.datetime] = {}
        self._known: dict[str, _Known] = {}

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` where it was given (:meth:`Replies.reply`)."""
        self.replies.reply(piece, body)

    def look_again(self) -> None:
        """Read the project's listings at the next gather, however recently they were read."""
        with self._lock:
            self._listed_at = float("-inf")

    def gather(self, key: str, branch: str) -> Gathered:
        """The feedback on the merge request of ``branch`` (see the module's description)."""
        with self._lock:
            self._refresh()
            known = self._known.get(branch)
            updated = self._updated.get(branch)
            if known is None or (updated is not None and updated >= known.read_from):
                known = self._read(branch)
                self._known[branch] = known
            mr = known.mr
            if not self.settings.checks or mr is None or known.gathered.ended or not mr.sha:
                return known.gathered
            checks = self.pipelines.failed(mr.sha, mr.iid)
            return Gathered(pieces=[*known.pieces, *checks], ignored=known.gathered.ignored)

    def _read(self, branch: str) -> _Known:
        """The merge request of ``branch`` and its feedback, read now."""
        read_from = dt.datetime.fromtimestamp(self.api.now() - SAME_SECOND, dt.UTC)
        mr = self._mr(branch)
        ended: Any = None
        if mr is not None and mr.state == "merged":
            ended = "merged"
        elif mr is not None and mr.state == "closed":
            ended = "closed"
        known = _Known(read_from, mr, Gathered(ended=ended))
        # (``locked``: being merged right now; its merge shows at the next look)
        if mr is not None and mr.state == "opened":
            pieces: list[Feedback] = []
            ignored: list[Ignored] = []
            self._discussions(mr, pieces, ignored)
            known.pieces = pieces
            known.gathered = Gathered(pieces=pieces, ignored=ignored)
        return known

    def _refresh(self) -> None:
        """Read the project-wide listings (at most every :data:`FRESH` seconds): which merge requests changed, and
        (with ``feedback.checks``) which pipelines."""
        if time.monotonic() - self._listed_at < FRESH:
            return
        listings = [self._mrs, self._runs] if self.settings.checks else [self._mrs]
        if any(listing.since is None for listing in listings):
            self.members.me()  # an answer first: its Date sets GitLab's clock, which the watermarks are on
        start = _iso(self.api.now() - SLACK)
        for listing in listings:
            listing.since = listing.since or start
            data = self.api.paginate(
                listing.path, {**listing.params, "updated_after": listing.since}, max_pages=MAX_PAGES
            )
            latest = listing.since
            if listing is self._mrs:
                mrs, _ = wire.read_each(wire.MergeRequest, data, f"GET {listing.path}")
                for mr in mrs:
                    latest = max(latest, _iso(mr.updated_at.timestamp()))
                    if not wire.own_branch(mr, mr.source_branch):
                        continue  # a fork's, whatever its branch is named
                    held = self._updated.get(mr.source_branch)
                    self._updated[mr.source_branch] = mr.updated_at if held is None else max(held, mr.updated_at)
            else:
                runs, _ = wire.read_each(wire.Pipeline, data, f"GET {listing.path}")
                for run in runs:
                    self.pipelines.saw(run)
                    if run.updated_at is not None:
                        latest = max(latest, _iso(run.updated_at.timestamp()))
            # The watermark moves to the latest time shown (GitLab's "updated after" keeps it: to the second).
            listing.since = latest
        self._listed_at = time.monotonic()

    def _mr(self, branch: str) -> wire.MergeRequest | None:
        """The merge request of ``branch``: the open one, else the latest (merged or closed: the rounds end)."""
        path = f"{self._base}/merge_requests"
        found = self.api.paginate(path, {"source_branch": branch, "state": "all"}, max_pages=1)
        mrs = [mr for mr in wire.parse_list(wire.MergeRequest, found, f"GET {path}") if wire.own_branch(mr, branch)]
        if not mrs:
            return None
        opened = [mr for mr in mrs if mr.state == "opened"]
        return max(opened or mrs, key=lambda mr: mr.iid)

    def _discussions(self, mr: wire.MergeRequest, pieces: list[Feedback], ignored: list[Ignored]) -> None:
        path = f"{self._base}/merge_requests/{mr.iid}/discussions"
        threads, unread = wire.read_each(wire.Discussion, self.api.paginate(path, max_pages=MAX_PAGES), f"GET {path}")
        ignored += _unreadable(unread)
        for thread in threads:
            notes = [note for note in thread.notes if not note.system]
            if not notes or (any(note.resolvable for note in notes) and thread.resolved):
                continue  # GitLab's own notes; a thread someone resolved
            first = notes[0]
            if first.position is not None:
                self._diff_thread(mr, thread.id, notes, first.position, pieces, ignored)
            else:
                self._general(mr, thread.id, notes, pieces, ignored)

    def _diff_thread(
        self,
        mr: wire.MergeRequest,
        thread: str,
        notes: list[wire.Note],
        position: wire.Position,
        pieces: list[Feedback],
        ignored: list[Ignored],
    ) -> None:
        """Each note of an unresolved thread on a line of the change, with the thread so far."""
        shown: list[ThreadComment] = []  # the thread so far, as far as it may reach a prompt
        for note in notes:
            body = strip_hidden(note.text)
            why = self.members.why_not(note)
            if why is None:
                pieces.append(
                    Feedback(
                        id=f"mr-note:{note.id}",
                        kind="inline",
                        author=note.author.username,
                        url=_note_url(note, mr),
                        body=body,
                        created=note.created_at,
                        path=position.path,
                        line=position.line,
                        thread=list(shown),
                        reply_to=thread,
                        conversation=mr.iid,
                    )
                )
            elif not self.members.own(note):
                ignored.append(Ignored(id=f"mr-note:{note.id}", author=note.author.username, why=why))
                continue
            shown.append(ThreadComment(author=note.author.username, body=body))

    def _general(
        self, mr: wire.MergeRequest, thread: str, notes: list[wire.Note], pieces: list[Feedback], ignored: list[Ignored]
    ) -> None:
        """The notes of a general thread (or a lone note) that mention the trigger."""
        for note in notes:
            body = strip_hidden(note.text)
            if not mentions(body, self.settings.trigger):
                continue
            why = self.members.why_not(note)
            if why is not None:
                ignored.append(Ignored(id=f"mr-note:{note.id}", author=note.author.username, why=why))
                continue
            pieces.append(
                Feedback(
                    id=f"mr-note:{note.id}",
                    kind="comment",
                    author=note.author.username,
                    url=_note_url(note, mr),
                    body=body,
                    created=note.created_at,
                    reply_to=thread,
                    conversation=mr.iid,
                )
            )


def _note_url(note: wire.Note, mr: wire.MergeRequest) -> str | None:
    """Where people see a note: its anchor on the merge request's page."""
    return f"{mr.web_url}#note_{note.id}" if mr.web_url else None
