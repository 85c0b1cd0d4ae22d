"""A fake GitLab: one project's issues, notes, merge requests, discussions, labels, members, pipelines and jobs, served
over HTTP on a local port, every request and answer checked against the description of GitLab's REST API
(``tests/support/gitlab_openapi.py``), as the fake GitHub is checked against octokit's.

It speaks what the GitLab tracker and code host will meet: the project's git over smart HTTP at ``/<project>.git``
on the same port once :meth:`FakeGitLab.serve_git` is called (``git http-backend``, taking the token as the password
of the user ``oauth2``, as GitLab does); a token in ``PRIVATE-TOKEN`` or ``Authorization: Bearer``;
offset pagination (``page``/``per_page``, answered with ``X-Page``, ``X-Next-Page``, ``X-Total`` and a ``Link``) and
keyset pagination on the project's jobs (``pagination=keyset``: a ``Link`` to the next page, no totals);
``updated_after`` on the issue, merge request and pipeline listings; ``RateLimit-*`` headers on every answer and a 429
with ``Retry-After`` when the window is spent; an ``ETag`` on single resources (a matching ``If-None-Match`` is a 304;
listings carry none, as GitLab's do not answer 304); faults injected by status (5xx storms), answered before or after
the change is made; requests held before they are handled (a GitLab that hangs), and a note whose transaction began
first committed late (its id drawn on arrival, the note seen and answered later: :meth:`FakeGitLab.stall_notes`).
Every answer carries a ``Date`` (whole seconds, as GitLab's).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import email.utils
import hashlib
import itertools
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import pytest

from tests.support.git_http import GitRepos
from tests.support.gitlab_openapi import GitLabSpec, gitlab_spec

PROJECT = "acme/widgets"
PROJECT_ID = 7
#: A fork of the project (someone else's).
FORK_ID = 8
TOKEN = "glpat-fake-token-beflow"
WINDOW = 2000  # requests a rate-limit window allows (GitLab.com's authenticated API limit)


@dataclass
class Fault:
    status: int
    headers: dict[str, str]
    body: Any
    only: str | None
    prefix: str
    after: bool


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int
    headers: dict[str, str]


@dataclass
class Delay:
    method: str
    prefix: str
    seconds: float
    times: int | None


@dataclass
class Tamper:
    method: str
    prefix: str
    change: Callable[[Any], Any]
    served: int = 0


@dataclass
class Answer:
    status: int
    data: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: A single resource: it carries an ETag (listings do not).
    single: bool = False
    text: str | None = None
    #: A text answer too long to hold: this chunk, sent this many times.
    repeated: tuple[bytes, int] | None = None


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _error(status: int, message: str) -> Answer:
    return Answer(status, {"message": f"{status} {message}"})


class FakeGitLab:
    """The state of one project and what the server saw."""

    def __init__(self, api: GitLabSpec) -> None:
        self.spec = api
        self.lock = threading.RLock()
        self.ids = itertools.count(1000)
        self.users: dict[int, dict[str, Any]] = {}
        #: token -> (user id, scopes)
        self.tokens: dict[str, tuple[int, list[str]]] = {}
        self.members: dict[int, int] = {}
        self.labels: dict[str, dict[str, Any]] = {}
        self.issues: dict[int, dict[str, Any]] = {}
        #: Blocking links: (blocker iid, blocked iid, link id).
        self.blocking: list[tuple[int, int, int]] = []
        self.mrs: dict[int, dict[str, Any]] = {}
        #: ("Issue" | "MergeRequest", iid) -> discussions, each {"id", "individual_note", "notes"}
        self.discussions: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.pipelines: list[dict[str, Any]] = []
        #: Merge request iid -> the users who approved it; those merged through the API, with how; branches removed.
        self.approvals: dict[int, list[dict[str, Any]]] = {}
        self.merged: dict[int, dict[str, Any]] = {}
        self.removed: list[str] = []
        self.jobs: dict[int, list[dict[str, Any]]] = {}
        #: Each job's log: its text, or a chunk and how many times it repeats (a log too long to hold).
        self.traces: dict[int, str | tuple[bytes, int]] = {}
        self.faults: list[Fault] = []
        self.tampers: list[Tamper] = []
        self.delays: list[Delay] = []
        self.skews: list[Delay] = []
        self.stalls: list[float] = []
        #: Set when the server stops: every held request is let go.
        self.released = threading.Event()
        self._local = threading.local()  # the id a stalled note creation drew on arrival
        self.seen: list[Seen] = []
        self.violations: list[str] = []
        self.rate_remaining = WINDOW
        self.server: ThreadingHTTPServer | None = None
        self.serving = ""
        #: The project's git, once served (:meth:`serve_git`).
        self.git: GitRepos | None = None
        self.bare: Path | None = None
        self.bot = self.user("beflow-bot", access_level=40)
        self.tokens[TOKEN] = (self.bot["id"], ["api"])

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def git_url(self) -> str:
        """The project's git over HTTP, on the instance's own host and port (as ``http_url_to_repo`` says)."""
        return f"{self.url}/{PROJECT}.git"

    # -- arranging ---------------------------------------------------------------------------------------------------

    def serve_git(self, source: Path, root: Path) -> Path:
        """Serve a bare clone of the repository at ``source`` (kept under ``root``) as the project's git at
        :attr:`git_url`, taking the user ``oauth2`` with the token as its password; the bare repository."""
        self.git = GitRepos(root, credentials={"oauth2": TOKEN})
        self.bare = self.git.bare(f"{PROJECT}.git", source)
        return self.bare

    def user(self, username: str, *, access_level: int | None = None) -> dict[str, Any]:
        """A user (a member with ``access_level``, when given)."""
        with self.lock:
            uid = next(self.ids)
            raw = {"id": uid, "username": username, "name": username.title(), "state": "active", "bot": False,
                   "avatar_url": None, "web_url": f"https://gitlab.example.com/{username}"}  # fmt: skip
            self.users[uid] = raw
            if access_level is not None:
                self.members[uid] = access_level
            return raw

    def label(self, name: str, color: str = "#ededed") -> dict[str, Any]:
        with self.lock:
            raw = {"id": next(self.ids), "name": name, "color": color, "description": None, "text_color": "#333333"}
            self.labels[name] = raw
            return raw

    def add_issue(
        self,
        title: str,
        *,
        description: str = "",
        labels: list[str] | None = None,
        author: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        with self.lock:
            iid = max(self.issues, default=0) + 1
            now = _now()
            raw: dict[str, Any] = {"id": next(self.ids), "iid": iid, "project_id": PROJECT_ID, "title": title,
                                   "description": description, "state": "opened", "labels": list(labels or []),
                                   "confidential": False, "weight": None, "author": author or self.bot,
                                   "assignees": [], "closed_at": None, "created_at": now, "updated_at": now,
                                   "user_notes_count": 0,
                                   "web_url": f"https://gitlab.example.com/{PROJECT}/-/issues/{iid}"}  # fmt: skip
            self.issues[iid] = raw
            self._known(raw["labels"])
            return raw

    def _known(self, names: list[str]) -> None:
        # GitLab makes a project label of a name it has not seen when an issue is given it.
        for name in names:
            if name not in self.labels:
                self.label(name)

    def add_note(
        self,
        kind: str,
        iid: int,
        body: str,
        *,
        author: dict[str, Any] | None = None,
        position: dict[str, Any] | None = None,
        discussion: str | None = None,
        internal: bool = False,
    ) -> dict[str, Any]:
        """A note on issue or merge request ``iid`` (``kind`` ``Issue`` or ``MergeRequest``): a new thread, or an
        answer in ``discussion``; ``position`` makes it a diff note (resolvable, as GitLab's are); ``internal``: seen
        only by members Reporter and above (GitLab still sends ``confidential`` beside ``internal``)."""
        with self.lock:
            threads = self.discussions.setdefault((kind, iid), [])
            drawn, self._local.drawn = getattr(self._local, "drawn", None) or (next(self.ids), _now()), None
            note = {"id": drawn[0], "type": None, "body": body, "author": author or self.bot,
                    "created_at": drawn[1], "updated_at": drawn[1], "system": False, "noteable_id": iid + 100,
                    "noteable_type": kind, "noteable_iid": iid, "resolvable": False, "resolved": False,
                    "confidential": internal, "internal": internal}  # fmt: skip
            if position is not None:
                note |= {"type": "DiffNote", "position": {"position_type": "text", **position}, "resolvable": True}
            if discussion is not None:
                thread = next(t for t in threads if t["id"] == discussion)
                note["type"] = note["type"] or "DiscussionNote"
                note["resolvable"] = thread["notes"][0]["resolvable"]
                thread["notes"].append(note)
                thread["individual_note"] = False
            else:
                sha = hashlib.sha1(f"{kind}{iid}{note['id']}".encode()).hexdigest()
                threads.append({"id": sha, "individual_note": position is None, "notes": [note]})
            if kind == "Issue" and iid in self.issues:
                self.issues[iid]["user_notes_count"] += 1
            self._touch(kind, iid)
            return note

    def assign(self, iid: int, user: dict[str, Any]) -> None:
        """Assign issue ``iid`` to ``user``."""
        with self.lock:
            self.issues[iid]["assignees"] = [{k: user[k] for k in ("id", "username", "name", "state")}]
            self._touch("Issue", iid)

    def open_mr(self, source: str, title: str = "A change", *, description: str = "", target: str = "main") -> int:
        with self.lock:
            iid: int = self._mr_create({}, {}, {"source_branch": source, "target_branch": target, "title": title,
                                            "description": description}).data["iid"]  # fmt: skip
            return iid

    def fork_mr(self, source: str, title: str = "A change", *, description: str = "", author: str = "stranger") -> int:
        """A merge request from a fork (another project: anyone's) whose branch is named ``source``."""
        stranger = self.user(author)
        with self.lock:
            iid = self._mr_create({}, {}, {"source_branch": source, "target_branch": "main", "title": title,
                                           "description": description}, fork=True).data["iid"]  # fmt: skip
            self.mrs[iid] |= {"source_project_id": FORK_ID, "author": stranger}
            return int(iid)

    def add_pipeline(self, sha: str, ref: str, status: str, jobs: dict[str, tuple[str, str]]) -> dict[str, Any]:
        """A pipeline on ``sha`` with ``jobs``: name -> (status, log)."""
        with self.lock:
            now = _now()
            raw: dict[str, Any] = {"id": next(self.ids), "iid": len(self.pipelines) + 1, "project_id": PROJECT_ID,
                                   "sha": sha, "ref": ref, "status": status, "source": "push", "created_at": now,
                                   "updated_at": now}  # fmt: skip
            self.pipelines.append(raw)
            for name, (job_status, log) in jobs.items():
                job: dict[str, Any] = {"id": next(self.ids), "name": name, "stage": "test", "status": job_status,
                                       "allow_failure": False, "ref": ref, "created_at": now, "started_at": now,
                                       "finished_at": now, "web_url": f"https://gitlab.example.com/{PROJECT}/-/jobs/1",
                                       "pipeline": {"id": raw["id"]}}  # fmt: skip
                if job_status == "failed":
                    job["failure_reason"] = "script_failure"
                self.jobs.setdefault(raw["id"], []).append(job)
                self.traces[job["id"]] = log
            return raw

    def _touch(self, kind: str, iid: int) -> None:
        target = self.issues.get(iid) if kind == "Issue" else self.mrs.get(iid)
        if target is not None:
            target["updated_at"] = _now()

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
        ``after``: the change is made first and its answer lost (a proxy's 502 on the way back)."""
        message = body if body is not None else {"message": f"{status} fault"}
        self.faults.extend(Fault(status, headers or {}, message, only, prefix, after) for _ in range(times))

    def delay(self, method: str, prefix: str, seconds: float, *, times: int | None = 1) -> None:
        """Hold the next ``times`` requests (None: every one) of ``method`` on paths starting with ``prefix`` for
        ``seconds`` before handling them (a GitLab that hangs, the connection open); the others are answered
        meanwhile."""
        with self.lock:
            self.delays.append(Delay(method, prefix, seconds, times))

    def skew_clock(self, method: str, prefix: str, seconds: float, *, times: int | None = None) -> None:
        """The ``Date`` of the next ``times`` answers (None: every one) of ``method`` on paths starting with ``prefix``
        is ``seconds`` off (a proxy's, or a GitLab whose clock is wrong); what GitLab stores keeps the true time."""
        with self.lock:
            self.skews.append(Delay(method, prefix, seconds, times))

    def _skew(self, method: str, path: str) -> float:
        with self.lock:
            for skew in self.skews:
                if skew.method == method and path.startswith(skew.prefix):
                    if skew.times is not None:
                        skew.times -= 1
                        if skew.times <= 0:
                            self.skews.remove(skew)
                    return skew.seconds
            return 0.0

    def stall_notes(self, seconds: float, *, times: int = 1) -> None:
        """The next ``times`` note creations draw their id on arrival and are made (seen in listings, and answered)
        ``seconds`` later: as a transaction that began first and committed last, a note with a lower id than one
        already seen appears a moment later."""
        with self.lock:
            self.stalls.extend([seconds] * times)

    def _hold(self, method: str, path: str) -> None:
        """Hold this request as a delay or a stall says (outside the lock: other requests are answered meanwhile)."""
        with self.lock:
            hold = 0.0
            for delay in self.delays:
                if delay.method == method and path.startswith(delay.prefix):
                    if delay.times is not None:
                        delay.times -= 1
                        if delay.times <= 0:
                            self.delays.remove(delay)
                    hold = delay.seconds
                    break
            if method == "POST" and path.endswith("/notes") and self.stalls:
                hold += self.stalls.pop(0)
                self._local.drawn = (next(self.ids), _now())  # (its transaction's id and time)
        if hold:
            self.released.wait(hold)

    def tamper(self, method: str, prefix: str, change: Callable[[Any], Any]) -> Tamper:
        """From now on, successful answers of ``method`` on paths starting with ``prefix`` are what ``change`` makes
        of a copy of them; they are still checked against the description (a test can see the check catch them)."""
        with self.lock:
            tamper = Tamper(method, prefix, change)
            self.tampers.append(tamper)
            return tamper

    def requests(self, method: str | None = None, prefix: str = "") -> list[Seen]:
        return [s for s in self.seen if (method is None or s.method == method) and s.path.startswith(prefix)]

    # -- answering ---------------------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any, headers: dict[str, str]) -> Answer:
        with self.lock:
            self.serving = path  # (the path a listing's Link headers point back to)
            for problem in self.spec.check_request(method, path, query, body):
                self.violations.append(f"request: {problem}")
            token = headers.get("private-token") or headers.get("authorization", "").removeprefix("Bearer ")
            if token not in self.tokens:
                return _error(401, "Unauthorized")
            if self.rate_remaining <= 0:
                return Answer(429, {"message": "Retry later"}, {"Retry-After": "60"})
            fault = next((f for f in self.faults if f.only in (None, method) and path.startswith(f.prefix)), None)
            if fault is not None:
                self.faults.remove(fault)
                if fault.after:
                    self._answer(method, path, query, body, token)
                return Answer(fault.status, fault.body, dict(fault.headers))
            return self._answer(method, path, query, body, token)

    def _answer(self, method: str, path: str, query: dict[str, str], body: Any, token: str) -> Answer:
        try:
            route, params = self.spec.route(method, path)
        except LookupError:
            return _error(404, "Not Found")
        if params.get("id") not in (PROJECT, str(PROJECT_ID), None):
            return _error(404, "Project Not Found")
        params["token"] = token
        handler = getattr(self, HANDLERS[route.operation["operationId"]])
        answer: Answer = handler(params, query, body)
        return answer

    # users, the token, the project ------------------------------------------------------------------------------

    def _retrieve_the_current_user(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        return Answer(200, self.users[self.tokens[params["token"]][0]], single=True)

    def _get_single_personal_access_token(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        uid, scopes = self.tokens[params["token"]]
        return Answer(200, {"id": 1, "name": "beflow", "scopes": scopes, "active": True, "revoked": False,
                            "user_id": uid, "created_at": _now(), "last_used_at": None, "expires_at": None,
                            "description": None}, single=True)  # fmt: skip

    def _get_a_single_project(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        return Answer(200, {"id": PROJECT_ID, "path_with_namespace": PROJECT, "default_branch": "main",
                            "name": "widgets", "web_url": f"https://gitlab.example.com/{PROJECT}",
                            "http_url_to_repo": self.git_url}, single=True)  # fmt: skip

    def _member(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        uid = int(params["user_id"])
        if uid not in self.members:
            return _error(404, "Not found")
        return Answer(200, {**self.users[uid], "access_level": self.members[uid], "expires_at": None}, single=True)

    # labels ----------------------------------------------------------------------------------------------------

    def _list_labels(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        return self._page(query, list(self.labels.values()))

    def _create_a_new_label(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        if body["name"] in self.labels:
            return _error(409, "Label already exists")
        raw = self.label(body["name"], body["color"])
        return Answer(201, raw)

    # issues ----------------------------------------------------------------------------------------------------

    def _list_project_issues(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        state = query.get("state", "all")
        wanted = [name for name in query.get("labels", "").split(",") if name]
        found = [
            i
            for i in self.issues.values()
            if state in ("all", i["state"])
            and all(name in i["labels"] for name in wanted)
            and i["updated_at"] >= _stamp(query.get("updated_after"))
            and ("confidential" not in query or i["confidential"] == (query["confidential"] == "true"))
        ]
        found = _sorted(found, query)
        if query.get("with_labels_details") == "true":
            found = [{**i, "labels": [self.labels[n] for n in i["labels"]]} for i in found]
        return self._page(query, found)

    def _new_issue(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        labels = _names(body.get("labels"))
        return Answer(201, self.add_issue(body["title"], description=body.get("description", ""), labels=labels))

    def block(self, iid: int, *by: int) -> None:
        """Issue ``iid`` is blocked by the issues ``by`` (a blocking link: both issues list it, each its way)."""
        with self.lock:
            for other in by:
                self.blocking.append((other, iid, next(self.ids)))

    def _list_issue_relations(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        iid = int(params["issue_iid"])
        if iid not in self.issues:
            return _error(404, "Not found")
        found = []
        for blocker, blocked, link in self.blocking:
            if iid in (blocker, blocked):
                other, kind = (blocker, "is_blocked_by") if iid == blocked else (blocked, "blocks")
                stamp = self.issues[other]["created_at"]
                found.append({**self.issues[other], "issue_link_id": link, "link_type": kind,
                              "link_created_at": stamp, "link_updated_at": stamp})  # fmt: skip
        return Answer(200, found)

    def _single_project_issue(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        issue = self.issues.get(int(params["issue_iid"]))
        return Answer(200, issue, single=True) if issue else _error(404, "Not found")

    def _edit_an_issue(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        issue = self.issues.get(int(params["issue_iid"]))
        if issue is None:
            return _error(404, "Not found")
        if "labels" in body:
            issue["labels"] = _names(body["labels"])
        for name in _names(body.get("add_labels")):
            if name not in issue["labels"]:
                issue["labels"].append(name)
        self._known(issue["labels"])
        removed = set(_names(body.get("remove_labels")))
        issue["labels"] = [n for n in issue["labels"] if n not in removed]
        for key in ("title", "description"):
            if key in body:
                issue[key] = body[key]
        if "state_event" in body:
            issue["state"] = "closed" if body["state_event"] == "close" else "opened"
            issue["closed_at"] = _now() if issue["state"] == "closed" else None
        issue["updated_at"] = _now()
        return Answer(200, issue)

    # notes and discussions -----------------------------------------------------------------------------------------

    def _notes_of(self, kind: str, iid: int) -> list[dict[str, Any]]:
        return [note for thread in self.discussions.get((kind, iid), []) for note in thread["notes"]]

    def _list_project_issue_notes(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        iid = int(params["issue_iid"])
        if iid not in self.issues:
            return _error(404, "Not found")
        notes = self._notes_of("Issue", iid)
        key = query.get("order_by", "created_at")
        notes.sort(key=lambda n: (n[key], n["id"]), reverse=query.get("sort", "desc") == "desc")
        return self._page(query, notes)

    def _create_new_issue_note(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        iid = int(params["issue_iid"])
        if iid not in self.issues:
            return _error(404, "Not found")
        author = self.users[self.tokens[params["token"]][0]]
        return Answer(
            201, self.add_note("Issue", iid, body["body"], author=author, internal=body.get("internal", False))
        )

    def _modify_existing_issue_note(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        found = [n for n in self._notes_of("Issue", int(params["issue_iid"])) if n["id"] == int(params["note_id"])]
        if not found:
            return _error(404, "Note Not Found")
        if "body" in body and body["body"] != found[0]["body"]:  # (an edit that changes nothing moves nothing)
            found[0]["body"] = body["body"]
            found[0]["updated_at"] = _now()
        return Answer(200, found[0])

    def _delete_an_issue_note(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        threads = self.discussions.get(("Issue", int(params["issue_iid"])), [])
        for thread in threads:
            kept = [n for n in thread["notes"] if n["id"] != int(params["note_id"])]
            if len(kept) < len(thread["notes"]):
                thread["notes"] = kept
                if not kept:
                    threads.remove(thread)
                return Answer(204)
        return _error(404, "Note Not Found")

    def _create_new_merge_request_note(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        iid = int(params["merge_request_iid"])
        if iid not in self.mrs:
            return _error(404, "Not found")
        author = self.users[self.tokens[params["token"]][0]]
        return Answer(201, self.add_note("MergeRequest", iid, body["body"], author=author))

    def _list_project_merge_request_discussion_items(
        self, params: dict[str, str], query: dict[str, str], body: Any
    ) -> Answer:
        iid = int(params["merge_request_iid"])
        if iid not in self.mrs:
            return _error(404, "Not found")
        return self._page(query, self.discussions.get(("MergeRequest", iid), []))

    def _reply_in_thread(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        iid, thread = int(params["merge_request_iid"]), params["discussion_id"]
        if not any(t["id"] == thread for t in self.discussions.get(("MergeRequest", iid), [])):
            return _error(404, "Not found")
        author = self.users[self.tokens[params["token"]][0]]
        return Answer(201, self.add_note("MergeRequest", iid, body["body"], author=author, discussion=thread))

    # merge requests --------------------------------------------------------------------------------------------

    def _pushed(self) -> None:
        """Each open merge request's ``sha`` follows its source branch in the served repository, and a push moves the
        merge request's ``updated_at``, as GitLab's do."""
        if self.bare is None:
            return
        for mr in self.mrs.values():
            if mr["state"] != "opened":
                continue
            found = subprocess.run(
                ["git", "-C", str(self.bare), "rev-parse", "--verify", "-q", f"refs/heads/{mr['source_branch']}"],
                capture_output=True,
                text=True,
            )
            head = found.stdout.strip() or None
            if head is not None and head != mr["sha"]:
                mr["sha"] = head
                mr["updated_at"] = _now()

    def _list_project_merge_requests(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        self._pushed()
        state = query.get("state", "all")
        found = [
            m
            for m in self.mrs.values()
            if state in ("all", m["state"])
            and query.get("source_branch", m["source_branch"]) == m["source_branch"]
            and m["updated_at"] >= _stamp(query.get("updated_after"))
        ]
        return self._page(query, _sorted(found, query))

    def _create_mr(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        return self._mr_create(params, query, body)

    def _mr_create(self, params: dict[str, str], query: dict[str, str], body: Any, *, fork: bool = False) -> Answer:
        source = body["source_branch"]
        # GitLab refuses a second open merge request of one branch of one project (a fork's is another project's).
        if not fork and any(
            m["source_branch"] == source and m["source_project_id"] == PROJECT_ID and m["state"] == "opened"
            for m in self.mrs.values()
        ):
            return Answer(409, {"message": ["Another open merge request already exists for this source branch"]})
        iid = max(self.mrs, default=0) + 1
        now = _now()
        title = body["title"]
        raw = {"id": next(self.ids), "iid": iid, "project_id": PROJECT_ID, "title": title,
               "description": body.get("description", ""), "state": "opened", "draft": title.startswith("Draft:"),
               "work_in_progress": title.startswith("Draft:"), "source_branch": source,
               "source_project_id": PROJECT_ID, "target_project_id": PROJECT_ID,
               "target_branch": body["target_branch"], "sha": None, "merge_commit_sha": None, "author": self.bot,
               "created_at": now, "updated_at": now, "merged_at": None, "closed_at": None,
               "labels": _names(body.get("labels")),
               "web_url": f"https://gitlab.example.com/{PROJECT}/-/merge_requests/{iid}"}  # fmt: skip
        self.mrs[iid] = raw
        self._pushed()
        return Answer(201, raw)

    def _get_single_mr(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        self._pushed()
        mr = self.mrs.get(int(params["merge_request_iid"]))
        return Answer(200, mr, single=True) if mr else _error(404, "Not found")

    def _update_mr(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        mr = self.mrs.get(int(params["merge_request_iid"]))
        if mr is None:
            return _error(404, "Not found")
        for key in ("title", "description"):
            if key in body:
                mr[key] = body[key]
        mr["draft"] = mr["work_in_progress"] = mr["title"].startswith("Draft:")
        if "state_event" in body and mr["state"] != "merged":
            mr["state"] = "closed" if body["state_event"] == "close" else "opened"
        mr["updated_at"] = _now()
        return Answer(200, mr)

    def approve(self, iid: int, user: dict[str, Any]) -> None:
        """``user`` approves merge request ``iid`` (as on its page)."""
        with self.lock:
            if user not in self.approvals.setdefault(iid, []):
                self.approvals[iid].append(user)

    def _merge_request_approvals(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        iid = int(params["merge_request_iid"])
        if iid not in self.mrs:
            return _error(404, "Not found")
        users = self.approvals.get(iid, [])
        return Answer(200, {"approved": bool(users), "approved_by": [{"user": u} for u in users]}, single=True)

    def _merge_a_merge_request(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        """GitLab's merge: refused (405) unless open and not a draft, and (409) when ``sha`` is not the source
        branch's head now; the branch removed when asked (``removed``), the squash asked for kept in ``merged``."""
        self._pushed()
        iid = int(params["merge_request_iid"])
        mr = self.mrs.get(iid)
        if mr is None:
            return _error(404, "Not found")
        if mr["state"] != "opened" or mr["draft"]:
            return _error(405, "Method Not Allowed")
        if "sha" in body and body["sha"] != mr["sha"]:
            return _error(409, "SHA does not match HEAD of source branch")
        self.merged[iid] = {"squash": bool(body.get("squash"))}
        if body.get("should_remove_source_branch"):
            self.removed.append(mr["source_branch"])
        self.merge(iid)
        return Answer(200, mr)

    def merge(self, iid: int) -> None:
        with self.lock:
            self.mrs[iid] |= {"state": "merged", "merged_at": _now(), "updated_at": _now()}

    # pipelines and jobs ----------------------------------------------------------------------------------------

    def _list_project_pipelines(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        found = [
            p
            for p in self.pipelines
            if all(query.get(key, p[key]) == p[key] for key in ("sha", "ref", "status"))
            and (p["updated_at"] or "") >= _stamp(query.get("updated_after"))
        ]
        found.sort(key=lambda p: p["id"], reverse=query.get("sort", "desc") == "desc")
        return self._page(query, found)

    def _list_pipeline_jobs(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        jobs = self.jobs.get(int(params["pipeline_id"]))
        if jobs is None:
            return _error(404, "Not found")
        scope = query.get("scope")
        return self._page(query, [j for j in jobs if scope in (None, j["status"])])

    def _list_project_jobs(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        jobs = sorted((j for js in self.jobs.values() for j in js), key=lambda j: j["id"])
        if query.get("pagination") != "keyset":
            return self._page(query, jobs[::-1])
        descending = query.get("sort", "desc") == "desc"
        jobs = jobs[::-1] if descending else jobs
        if "cursor" in query:
            last = int(query["cursor"])
            jobs = [j for j in jobs if (j["id"] < last if descending else j["id"] > last)]
        size = int(query.get("per_page", "20"))
        shown, more = jobs[:size], len(jobs) > size
        headers = {}
        if more:
            rest = {**query, "cursor": str(shown[-1]["id"])}
            headers["Link"] = f'<{self.url}/api/v4/projects/{PROJECT_ID}/jobs?{urlencode(rest)}>; rel="next"'
        return Answer(200, shown, headers)

    def _get_a_log_file(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        log = self.traces.get(int(params["job_id"]))
        if isinstance(log, tuple):
            return Answer(200, text="", repeated=log)
        return Answer(200, text=log) if log is not None else _error(404, "Not found")

    # offset pagination -----------------------------------------------------------------------------------------

    def _page(self, query: dict[str, str], items: list[Any]) -> Answer:
        size = min(int(query.get("per_page", "20")), 100)
        page = int(query.get("page", "1"))
        pages = max(1, -(-len(items) // size))
        shown = items[(page - 1) * size : page * size]
        headers = {"X-Page": str(page), "X-Per-Page": str(size), "X-Total": str(len(items)),
                   "X-Total-Pages": str(pages), "X-Next-Page": str(page + 1) if page < pages else "",
                   "X-Prev-Page": str(page - 1) if page > 1 else ""}  # fmt: skip
        links = []
        for rel, number in (("prev", page - 1), ("next", page + 1), ("first", 1), ("last", pages)):
            if 1 <= number <= pages and (rel in ("first", "last") or number != page):
                links.append(f'<{self._self_url(query, number)}>; rel="{rel}"')
        headers["Link"] = ", ".join(links)
        return Answer(200, shown, headers)

    def _self_url(self, query: dict[str, str], page: int) -> str:
        return f"{self.url}{self.serving}?{urlencode({**query, 'page': page}, quote_via=quote)}"


#: Which method of the fake answers each operation of the description (by its operationId).
HANDLERS = {
    "getApiV4User": "_retrieve_the_current_user",
    "getApiV4PersonalAccessTokensSelf": "_get_single_personal_access_token",
    "getApiV4ProjectsId": "_get_a_single_project",
    "getApiV4ProjectsIdMembersAllUserId": "_member",
    "getApiV4ProjectsIdLabels": "_list_labels",
    "postApiV4ProjectsIdLabels": "_create_a_new_label",
    "getApiV4ProjectsIdIssues": "_list_project_issues",
    "postApiV4ProjectsIdIssues": "_new_issue",
    "getApiV4ProjectsIdIssuesIssueIid": "_single_project_issue",
    "putApiV4ProjectsIdIssuesIssueIid": "_edit_an_issue",
    "getApiV4ProjectsIdIssuesIssueIidNotes": "_list_project_issue_notes",
    "getApiV4ProjectsIdIssuesIssueIidLinks": "_list_issue_relations",
    "postApiV4ProjectsIdIssuesIssueIidNotes": "_create_new_issue_note",
    "putApiV4ProjectsIdIssuesIssueIidNotesNoteId": "_modify_existing_issue_note",
    "deleteApiV4ProjectsIdIssuesIssueIidNotesNoteId": "_delete_an_issue_note",
    "postApiV4ProjectsIdMergeRequestsMergeRequestIidNotes": "_create_new_merge_request_note",
    "getApiV4ProjectsIdMergeRequestsMergeRequestIidDiscussions": "_list_project_merge_request_discussion_items",
    "postApiV4ProjectsIdMergeRequestsMergeRequestIidDiscussionsDiscussionIdNotes": "_reply_in_thread",
    "getApiV4ProjectsIdMergeRequests": "_list_project_merge_requests",
    "postApiV4ProjectsIdMergeRequests": "_create_mr",
    "getApiV4ProjectsIdMergeRequestsMergeRequestIid": "_get_single_mr",
    "putApiV4ProjectsIdMergeRequestsMergeRequestIid": "_update_mr",
    "getApiV4ProjectsIdMergeRequestsMergeRequestIidApprovals": "_merge_request_approvals",
    "putApiV4ProjectsIdMergeRequestsMergeRequestIidMerge": "_merge_a_merge_request",
    "getApiV4ProjectsIdPipelines": "_list_project_pipelines",
    "getApiV4ProjectsIdPipelinesPipelineIdJobs": "_list_pipeline_jobs",
    "getApiV4ProjectsIdJobs": "_list_project_jobs",
    "getApiV4ProjectsIdJobsJobIdTrace": "_get_a_log_file",
}


def _names(labels: str | list[str] | None) -> list[str]:
    """Label names as GitLab takes them in a body: a comma-separated string, or a list."""
    if labels is None:
        return []
    return [n for n in (labels.split(",") if isinstance(labels, str) else labels) if n]


def _stamp(value: str | None) -> str:
    """``updated_after`` as a string that compares with the fake's stamps (same format, UTC)."""
    if not value:
        return ""
    when = dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _sorted(items: list[dict[str, Any]], query: dict[str, str]) -> list[dict[str, Any]]:
    key = query.get("order_by", "created_at")
    return sorted(items, key=lambda i: (i[key], i["id"]), reverse=query.get("sort", "desc") == "desc")


def _handler(fake: FakeGitLab) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def date_time_string(self, timestamp: float | None = None) -> str:
            return email.utils.formatdate(time.time() + getattr(self, "skew", 0.0), usegmt=True)

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            if fake.git is not None and parts.path.startswith(f"/{PROJECT}.git/"):
                fake.git.serve(self)  # (git's smart HTTP: no API request)
                return
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake._hold(self.command, parts.path)
            with fake.lock:
                try:
                    answer = fake.handle(self.command, parts.path, query, body, headers)
                except Exception as error:  # a request the fake cannot act on: GitLab would refuse it, say so
                    fake.violations.append(f"request: {self.command} {parts.path}: the fake could not act: {error!r}")
                    answer = _error(400, "Bad request")
                fake._local.drawn = None  # (a stalled creation that made no note draws nothing for the next request)
                self._send(answer, parts.path, query, body, headers)

        def _send(self, answer: Answer, path: str, query: dict[str, str], body: Any, headers: dict[str, str]) -> None:
            status, data, tampered = answer.status, answer.data, False
            for tamper in fake.tampers:
                if tamper.method == self.command and path.startswith(tamper.prefix) and 200 <= status < 300:
                    tamper.served += 1
                    data, tampered = tamper.change(copy.deepcopy(data)), True
                    break
            if answer.text is not None:
                payload, kind = answer.text.encode(), "text/plain; charset=utf-8"
            else:
                payload, kind = (b"" if data is None else json.dumps(data).encode()), "application/json"
            out = {"Content-Type": kind, **answer.headers}
            if answer.single and status == 200 and self.command == "GET":
                etag = 'W/"' + hashlib.sha1(payload).hexdigest() + '"'
                out["ETag"] = etag
                if headers.get("if-none-match") == etag:
                    status, payload = 304, b""
            if status != 401:
                fake.rate_remaining = max(fake.rate_remaining - 1, 0)
                reset = int(dt.datetime.now(dt.UTC).timestamp()) + 60
                out |= {"RateLimit-Limit": str(WINDOW), "RateLimit-Observed": str(WINDOW - fake.rate_remaining),
                        "RateLimit-Remaining": str(fake.rate_remaining), "RateLimit-Reset": str(reset)}  # fmt: skip
            checked = None if (not payload or answer.text is not None) else data
            fake.violations.extend(
                f"response{' (tampered)' if tampered else ''}: {problem}"
                for problem in fake.spec.check_response(self.command, path, status, checked)
            )
            fake.seen.append(Seen(self.command, path, query, body, status, headers))
            self.skew = fake._skew(self.command, path)
            self.send_response(status)
            for key, value in out.items():
                self.send_header(key, value)
            chunk, times = answer.repeated or (payload, 1)
            self.send_header("Content-Length", str(len(chunk) * times))
            self.end_headers()
            for _ in range(times):
                self.wfile.write(chunk)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client killed mid-request is no failure of the fake


@contextlib.contextmanager
def serve() -> Iterator[FakeGitLab]:
    """A fake GitLab on a local port, served from a thread of this process until the block ends."""
    fake = FakeGitLab(gitlab_spec())
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
def gitlab() -> Iterator[FakeGitLab]:
    """A fake GitLab on a local port; the test fails if a request or answer strays from the description of the API."""
    with serve() as fake:
        yield fake
    assert not fake.violations, "the fake GitLab strayed from the description of GitLab's API:\n" + "\n".join(
        fake.violations[:20]
    )


def gitlab_tracker(project: Any) -> Any:
    """The GitLab tracker ``project``'s config names (an ``AutoProject``), opened as beflow opens it."""
    from beflow.app import open_tracker
    from beflow.config import load_project
    from beflow.trackers.gitlab import GitLabTracker

    opened = open_tracker(load_project(project.config_path))
    assert isinstance(opened, GitLabTracker)
    return opened
