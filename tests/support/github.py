"""A fake GitHub REST server for the tests: real HTTP on 127.0.0.1, the shapes of GitHub's API, and every request
and answer checked against GitHub's published OpenAPI description (``tests/support/openapi.py``).

It keeps one repository's issues, comments, labels, pull requests and git refs (enough of the git database for
claims), the feedback on pull requests (reviews, review comments and their threads, check runs with annotations,
commit statuses, collaborators' permissions), answers conditional requests with ETags (a 304 costs no rate limit, as
on GitHub: :attr:`FakeGitHub.rate_used` counts what did), paginates with ``Link`` headers, and can be told to fail:
rate limits, 5xx, a revoked token, a renamed repository.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

if TYPE_CHECKING:
    from beflow.trackers.github import GitHubTracker
    from tests.support.projects import AutoProject

import pytest

from tests.support import watching
from tests.support.openapi import Spec, spec
from tests.support.waiting import eventually

TOKEN = "ghp_faketoken0123456789abcdefghijklmnopqr"
OWNER, NAME = "octo", "hello"


@dataclass
class Fault:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    only: str | None = None  # a method, or None for every request
    #: Only requests whose path starts with this.
    prefix: str = ""
    #: The request is done first, and then answered with this status: an answer lost on the way back.
    after: bool = False


@dataclass
class Delay:
    """Requests (of ``method``, on paths starting with ``prefix``, whose body holds ``body``) held this long before
    they are handled; the next ``times`` of them (None: all)."""

    method: str
    prefix: str
    seconds: float
    times: int | None = 1
    body: str = ""


@dataclass
class Tamper:
    """Answers (of ``method``, on paths starting with ``prefix``) changed by ``change`` on the way out, as a broken
    proxy or a GitHub that drifted from its description would give them; ``served`` counts them."""

    method: str
    prefix: str
    change: Callable[[Any], Any]
    served: int = 0


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int
    headers: dict[str, str]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeGitHub:
    """The state of one repository and what the server saw."""

    def __init__(self, api: Spec) -> None:
        self.spec = api
        self.repo = f"{OWNER}/{NAME}"
        self.tokens = {TOKEN: "octocat"}
        self.lock = threading.RLock()
        self.issues: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, dict[str, Any]] = {}  # comment id -> raw (with "issue" number kept aside)
        self.comment_issue: dict[int, int] = {}
        self.labels: dict[str, dict[str, Any]] = {}
        self.refs: dict[str, str] = {}
        self.commits: dict[str, dict[str, Any]] = {}
        self.trees: dict[str, dict[str, Any]] = {}
        self.pulls: dict[int, dict[str, Any]] = {}
        #: Pull requests merged through the API, with the method asked for.
        self.merged: dict[int, str] = {}
        #: Feedback on pull requests: review id -> raw (``pull`` number kept aside), review comment id -> raw.
        self.reviews: dict[int, dict[str, Any]] = {}
        self.review_pull: dict[int, int] = {}
        self.review_comments: dict[int, dict[str, Any]] = {}
        self.review_comment_pull: dict[int, int] = {}
        #: Check runs and commit statuses by commit, annotations by check run id.
        self.check_runs: dict[str, list[dict[str, Any]]] = {}
        self.annotations: dict[int, list[dict[str, Any]]] = {}
        self.statuses: dict[str, list[dict[str, Any]]] = {}
        #: Issue dependencies: issue number -> the numbers of the issues it is blocked by.
        self.blocked_by: dict[int, list[int]] = {}
        #: Collaborators' permission (``admin``, ``maintain``, ``write``, ``triage``, ``read``); others: ``none``.
        self.permissions: dict[str, str] = {}
        #: Requests that counted against the rate limit (a 304 does not, as on GitHub; nor a refused token).
        self.rate_used = 0
        self.numbers = itertools.count(1)
        self.ids = itertools.count(1000)
        self.faults: list[Fault] = []
        self.delays: list[Delay] = []
        self.tampers: list[Tamper] = []
        self.seen: list[Seen] = []
        self.violations: list[str] = []
        self.rate_remaining = 5000
        self.default_branch = "main"
        self.server: ThreadingHTTPServer | None = None
        #: When each held request arrived (time.time()).
        self.held: list[float] = []
        #: Set to answer every held request at once (the fixture does, on the way out).
        self.released = threading.Event()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # -- setting up --------------------------------------------------------------------------------------------------

    def user(self, login: str) -> dict[str, Any]:
        return self.spec.example(
            "/components/schemas/simple-user",
            login=login,
            id=abs(hash(login)) % 10**6,
            type="User",
            html_url=f"https://github.com/{login}",
        )

    def label(self, name: str, color: str = "ededed") -> dict[str, Any]:
        with self.lock:
            if name not in self.labels:
                self.labels[name] = self.spec.example(
                    "/components/schemas/label",
                    id=next(self.ids),
                    name=name,
                    color=color,
                    description=None,
                    url=f"https://api.github.com/repos/{self.repo}/labels/{quote(name)}",
                    default=False,
                )
            return self.labels[name]

    def add_issue(
        self,
        title: str,
        *,
        labels: list[str] = (),
        body: str | None = "",
        state: str = "open",  # type: ignore[assignment]
        author: str = "alice",
        state_reason: str | None = None,
        pull: bool = False,
        association: str = "OWNER",
    ) -> int:
        with self.lock:
            number = next(self.numbers)
            now = _now()
            raw = self.spec.example(
                "/components/schemas/issue",
                id=next(self.ids),
                number=number,
                title=title,
                body=body,
                state=state,
                state_reason=state_reason,
                labels=[self.label(n) for n in labels],
                user=self.user(author),
                created_at=now,
                updated_at=now,
                closed_at=now if state == "closed" else None,
                html_url=f"https://github.com/{self.repo}/issues/{number}",
                repository_url=f"https://api.github.com/repos/{self.repo}",
                comments=0,
                author_association=association,
            )
            if pull:
                raw["pull_request"] = {"url": None, "html_url": None, "diff_url": None, "patch_url": None}
            self.issues[number] = raw
            return number

    def add_comment(
        self, number: int, body: str, author: str = "alice", *, association: str = "OWNER"
    ) -> dict[str, Any]:
        with self.lock:
            cid = next(self.ids)
            now = _now()
            raw = self.spec.example(
                "/components/schemas/issue-comment",
                id=cid,
                body=body,
                user=self.user(author),
                created_at=now,
                updated_at=now,
                issue_url=f"https://api.github.com/repos/{self.repo}/issues/{number}",
                html_url=f"https://github.com/{self.repo}/{'pull' if number in self.pulls else 'issues'}/{number}"
                f"#issuecomment-{cid}",
                author_association=association,
            )
            self.comments[cid] = raw
            self.comment_issue[cid] = number
            self.issues[number]["comments"] += 1
            self._touch(number)
            return raw

    def assign(self, number: int, login: str) -> None:
        """Assign issue ``number`` to ``login``."""
        with self.lock:
            self.issues[number]["assignees"] = [self.user(login)]
            self.issues[number]["assignee"] = self.user(login)
            self._touch(number)

    def block(self, number: int, *by: int) -> None:
        """Issue ``number`` is blocked by the issues ``by`` (GitHub's issue dependencies)."""
        with self.lock:
            self.blocked_by.setdefault(number, []).extend(by)

    def _summarized(self, raw: dict[str, Any]) -> dict[str, Any]:
        """``raw`` with its dependencies summary as GitHub counts it now (``blocked_by``: the open blockers)."""
        blockers = [self.issues[n] for n in self.blocked_by.get(raw["number"], [])]
        blocking = [n for n, by in self.blocked_by.items() if raw["number"] in by]
        return {
            **raw,
            "issue_dependencies_summary": {
                "blocked_by": sum(1 for b in blockers if b["state"] == "open"),
                "total_blocked_by": len(blockers),
                "blocking": sum(1 for n in blocking if self.issues[n]["state"] == "open"),
                "total_blocking": len(blocking),
            },
        }

    def _issues_list_dependencies_blocked_by(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        raw = self._issue(params)
        if raw is None:
            return 404, {}, _not_found()
        found = [self._summarized(self.issues[n]) for n in self.blocked_by.get(raw["number"], [])]
        return self._page(f"/repos/{self.repo}/issues/{raw['number']}/dependencies/blocked_by", query, found)

    def _touch(self, number: int) -> None:
        self.issues[number]["updated_at"] = _now()
        if number in self.pulls:
            self.pulls[number]["updated_at"] = self.issues[number]["updated_at"]

    # -- feedback on pull requests -----------------------------------------------------------------------------------

    def submit_review(
        self,
        number: int,
        body: str = "",
        *,
        state: str = "CHANGES_REQUESTED",
        author: str = "alice",
        association: str = "OWNER",
        comments: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """A review submitted on pull request ``number`` with its inline comments (each ``path``, ``line``,
        ``body``, optionally ``hunk``), as a person does it on the page; the review."""
        with self.lock:
            pull = self.pulls[number]
            rid = next(self.ids)
            review = self.spec.example(
                "/components/schemas/pull-request-review",
                id=rid,
                user=self.user(author),
                body=body,
                state=state,
                commit_id=pull["head"]["sha"],
                html_url=f"https://github.com/{self.repo}/pull/{number}#pullrequestreview-{rid}",
                pull_request_url=f"https://api.github.com/repos/{self.repo}/pulls/{number}",
                _links={"html": {"href": "https://github.com/x"}, "pull_request": {"href": "https://github.com/x"}},
                author_association=association,
                submitted_at=_now(),
            )
            self.reviews[rid] = review
            self.review_pull[rid] = number
            for comment in comments:
                self.add_review_comment(
                    number,
                    comment["body"],
                    path=comment["path"],
                    line=comment["line"],
                    hunk=comment.get("hunk"),
                    author=author,
                    association=association,
                    review=rid,
                )
            self._touch(number)
            return review

    def add_review_comment(
        self,
        number: int,
        body: str,
        *,
        path: str = "",
        line: int | None = None,
        hunk: str | None = None,
        author: str = "alice",
        association: str = "OWNER",
        review: int | None = None,
        in_reply_to: int | None = None,
    ) -> dict[str, Any]:
        """One review comment on pull request ``number``: on ``path`` at ``line``, or a reply in the thread of
        ``in_reply_to`` (its path, line and hunk, as GitHub answers). A reply outside a review is a review of its
        own that comments, as on GitHub."""
        with self.lock:
            pull = self.pulls[number]
            if in_reply_to is not None:
                root = self.review_comments[in_reply_to]
                path, line, hunk = root["path"], root["line"], root["diff_hunk"]
                in_reply_to = root.get("in_reply_to_id") or in_reply_to
            if review is None:
                review = self.submit_review(number, "", state="COMMENTED", author=author, association=association)["id"]
            cid = next(self.ids)
            raw = self.spec.example(
                "/components/schemas/pull-request-review-comment",
                url=f"https://api.github.com/repos/{self.repo}/pulls/comments/{cid}",
                id=cid,
                pull_request_review_id=review,
                diff_hunk=hunk or f"@@ -1,3 +1,3 @@ {path}",
                path=path,
                line=line,
                original_line=line,
                side="RIGHT",
                commit_id=pull["head"]["sha"],
                original_commit_id=pull["head"]["sha"],
                user=self.user(author),
                body=body,
                created_at=_now(),
                updated_at=_now(),
                html_url=f"https://github.com/{self.repo}/pull/{number}#discussion_r{cid}",
                pull_request_url=f"https://api.github.com/repos/{self.repo}/pulls/{number}",
                author_association=association,
                _links={
                    "self": {"href": "https://github.com/x"},
                    "html": {"href": "https://github.com/x"},
                    "pull_request": {"href": "https://github.com/x"},
                },
            )
            if in_reply_to is not None:
                raw["in_reply_to_id"] = in_reply_to
            self.review_comments[cid] = raw
            self.review_comment_pull[cid] = number
            self._touch(number)
            return raw

    def review_comments_of(self, number: int) -> list[dict[str, Any]]:
        return [c for cid, c in self.review_comments.items() if self.review_comment_pull[cid] == number]

    def add_check_run(
        self,
        sha: str,
        name: str,
        *,
        conclusion: str | None = "failure",
        title: str | None = None,
        summary: str | None = None,
        annotations: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """A completed check run on commit ``sha`` (``conclusion`` None: still in progress) with its annotations
        (each ``path``, ``line``, ``message``, optionally ``level``)."""
        with self.lock:
            rid = next(self.ids)
            run = self.spec.example(
                "/components/schemas/check-run",
                id=rid,
                head_sha=sha,
                name=name,
                url=f"https://api.github.com/repos/{self.repo}/check-runs/{rid}",
                html_url=f"https://github.com/{self.repo}/runs/{rid}",
                details_url=f"https://ci.example/runs/{rid}",
                status="completed" if conclusion else "in_progress",
                conclusion=conclusion,
                started_at=_now(),
                completed_at=_now() if conclusion else None,
                output={
                    "title": title,
                    "summary": summary,
                    "text": None,
                    "annotations_count": len(annotations),
                    "annotations_url": f"https://api.github.com/repos/{self.repo}/check-runs/{rid}/annotations",
                },
                app=None,
                pull_requests=[],
            )
            self.check_runs.setdefault(sha, []).append(run)
            self.annotations[rid] = [
                self.spec.example(
                    "/components/schemas/check-annotation",
                    path=a["path"],
                    blob_href=f"https://github.com/{self.repo}/blob/{sha}/{a['path']}",
                    start_line=a["line"],
                    end_line=a["line"],
                    start_column=None,
                    end_column=None,
                    annotation_level=a.get("level", "failure"),
                    title=a.get("title"),
                    message=a["message"],
                    raw_details=None,
                )
                for a in annotations
            ]
            return run

    def add_status(self, sha: str, context: str, state: str = "failure", description: str = "") -> dict[str, Any]:
        """A commit status on ``sha`` (``error``, ``failure``, ``pending``, ``success``); the latest of a context
        replaces the one before, as in GitHub's combined status."""
        with self.lock:
            status = self.spec.example(
                "/components/schemas/simple-commit-status",
                description=description,
                id=next(self.ids),
                node_id="x",
                state=state,
                context=context,
                target_url=f"https://ci.example/{context}",
                avatar_url=None,
                url=f"https://api.github.com/repos/{self.repo}/statuses/{sha}",
                created_at=_now(),
                updated_at=_now(),
            )
            kept = [s for s in self.statuses.get(sha, []) if s["context"] != context]
            self.statuses[sha] = [*kept, status]
            return status

    def open_pull(self, head: str, title: str = "A change", *, body: str = "", draft: bool = True) -> int:
        """A pull request from branch ``head`` to the default branch, opened by the token's user (as beflow
        opens them); its number."""
        with self.lock:
            payload = {"title": title, "body": body, "head": head, "base": self.default_branch, "draft": draft}
            number: int = self._pulls_create({}, {}, payload)[2]["number"]
            return number

    def set_head(self, number: int, sha: str) -> None:
        """A new commit on pull request ``number``'s branch."""
        with self.lock:
            self.pulls[number]["head"]["sha"] = sha
            self._touch(number)

    def end_pull(self, number: int, *, merged: bool) -> None:
        """Pull request ``number`` merged, or closed without merging, by a person."""
        with self.lock:
            now = _now()
            self.pulls[number].update(state="closed", closed_at=now, merged_at=now if merged else None)
            self.issues[number].update(state="closed", closed_at=now)
            self._touch(number)

    def add_commit(self, message: str) -> str:
        """A commit holding ``message`` on an empty tree, as anyone who may push can make one; its sha."""
        with self.lock:
            tree = self._git_create_tree({}, {}, {"tree": []})[2]["sha"]
            sha: str = self._git_create_commit({}, {}, {"message": message, "tree": tree, "parents": []})[2]["sha"]
            return sha

    def issue_labels(self, number: int) -> list[str]:
        return [label["name"] for label in self.issues[number]["labels"]]

    def comments_of(self, number: int) -> list[dict[str, Any]]:
        return [c for cid, c in self.comments.items() if self.comment_issue[cid] == number]

    def fail(
        self,
        status: int,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
        body: Any = None,
        only: str | None = None,
        prefix: str = "",
        after: bool = False,
    ) -> None:
        """The next ``times`` requests (of method ``only``, on paths starting with ``prefix``) get this answer;
        ``after``: they are done first (the answer is lost on the way back, as a proxy's 502 loses it)."""
        message = body if body is not None else {"message": "fault", "documentation_url": "https://docs.github.com"}
        self.faults.extend(Fault(status, headers or {}, message, only, prefix, after) for _ in range(times))

    def delay(self, method: str, prefix: str, seconds: float, *, times: int | None = 1, body: str = "") -> None:
        """Hold the next ``times`` requests (None: every one) of ``method`` on paths starting with ``prefix`` whose
        body holds ``body`` for ``seconds`` before handling them (a GitHub that hangs, the connection open); the
        other requests are answered meanwhile."""
        with self.lock:
            self.delays.append(Delay(method, prefix, seconds, times, body))

    def _delay_of(self, method: str, path: str, raw: bytes) -> float:
        """How long to hold this request (and one use of the delay that says so is spent)."""
        with self.lock:
            for delay in self.delays:
                if delay.method == method and path.startswith(delay.prefix) and delay.body.encode() in raw:
                    if delay.times is not None:
                        delay.times -= 1
                        if delay.times <= 0:
                            self.delays.remove(delay)
                    self.held.append(time.time())
                    return delay.seconds
        return 0.0

    def tamper(self, method: str, prefix: str, change: Callable[[Any], Any]) -> Tamper:
        """From now on, the successful answers of ``method`` on paths starting with ``prefix`` are what ``change``
        makes of them (it gets a copy, and returns the answer); they are not checked against GitHub's description
        (they are meant to stray from it), and the requests that got them still are."""
        with self.lock:
            tamper = Tamper(method, prefix, change)
            self.tampers.append(tamper)
            return tamper

    def _tampered(self, method: str, path: str, status: int, data: Any) -> tuple[Any, bool]:
        with self.lock:
            for tamper in self.tampers:
                if tamper.method == method and path.startswith(tamper.prefix) and 200 <= status < 300:
                    tamper.served += 1
                    return tamper.change(copy.deepcopy(data)), True
        return data, False

    def requests(self, method: str | None = None, prefix: str = "") -> list[Seen]:
        return [s for s in self.seen if (method is None or s.method == method) and s.path.startswith(prefix)]

    # -- answering ---------------------------------------------------------------------------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, str], body: Any, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            for problem in self.spec.check_request(method, path, query, body):
                self.violations.append(f"request: {problem}")
            if headers.get("authorization", "").removeprefix("Bearer ") not in self.tokens:
                return 401, {}, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
            fault = next((f for f in self.faults if f.only in (None, method) and path.startswith(f.prefix)), None)
            if fault is not None:
                self.faults.remove(fault)
                if not fault.after:
                    return fault.status, dict(fault.headers), fault.body
                self._answer(method, path, query, body)
                return fault.status, dict(fault.headers), fault.body
            return self._answer(method, path, query, body)

    def _answer(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            try:
                route, params = self.spec.route(method, path)
            except LookupError:
                return 404, {}, _not_found()
            if "owner" in params and f"{params.get('owner')}/{params.get('repo')}" != self.repo:
                return 404, {}, _not_found()
            handler = getattr(self, "_" + route.operation["operationId"].replace("/", "_").replace("-", "_"), None)
            if handler is None:
                return 404, {}, {"message": f"the fake does not do {route.operation['operationId']}"}
            return handler(params, query, body)

    # repository

    def _repos_get(self, params: dict[str, str], query: dict[str, str], body: Any) -> tuple[int, dict[str, str], Any]:
        owner = self.user(OWNER)
        data = self.spec.example(
            "/components/schemas/full-repository",
            name=NAME,
            full_name=self.repo,
            owner=owner,
            default_branch=self.default_branch,
            private=True,
            permissions={"admin": False, "push": True, "pull": True},
        )
        return 200, {}, data

    # issues

    def _issues_list_for_repo(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        state = query.get("state", "open")
        wanted = [n for n in query.get("labels", "").split(",") if n]
        found = [
            raw
            for raw in sorted(self.issues.values(), key=lambda r: r["number"])
            if (state == "all" or raw["state"] == state)
            and all(n in [label["name"] for label in raw["labels"]] for n in wanted)
            and raw["updated_at"] >= query.get("since", "")
        ]
        if query.get("sort") == "updated":
            found.sort(key=lambda r: r["updated_at"])
        if query.get("direction", "asc" if query.get("sort") == "updated" else "") == "desc":
            found.reverse()
        return self._page(f"/repos/{self.repo}/issues", query, [self._summarized(raw) for raw in found])

    def _page(self, path: str, query: dict[str, str], items: list[Any]) -> tuple[int, dict[str, str], Any]:
        per_page = min(int(query.get("per_page", 30)), 100)
        page = int(query.get("page", 1))
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            rest = {k: v for k, v in query.items() if k != "page"}
            link = "&".join(f"{k}={quote(str(v))}" for k, v in {**rest, "page": page + 1}.items())
            headers["Link"] = f'<{self.url}{path}?{link}>; rel="next"'
        return 200, headers, chunk

    def _issues_create(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        number = self.add_issue(
            body["title"], labels=body.get("labels", []), body=body.get("body"), author=self.tokens[TOKEN]
        )
        return 201, {}, self.issues[number]

    def _issue(self, params: dict[str, str]) -> dict[str, Any] | None:
        number = params["issue_number"]
        return self.issues.get(int(number)) if number.isdigit() else None

    def _issues_get(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        raw = self._issue(params)
        return (200, {}, self._summarized(raw)) if raw else (404, {}, _not_found())

    def _issues_update(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        raw = self._issue(params)
        if raw is None:
            return 404, {}, _not_found()
        if "state" in body:
            raw["state"] = body["state"]
            raw["closed_at"] = _now() if body["state"] == "closed" else None
            raw["state_reason"] = body.get("state_reason") or ("completed" if body["state"] == "closed" else None)
        for key in ("title", "body"):
            if key in body:
                raw[key] = body[key]
        if "labels" in body:
            raw["labels"] = [self.label(n if isinstance(n, str) else n["name"]) for n in body["labels"]]
        self._touch(raw["number"])
        return 200, {}, raw

    def _issues_add_labels(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        raw = self._issue(params)
        if raw is None:
            return 404, {}, _not_found()
        for name in body["labels"]:
            if name not in self.issue_labels(raw["number"]):
                raw["labels"].append(self.label(name))
        self._touch(raw["number"])
        return 200, {}, raw["labels"]

    def _issues_remove_label(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        raw = self._issue(params)
        if raw is None or params["name"] not in self.issue_labels(raw["number"]):
            return 404, {}, {"message": "Label does not exist", "documentation_url": "https://docs.github.com"}
        raw["labels"] = [label for label in raw["labels"] if label["name"] != params["name"]]
        self._touch(raw["number"])
        return 200, {}, raw["labels"]

    def _issues_list_comments(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        raw = self._issue(params)
        if raw is None:
            return 404, {}, _not_found()
        found = [c for c in self.comments_of(raw["number"]) if c["updated_at"] >= query.get("since", "")]
        return self._page(f"/repos/{self.repo}/issues/{raw['number']}/comments", query, found)

    def _issues_list_comments_for_repo(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        found = _listed(list(self.comments.values()), query)
        return self._page(f"/repos/{self.repo}/issues/comments", query, found)

    def _issues_create_comment(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        raw = self._issue(params)
        if raw is None:
            return 404, {}, _not_found()
        return 201, {}, self.add_comment(raw["number"], body["body"], author=self.tokens[TOKEN])

    def _issues_update_comment(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        comment = self.comments.get(int(params["comment_id"]))
        if comment is None:
            return 404, {}, _not_found()
        comment["body"] = body["body"]
        comment["updated_at"] = _now()
        self._touch(self.comment_issue[comment["id"]])
        return 200, {}, comment

    # labels

    def _issues_list_labels_for_repo(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        return self._page(f"/repos/{self.repo}/labels", query, list(self.labels.values()))

    def _issues_create_label(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        if body["name"] in self.labels:
            return (
                422,
                {},
                {
                    "message": "Validation Failed",
                    "documentation_url": "https://docs.github.com",
                    "errors": [{"resource": "Label", "code": "already_exists", "field": "name"}],
                },
            )
        return 201, {}, self.label(body["name"], body.get("color", "ededed"))

    # the git database: enough for claims

    def _git_create_tree(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        sha = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
        self.trees[sha] = self.spec.example(
            "/components/schemas/git-tree", sha=sha, url=f"{self.url}/t/{sha}", truncated=False, tree=[]
        )
        return 201, {}, self.trees[sha]

    def _git_create_commit(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        if body["tree"] not in self.trees or any(p not in self.commits for p in body.get("parents", [])):
            return 422, {}, {"message": "Tree SHA does not exist", "documentation_url": "https://docs.github.com"}
        sha = hashlib.sha1(f"{json.dumps(body, sort_keys=True)}{next(self.ids)}".encode()).hexdigest()
        self.commits[sha] = self.spec.example(
            "/components/schemas/git-commit",
            sha=sha,
            message=body["message"],
            url=f"{self.url}/c/{sha}",
            html_url=f"https://github.com/{self.repo}/commit/{sha}",
            tree={"sha": body["tree"], "url": f"{self.url}/t/{body['tree']}"},
            parents=[
                {"sha": p, "url": f"{self.url}/c/{p}", "html_url": f"https://github.com/c/{p}"}
                for p in body.get("parents", [])
            ],
        )
        return 201, {}, self.commits[sha]

    def _git_get_commit(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        commit = self.commits.get(params["commit_sha"])
        return (200, {}, commit) if commit else (404, {}, _not_found())

    def _ref(self, name: str) -> dict[str, Any]:
        sha = self.refs[name]
        return self.spec.example(
            "/components/schemas/git-ref",
            ref=name,
            url=f"{self.url}/r/{name}",
            object={"type": "commit", "sha": sha, "url": f"{self.url}/c/{sha}"},
        )

    def _git_get_ref(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        name = "refs/" + params["ref"]
        return (200, {}, self._ref(name)) if name in self.refs else (404, {}, _not_found())

    def _git_list_matching_refs(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        prefix = "refs/" + params["ref"]
        found = [self._ref(name) for name in sorted(self.refs) if name.startswith(prefix)]
        return 200, {}, found

    def _git_create_ref(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        if body["ref"] in self.refs:
            return 422, {}, {"message": "Reference already exists", "documentation_url": "https://docs.github.com"}
        if body["sha"] not in self.commits:
            return 422, {}, {"message": "Object does not exist", "documentation_url": "https://docs.github.com"}
        self.refs[body["ref"]] = body["sha"]
        return 201, {}, self._ref(body["ref"])

    def _git_update_ref(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        name = "refs/" + params["ref"]
        if name not in self.refs:
            return 422, {}, {"message": "Reference does not exist", "documentation_url": "https://docs.github.com"}
        if not body.get("force") and not self._descends(body["sha"], self.refs[name]):
            return 422, {}, {"message": "Update is not a fast forward", "documentation_url": "https://docs.github.com"}
        self.refs[name] = body["sha"]
        return 200, {}, self._ref(name)

    def _git_delete_ref(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        name = "refs/" + params["ref"]
        if name not in self.refs:
            return 422, {}, {"message": "Reference does not exist", "documentation_url": "https://docs.github.com"}
        del self.refs[name]
        return 204, {}, None

    def _descends(self, sha: str, ancestor: str) -> bool:
        pending = [sha]
        while pending:
            current = pending.pop()
            if current == ancestor:
                return True
            pending += [p["sha"] for p in self.commits.get(current, {}).get("parents", [])]
        return False

    # pull requests

    def _pulls_list(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        found = [
            p
            for p in self.pulls.values()
            if (query.get("state", "open") in ("all", p["state"]))
            and ("head" not in query or f"{OWNER}:{p['head']['ref']}" == query["head"])
        ]
        return self._page(f"/repos/{self.repo}/pulls", query, found)

    def _pulls_create(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        number = self.add_issue(body["title"], body=body.get("body"), author=self.tokens[TOKEN], pull=True)
        pull = self.spec.example(
            "/components/schemas/pull-request",
            id=next(self.ids),
            number=number,
            title=body["title"],
            body=body.get("body"),
            draft=body.get("draft", False),
            state="open",
            html_url=f"https://github.com/{self.repo}/pull/{number}",
            user=self.user(self.tokens[TOKEN]),
            created_at=_now(),
            updated_at=_now(),
        )
        repo = self.spec.example(
            "/components/schemas/repository",
            name=NAME,
            full_name=self.repo,
            owner=self.user(OWNER),
            default_branch=self.default_branch,
        )
        pull["head"] = self.spec.example(
            "/components/schemas/pull-request/properties/head",
            ref=body["head"],
            label=f"{OWNER}:{body['head']}",
            sha="0" * 40,
            repo=repo,
            user=self.user(OWNER),
        )
        pull["base"] = self.spec.example(
            "/components/schemas/pull-request/properties/base",
            ref=body["base"],
            label=f"{OWNER}:{body['base']}",
            sha="0" * 40,
            repo=repo,
            user=self.user(OWNER),
        )
        self.pulls[number] = pull
        return 201, {}, pull

    def _pulls_get(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        pull = self.pulls.get(int(params["pull_number"]))
        return (200, {}, pull) if pull else (404, {}, _not_found())

    def _pulls_merge(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        """GitHub's merge: refused (405) for a closed or draft pull request, and (409) when ``sha`` is not its head
        now; the method used is kept in ``merged``."""
        number = int(params["pull_number"])
        pull = self.pulls.get(number)
        if pull is None:
            return 404, {}, _not_found()
        docs = "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request"
        if pull["state"] != "open" or pull.get("draft"):
            why = "Pull Request is still a draft" if pull.get("draft") else "Pull Request is not mergeable"
            return 405, {}, {"message": why, "documentation_url": docs}
        if body.get("sha") not in (None, pull["head"]["sha"]):
            moved = "Head branch was modified. Review and try the merge again."
            return 409, {}, {"message": moved, "documentation_url": docs}
        self.merged[number] = body.get("merge_method") or "merge"
        self.end_pull(number, merged=True)
        return 200, {}, {"sha": "1" * 40, "merged": True, "message": "Pull Request successfully merged"}

    def _pulls_list_reviews(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        number = int(params["pull_number"])
        if number not in self.pulls:
            return 404, {}, _not_found()
        found = [r for rid, r in self.reviews.items() if self.review_pull[rid] == number]
        return self._page(f"/repos/{self.repo}/pulls/{number}/reviews", query, found)

    def _pulls_list_review_comments(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        number = int(params["pull_number"])
        if number not in self.pulls:
            return 404, {}, _not_found()
        found = _listed(self.review_comments_of(number), query)
        return self._page(f"/repos/{self.repo}/pulls/{number}/comments", query, found)

    def _pulls_list_review_comments_for_repo(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        found = _listed(list(self.review_comments.values()), query)
        return self._page(f"/repos/{self.repo}/pulls/comments", query, found)

    def _pulls_get_review_comment(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        comment = self.review_comments.get(int(params["comment_id"]))
        return (200, {}, comment) if comment else (404, {}, _not_found())

    def _pulls_create_reply_for_review_comment(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        number, cid = int(params["pull_number"]), int(params["comment_id"])
        root = self.review_comments.get(cid)
        if number not in self.pulls or root is None or self.review_comment_pull[cid] != number:
            return 404, {}, _not_found()
        if root.get("in_reply_to_id"):  # GitHub: "replies to replies are not supported"
            return 404, {}, _not_found()
        reply = self.add_review_comment(number, body["body"], author=self.tokens[TOKEN], in_reply_to=cid)
        return 201, {}, reply

    # checks, statuses, collaborators, the token's user

    def _checks_list_for_ref(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        runs = self.check_runs.get(params["ref"], [])
        per_page, page = min(int(query.get("per_page", 30)), 100), int(query.get("page", 1))
        return 200, {}, {"total_count": len(runs), "check_runs": runs[(page - 1) * per_page : page * per_page]}

    def _checks_list_annotations(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        rid = int(params["check_run_id"])
        if rid not in self.annotations:
            return 404, {}, _not_found()
        return self._page(f"/repos/{self.repo}/check-runs/{rid}/annotations", query, self.annotations[rid])

    def _repos_get_combined_status_for_ref(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        sha = params["ref"]
        statuses = self.statuses.get(sha, [])
        states = {s["state"] for s in statuses}
        state = next((s for s in ("failure", "pending") if s in states), "success" if statuses else "pending")
        if "error" in states:
            state = "failure"
        repository = self.spec.example(
            "/components/schemas/minimal-repository", name=NAME, full_name=self.repo, owner=self.user(OWNER)
        )
        data = self.spec.example(
            "/components/schemas/combined-commit-status",
            state=state,
            sha=sha,
            total_count=len(statuses),
            statuses=statuses,
            repository=repository,
            commit_url=f"https://api.github.com/repos/{self.repo}/commits/{sha}",
            url=f"https://api.github.com/repos/{self.repo}/commits/{sha}/status",
        )
        return 200, {}, data

    def _repos_get_collaborator_permission_level(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        login = params["username"]
        permission = self.permissions.get(login, "none")
        user = self.spec.example("/components/schemas/collaborator", **self.user(login), role_name=permission)
        data = {"permission": permission, "role_name": permission, "user": user}
        return 200, {}, data

    def _users_get_authenticated(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        login = self.tokens[TOKEN]
        return 200, {}, self.spec.example("/components/schemas/private-user", **self.user(login))

    def _pulls_update(self, params: dict[str, str], query: dict[str, str], body: Any) -> Any:
        pull = self.pulls.get(int(params["pull_number"]))
        if pull is None:
            return 404, {}, _not_found()
        for key in ("title", "body"):
            if key in body:
                pull[key] = body[key]
        return 200, {}, pull


def _listed(items: list[dict[str, Any]], query: dict[str, str]) -> list[dict[str, Any]]:
    """Comments as GitHub lists them: ``since`` (updated at or after), sorted by ``sort`` (``created``, or
    ``updated``) in ``direction`` (ascending unless told)."""
    found = [c for c in items if c["updated_at"] >= query.get("since", "")]
    field = "updated_at" if query.get("sort") == "updated" else "created_at"
    found.sort(key=lambda c: (c[field], c["id"]), reverse=query.get("direction") == "desc")
    return found


def _not_found() -> dict[str, str]:
    return {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            hold = fake._delay_of(self.command, parts.path, raw)
            if hold:
                fake.released.wait(hold)  # (outside the fake's lock: every other request is answered meanwhile)
            status, extra, data = fake.handle(self.command, parts.path, query, body, headers)
            data, tampered = fake._tampered(self.command, parts.path, status, data)
            payload = b"" if data is None else json.dumps(data).encode()
            out = {"Content-Type": "application/json; charset=utf-8", **extra}
            with fake.lock:
                if status == 200 and self.command == "GET":
                    etag = '"' + hashlib.sha1(payload).hexdigest() + '"'
                    out["ETag"] = etag
                    if headers.get("if-none-match") == etag:
                        status, payload = 304, b""
                if status != 304 and status not in (401,) and "x-ratelimit-remaining" not in {k.lower() for k in out}:
                    fake.rate_remaining -= 1
                    fake.rate_used += 1
                    out["X-RateLimit-Remaining"] = str(max(fake.rate_remaining, 0))
                answer = data if payload else None
                problems = [] if tampered else fake.spec.check_response(self.command, parts.path, status, answer)
                fake.violations.extend(f"response: {problem}" for problem in problems)
                fake.seen.append(Seen(self.command, parts.path, query, body, status, headers))
            self.send_response(status)
            for key, value in out.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client killed mid-request (the tests kill watchers with SIGKILL) is no failure of the fake


@contextlib.contextmanager
def serve() -> Iterator[FakeGitHub]:
    """A fake GitHub on a local port, served from a thread of this process until the block ends (the benchmark
    uses it too)."""
    fake = FakeGitHub(spec())
    server = _Server(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.server = server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.released.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    """A fake GitHub on a local port; the test fails if any request or answer strays from GitHub's description."""
    with serve() as fake:
        yield fake
    assert not fake.violations, (
        "the fake GitHub saw requests or gave answers GitHub's description does not allow:\n"
        + ("\n".join(fake.violations[:20]))
    )


class Watcher(watching.Watcher):
    """``beflow watch --json`` as a real process with the fake GitHub's token, its events read as they come."""

    def __init__(self, config: Path, cwd: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(config, cwd, {"GITHUB_TOKEN": TOKEN, **(env or {})})


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    eventually(condition, what, timeout, interval=0.1)


def acted_on(markdown: str) -> list[str]:
    """What GitHub would act on in ``markdown``: closing keywords with a reference, and mentions, outside code."""
    text = re.sub(r"^(`{3,})[^\n]*\n.*?^\1`*[ \t]*$", "", markdown, flags=re.S | re.M)  # fenced blocks
    text = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", "", text)  # inline code
    keywords = re.findall(r"(?i)\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s+[\w.-]*(?:/[\w.-]+)?#\d+", text)
    mentions = re.findall(r"(?<![\w`])@[\w-]+(?:/[\w-]+)?", text)
    return keywords + mentions


def github_tracker(project: AutoProject) -> GitHubTracker:
    """The GitHub tracker ``project``'s config names, opened as beflow opens it."""
    from beflow.app import open_tracker
    from beflow.config import load_project
    from beflow.trackers.github import GitHubTracker

    opened = open_tracker(load_project(project.config_path))
    assert isinstance(opened, GitHubTracker)
    return opened
