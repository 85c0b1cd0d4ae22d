"""A fake Jira Cloud: one project's issues, comments, workflow and permissions, served over HTTP on a local port,
every request and answer checked against Atlassian's published description of the REST API v3
(``tests/support/jira/swagger-v3.v3.json.gz``, pinned whole), as the fake GitHub is checked against octokit's.

It speaks what the Jira tracker meets: basic auth (the account's email and an API token); ``/search/jql`` with
``nextPageToken`` pages, and a search that lags behind the issues (:meth:`FakeJira.freeze_search`: Jira's search is
eventually consistent); a workflow of four statuses in Jira's three categories, with transitions a test can take
away; comments in Atlassian Document Format, whose documents are checked too (beflow never writes a mention or a
smart link); a 429 with ``Retry-After`` and 5xx faults, answered before or after the change is made. Every answer
carries a ``Date``. The description says nothing of an issue's fields (``additionalProperties: {}``): the fake
checks the fields it serves against the schemas of their types (``StatusDetails``, ``Priority``, ``UserDetails``).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime as dt
import email.utils
import functools
import gzip
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.support.openapi import Spec, _nullable

PROJECT = "WID"
PROJECT_ID = "10000"
EMAIL = "bot@example.com"
TOKEN = "ATATT-fake-jira-token-beflow"
BOT = "5b10ac8d82e05b22cc7d4ef5"
#: The Rank field (Jira Software's LexoRank custom field: the board's order).
RANK = "customfield_10019"
#: Jira refuses a comment longer than this (its document, as JSON).
MAX_COMMENT = 32_767
DESCRIPTION = Path(__file__).parent / "jira" / "swagger-v3.v3.json.gz"

#: The workflow's statuses: name -> (id, category key).
STATUSES = {
    "To Do": ("10000", "new"),
    "In Progress": ("3", "indeterminate"),
    "In Review": ("10001", "indeterminate"),
    "Done": ("10002", "done"),
}
#: The project's issue types: name -> (id, whether it is a sub-task); all share the one workflow.
ISSUE_TYPES = {"Task": ("10001", False), "Bug": ("10004", False), "Sub-task": ("10003", True)}
_CATEGORIES = {"new": (2, "To Do"), "indeterminate": (4, "In Progress"), "done": (3, "Done")}
#: What the document of a comment or a description may hold; beflow writes none of ACTING.
ACTING = {"mention", "inlineCard", "blockCard", "embedCard", "emoji", "status", "date", "media", "mediaSingle"}


class JiraSpec(Spec):
    """Atlassian's description, checked by the same machinery as GitHub's."""

    uri = "urn:jira-rest-api"
    title = "Jira Cloud's REST API v3 (Atlassian's swagger-v3.v3.json)"
    error_pointer = "/components/schemas/ErrorCollection"


@functools.cache
def jira_spec() -> JiraSpec:
    """The pinned description, loaded once per session, with two things it says in words only: an array query
    parameter that "accepts a comma-separated list" (``fields``) is checked as one (``explode: false``), and an error
    status listed without a body carries Jira's ``ErrorCollection``."""
    document = json.loads(gzip.decompress(DESCRIPTION.read_bytes()))
    for item in document["paths"].values():
        for operation in item.values():
            for param in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if (
                    param.get("in") == "query"
                    and param.get("schema", {}).get("type") == "array"
                    and "comma-separated list" in param.get("description", "")
                ):
                    param["explode"] = False
            # Jira answers its errors with an ErrorCollection, where the description lists the status alone.
            responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
            for status, response in responses.items():
                if not str(status).startswith("2") and "content" not in response and "$ref" not in response:
                    response["content"] = {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorCollection"}}
                    }
    return JiraSpec(_nullable(document))


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


@dataclass
class Answer:
    status: int
    data: Any = None
    headers: dict[str, str] | None = None


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+0000"


def _error(status: int, *messages: str) -> Answer:
    return Answer(status, {"errorMessages": list(messages), "errors": {}})


def doc(text: str) -> dict[str, Any]:
    """A one-paragraph ADF document (what a person types)."""
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}],
    }


class FakeJira:
    """The state of one project and what the server saw."""

    def __init__(self, api: JiraSpec) -> None:
        self.spec = api
        self.lock = threading.RLock()
        self.numbers = itertools.count(1)
        self.ids = itertools.count(10100)
        self.comment_ids = itertools.count(20000)
        self.users: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}  # the basic header's value -> account id
        self.editors: set[str] = set()  # accounts with EDIT_ISSUES in the project
        self.issues: dict[str, dict[str, Any]] = {}
        self.comments: dict[str, list[dict[str, Any]]] = {}
        #: Transition name -> the status it goes to; a test takes one away to see beflow refuse.
        self.transitions = {name: name for name in STATUSES}
        self.permissions = {
            key: True
            for key in (
                "BROWSE_PROJECTS", "CREATE_ISSUES", "EDIT_ISSUES", "TRANSITION_ISSUES", "ADD_COMMENTS",
                "EDIT_OWN_COMMENTS", "DELETE_OWN_COMMENTS",
            )
        }  # fmt: skip
        #: Groups by name -> their members; project roles by name -> (id, member accounts, member groups).
        self.groups: dict[str, set[str]] = {"beflow-bots": {BOT}, "jira-users": {BOT}}
        self.roles: dict[str, tuple[str, set[str], set[str]]] = {
            "Administrators": ("10002", set(), set()),
            "Developers": ("10000", set(), {"beflow-bots"}),
            "Users": ("10001", set(), {"jira-users"}),
        }
        #: Whether the account administers the project (reading its roles needs it).
        self.project_admin = False
        #: Watchers of each issue, and who Jira told of each comment: (issue key, comment id, accounts told) — those
        #: watchers who may see the comment, as Jira's notifications honour a comment's visibility.
        self.watchers: dict[str, set[str]] = {}
        self.notified: list[tuple[str, str, set[str]]] = []
        #: Whether the account may read the project's workflows (View (read-only) workflow): else a 403.
        self.workflow_readable = True
        #: The issue types the account may create (createmeta); a test takes one away.
        self.creatable = {name for name, (_, subtask) in ISSUE_TYPES.items() if not subtask}
        self.frozen: dict[str, dict[str, Any]] | None = None
        #: Keys of issues moved to another project -> their keys now (Jira still answers to the old key).
        self.moved: dict[str, str] = {}
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        self.violations: list[str] = []
        self.server: ThreadingHTTPServer | None = None
        #: Seconds the ``Date`` of every answer is off (a proxy's, or a clock's); what Jira stamps keeps the true time.
        self.date_skew = 0.0
        self.bot = self.user("beflow bot", BOT)
        self.tokens[base64.b64encode(f"{EMAIL}:{TOKEN}".encode()).decode()] = BOT

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- arranging ---------------------------------------------------------------------------------------------------

    def user(self, name: str, account: str | None = None, *, editor: bool = False) -> dict[str, Any]:
        account = account or f"acc-{len(self.users) + 1:04d}"
        made = {"accountId": account, "displayName": name, "active": True, "accountType": "atlassian",
                "self": f"http://jira/rest/api/3/user?accountId={account}"}  # fmt: skip
        self.users[account] = made
        if editor or account == BOT:
            self.editors.add(account)
        return made

    def token_for(self, account: str, email: str, token: str) -> None:
        self.tokens[base64.b64encode(f"{email}:{token}".encode()).decode()] = account

    def add_issue(
        self,
        summary: str,
        *,
        labels: list[str] | None = None,
        status: str = "To Do",
        description: Any = None,
        priority: str | None = None,
        created: str | None = None,
    ) -> str:
        with self.lock:
            key = f"{PROJECT}-{next(self.numbers)}"
            stamp = created or _now()
            fields: dict[str, Any] = {
                "summary": summary,
                "status": self._status(status),
                "labels": list(labels if labels is not None else ["beflow"]),
                "priority": _priority(priority or "3"),
                "created": stamp,
                "updated": stamp,
                "description": description,
            }
            fields[RANK] = f"0|i{len(self.issues) + 1:05d}:"  # (a new issue goes to the bottom of the board)
            self.issues[key] = {"id": str(next(self.ids)), "key": key, "fields": fields}
            self.comments[key] = []
            return key

    def add_comment(
        self, key: str, body: Any, *, author: str = BOT, visibility: dict[str, str] | None = None
    ) -> dict[str, Any]:
        with self.lock:
            number = next(self.comment_ids)
            stamp = _now()
            made = {"id": str(number), "author": self.users[author], "body": body, "created": stamp,
                    "updated": stamp, "self": f"http://jira/rest/api/3/issue/{key}/comment/{number}"}  # fmt: skip
            if visibility is not None:
                made["visibility"] = dict(visibility)
            self.comments[key].append(made)
            told = {w for w in self.watchers.get(key, set()) if w != author and self.sees(w, visibility)}
            self.notified.append((key, str(number), told))
            self._touch(key)
            return made

    def sees(self, account: str, visibility: dict[str, str] | None) -> bool:
        """Whether ``account`` may see a comment of that visibility (None: everyone who sees the issue)."""
        if visibility is None:
            return True
        if visibility.get("type") == "group":
            return account in self.groups.get(visibility.get("value", ""), set())
        role = self.roles.get(visibility.get("value", ""))
        return role is not None and (account in role[1] or any(account in self.groups.get(g, set()) for g in role[2]))

    def move(self, key: str, status: str) -> None:
        """A person moves the issue (no transition checks)."""
        with self.lock:
            self.issues[key]["fields"]["status"] = self._status(status)
            self._touch(key)

    def move_to_project(self, key: str, project: str) -> str:
        """A person moves the issue to another project: a new key, the same id; the old key still finds it."""
        with self.lock:
            number = 1 + sum(1 for k in self.issues if k.startswith(project + "-"))
            new = f"{project}-{number}"
            issue = self.issues.pop(key)
            issue["key"] = new
            self.issues[new] = issue
            self.comments[new] = self.comments.pop(key)
            self.moved[key] = new
            self._touch(new)
            return new

    def rank_before(self, key: str, other: str) -> None:
        """A person drags ``key`` above ``other`` on the board (Jira's Rank, a LexoRank string)."""
        with self.lock:
            self.issues[key]["fields"][RANK] = self.issues[other]["fields"][RANK][:-1] + "0:"  # (sorts just before)

    def status(self, key: str) -> str:
        return str(self.issues[key]["fields"]["status"]["name"])

    def labels(self, key: str) -> list[str]:
        return list(self.issues[key]["fields"]["labels"])

    def freeze_search(self) -> None:
        """From now on ``/search/jql`` answers from the issues as they are now (Jira's index lagging behind)."""
        with self.lock:
            self.frozen = copy.deepcopy(self.issues)

    def fail(
        self,
        status: int,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
        only: str | None = None,
        prefix: str = "",
        after: bool = False,
    ) -> None:
        body = {"errorMessages": [f"{status} fault"], "errors": {}}
        self.faults.extend(Fault(status, headers or {}, body, only, prefix, after) for _ in range(times))

    def requests(self, method: str | None = None, prefix: str = "") -> list[Seen]:
        return [s for s in self.seen if (method is None or s.method == method) and s.path.startswith(prefix)]

    def _status(self, name: str) -> dict[str, Any]:
        sid, category = STATUSES[name]
        cid, cname = _CATEGORIES[category]
        return {"id": sid, "name": name, "self": f"http://jira/rest/api/3/status/{sid}", "description": "",
                "iconUrl": "http://jira/images/status.png",
                "statusCategory": {"id": cid, "key": category, "name": cname, "colorName": "blue-gray",
                                   "self": f"http://jira/rest/api/3/statuscategory/{cid}"}}  # fmt: skip

    def _touch(self, key: str) -> None:
        self.issues[key]["fields"]["updated"] = _now()

    # -- answering ---------------------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any, headers: dict[str, str]) -> Answer:
        with self.lock:
            for problem in self.spec.check_request(method, path, query, body):
                self.violations.append(f"request: {problem}")
            self._check_documents(method, path, body)
            account = self.tokens.get(headers.get("authorization", "").removeprefix("Basic "))
            if account is None:
                return _error(401, "Client must be authenticated to access this resource.")
            fault = next((f for f in self.faults if f.only in (None, method) and path.startswith(f.prefix)), None)
            if fault is not None:
                self.faults.remove(fault)
                if fault.after:
                    self._answer(method, path, query, body, account)
                return Answer(fault.status, fault.body, dict(fault.headers))
            return self._answer(method, path, query, body, account)

    def _check_documents(self, method: str, path: str, body: Any) -> None:
        if method not in ("POST", "PUT") or not isinstance(body, dict):
            return
        documents = [body.get("body"), (body.get("fields") or {}).get("description")]
        for document in documents:
            if document is None:
                continue
            if not (isinstance(document, dict) and document.get("type") == "doc" and document.get("version") == 1):
                self.violations.append(f"request: {method} {path}: a document that is no ADF doc")
                continue
            found = sorted(_kinds(document) & ACTING)
            if found:
                self.violations.append(f"request: {method} {path}: beflow wrote nodes that act: {', '.join(found)}")

    def _answer(self, method: str, path: str, query: dict[str, str], body: Any, account: str) -> Answer:
        try:
            route, params = self.spec.route(method, path)
        except LookupError:
            return _error(404, "Not Found")
        handler = getattr(self, "_" + route.operation["operationId"], None)
        if handler is None:
            return _error(404, f"the fake does not serve {route.operation['operationId']}")
        params["account"] = account
        answer: Answer = handler(params, query, body)
        return answer

    def _issue(self, params: dict[str, str]) -> dict[str, Any] | None:
        wanted = self.moved.get(params["issueIdOrKey"], params["issueIdOrKey"])
        return self.issues.get(wanted) or next((i for i in self.issues.values() if i["id"] == wanted), None)

    # users, the project, permissions ---------------------------------------------------------------------------------

    def _getCurrentUser(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        user = dict(self.users[params["account"]])
        if "groups" in query.get("expand", "").split(","):
            mine = [{"name": g, "groupId": f"g-{g}", "self": f"http://jira/rest/api/3/group?groupId=g-{g}"}
                    for g, members in sorted(self.groups.items()) if params["account"] in members]  # fmt: skip
            user["groups"] = {"size": len(mine), "items": mine}
        return Answer(200, user)

    def _getProjectRoles(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        if not self.project_admin:
            return _error(403, "You cannot view the roles of this project.")
        return Answer(200, {name: f"http://jira/rest/api/3/project/{PROJECT}/role/{rid}"
                            for name, (rid, _, _) in self.roles.items()})  # fmt: skip

    def _getProjectRole(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        if not self.project_admin:
            return _error(403, "You cannot view the roles of this project.")
        found = next(((n, r) for n, r in self.roles.items() if r[0] == params["id"]), None)
        if found is None:
            return _error(404, "No project role with that id.")
        name, (rid, users, groups) = found
        actors = [{"id": n, "displayName": self.users[a]["displayName"], "type": "atlassian-user-role-actor",
                   "actorUser": {"accountId": a}} for n, a in enumerate(sorted(users))]  # fmt: skip
        actors += [{"id": 100 + n, "displayName": g, "name": g, "type": "atlassian-group-role-actor",
                    "actorGroup": {"name": g, "displayName": g, "groupId": f"g-{g}"}}
                   for n, g in enumerate(sorted(groups))]  # fmt: skip
        return Answer(200, {"id": int(rid), "name": name, "self": f"http://jira/rest/api/3/project/{PROJECT}/role/{rid}",
                            "actors": actors})  # fmt: skip

    def _getProject(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        if params["projectIdOrKey"] not in (PROJECT, PROJECT_ID):
            return _error(404, "No project could be found with key.")
        return Answer(200, {"id": PROJECT_ID, "key": PROJECT, "name": "Widgets", "self": "http://jira/project"})

    def _getMyPermissions(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        keys = query.get("permissions", "").split(",")
        held = {
            k: {"id": str(n), "key": k, "name": k.title(), "type": "PROJECT",
                "havePermission": self.permissions.get(k, False)}
            for n, k in enumerate(keys)
        }  # fmt: skip
        return Answer(200, {"permissions": held})

    def _findUsersWithAllPermissions(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        account = query.get("accountId")
        found = [self.users[account]] if account in self.editors and account in self.users else []
        return Answer(200, found)

    # the workflow and the issue types -------------------------------------------------------------------------------

    def _type(self, name: str) -> dict[str, Any]:
        tid, subtask = ISSUE_TYPES[name]
        return {"id": tid, "name": name, "subtask": subtask, "self": f"http://jira/rest/api/3/issuetype/{tid}"}

    def _getAllStatuses(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        if params["projectIdOrKey"] not in (PROJECT, PROJECT_ID):
            return _error(404, "No project could be found with key.")
        statuses = [self._status(name) for name in STATUSES]
        return Answer(200, [{**self._type(name), "statuses": statuses} for name in ISSUE_TYPES])

    def _readWorkflows(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        if not self.workflow_readable:
            return _error(403, "You don't have permission to view these workflows.")
        pairs = body.get("projectAndIssueTypes") or []
        if any(p.get("projectId") != PROJECT_ID for p in pairs):
            return _error(400, "The project does not exist.")
        statuses = [
            {"id": sid, "name": name, "statusReference": sid, "description": "", "scope": {"type": "GLOBAL"},
             "statusCategory": {"new": "TODO", "indeterminate": "IN_PROGRESS", "done": "DONE"}[category]}
            for name, (sid, category) in STATUSES.items()
        ]  # fmt: skip
        transitions = [{"id": "1", "name": "Create", "type": "INITIAL", "toStatusReference": STATUSES["To Do"][0],
                        "links": [], "actions": [], "validators": [], "triggers": [], "properties": {}}]  # fmt: skip
        transitions += [
            {"id": str(11 + 10 * n), "name": name, "type": "GLOBAL", "toStatusReference": STATUSES[to][0],
             "links": [], "actions": [], "validators": [], "triggers": [], "properties": {}, "description": ""}
            for n, (name, to) in enumerate(self.transitions.items())
        ]  # fmt: skip
        workflow = {"id": "b9ff2384-d3b6-4d4e-9509-3ee19f607168", "name": "Widgets workflow", "description": "",
                    "isEditable": True, "scope": {"type": "GLOBAL"}, "transitions": transitions,
                    "statuses": [{"statusReference": s["statusReference"], "deprecated": False, "properties": {}}
                                 for s in statuses],
                    "version": {"id": "f010ac1b-3dd3-43a3-aa66-0ee8a447f76e", "versionNumber": 0}}  # fmt: skip
        return Answer(200, {"statuses": statuses, "workflows": [workflow] if pairs else []})

    def _getCreateIssueMetaIssueTypes(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        if params["projectIdOrKey"] not in (PROJECT, PROJECT_ID):
            return _error(404, "No project could be found with key.")
        types = [self._type(name) for name in ISSUE_TYPES if name in self.creatable]
        start, size = int(query.get("startAt", "0")), int(query.get("maxResults", "50"))
        page = types[start : start + size]
        return Answer(200, {"issueTypes": page, "startAt": start, "maxResults": size, "total": len(types)})

    # issues ----------------------------------------------------------------------------------------------------------

    def _searchAndReconsileIssuesUsingJql(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        jql = query.get("jql", "")
        source = self.frozen if self.frozen is not None else self.issues
        chosen = _ordered(jql, [copy.deepcopy(i) for i in source.values() if _matches(jql, i)])
        size = int(query.get("maxResults", "50"))
        start = int(query["nextPageToken"].removeprefix("page-")) if "nextPageToken" in query else 0
        page = chosen[start : start + size]
        answer: dict[str, Any] = {"issues": page, "isLast": start + size >= len(chosen)}
        if start + size < len(chosen):
            answer["nextPageToken"] = f"page-{start + size}"
        return Answer(200, answer)

    def _getIssue(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        found = self._issue(params)
        if found is None:
            return _error(404, "Issue does not exist or you do not have permission to see it.")
        return Answer(200, copy.deepcopy(found))

    def _createIssue(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        fields = body["fields"]
        if fields.get("project", {}).get("key") != PROJECT:
            return Answer(400, {"errorMessages": [], "errors": {"project": "valid project is required"}})
        if (fields.get("issuetype") or {}).get("name") not in self.creatable:
            return Answer(400, {"errorMessages": [], "errors": {"issuetype": "Specify a valid issue type"}})
        key = self.add_issue(fields["summary"], labels=fields.get("labels", []), description=fields.get("description"),
                             priority=(fields.get("priority") or {}).get("id"))  # fmt: skip
        made = self.issues[key]
        return Answer(201, {"id": made["id"], "key": key, "self": f"http://jira/rest/api/3/issue/{made['id']}"})

    def _editIssue(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        found = self._issue(params)
        if found is None:
            return _error(404, "Issue does not exist or you do not have permission to see it.")
        labels = found["fields"]["labels"]
        for change in (body.get("update") or {}).get("labels", []):
            if "add" in change and change["add"] not in labels:
                labels.append(change["add"])
            if "remove" in change and change["remove"] in labels:
                labels.remove(change["remove"])
        if "labels" in (body.get("fields") or {}):
            found["fields"]["labels"] = list(body["fields"]["labels"])
        self._touch(found["key"])
        return Answer(204)

    def _getTransitions(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        found = self._issue(params)
        if found is None:
            return _error(404, "Issue does not exist or you do not have permission to see it.")
        current = found["fields"]["status"]["name"]
        offered = [
            {"id": str(11 + 10 * n), "name": name, "to": self._status(to), "hasScreen": False, "isGlobal": True,
             "isInitial": False, "isAvailable": True, "isConditional": False, "isLooped": False}
            for n, (name, to) in enumerate(self.transitions.items())
            if to != current
        ]  # fmt: skip
        return Answer(200, {"transitions": offered})

    def _doTransition(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        found = self._issue(params)
        if found is None:
            return _error(404, "Issue does not exist or you do not have permission to see it.")
        wanted = (body.get("transition") or {}).get("id")
        current = found["fields"]["status"]["name"]
        for n, (_, to) in enumerate(self.transitions.items()):
            if str(11 + 10 * n) == wanted and to != current:
                found["fields"]["status"] = self._status(to)
                self._touch(found["key"])
                return Answer(204)
        said = "It seems that you have tried to perform a workflow operation that is not valid"
        return Answer(400, {"errorMessages": [], "errors": {"transition": said}})

    # comments --------------------------------------------------------------------------------------------------------

    def _getComments(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        found = self._issue(params)
        if found is None:
            return _error(404, "Issue does not exist or you do not have permission to see it.")
        comments = [c for c in self.comments[found["key"]] if self.sees(params["account"], c.get("visibility"))]
        start, size = int(query.get("startAt", "0")), int(query.get("maxResults", "100"))
        page = copy.deepcopy(comments[start : start + size])
        return Answer(200, {"comments": page, "startAt": start, "maxResults": size, "total": len(comments)})

    def _addComment(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        found = self._issue(params)
        if found is None:
            return _error(404, "Issue does not exist or you do not have permission to see it.")
        if len(json.dumps(body["body"])) > MAX_COMMENT:
            return Answer(400, {"errorMessages": [], "errors": {"comment": "The entered text is too long."}})
        visibility = body.get("visibility")
        if visibility is not None and not self.sees(params["account"], visibility):
            said = f"You are currently not a member of the {visibility.get('type')}: {visibility.get('value')}."
            return Answer(400, {"errorMessages": [], "errors": {"commentLevel": said}})
        made = self.add_comment(found["key"], body["body"], author=params["account"], visibility=visibility)
        return Answer(201, copy.deepcopy(made))

    def _comment(self, params: dict[str, str]) -> dict[str, Any] | None:
        found = self._issue(params)
        if found is None:
            return None
        return next((c for c in self.comments[found["key"]] if c["id"] == params["id"]), None)

    def _updateComment(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        comment = self._comment(params)
        if comment is None:
            return _error(404, "Can not find a comment for the id.")
        if len(json.dumps(body["body"])) > MAX_COMMENT:
            return Answer(400, {"errorMessages": [], "errors": {"comment": "The entered text is too long."}})
        if comment["author"]["accountId"] != params["account"]:
            return _error(403, "You do not have the permission to edit this comment.")
        comment["body"], comment["updated"] = body["body"], _now()
        if body.get("visibility") is not None:
            comment["visibility"] = dict(body["visibility"])
        return Answer(200, copy.deepcopy(comment))

    def _deleteComment(self, params: dict[str, str], query: dict[str, str], body: Any) -> Answer:
        comment = self._comment(params)
        if comment is None:
            return _error(404, "Can not find a comment for the id.")
        issue = self._issue(params)
        assert issue is not None
        self.comments[issue["key"]].remove(comment)
        return Answer(204)

    # checking what is served -----------------------------------------------------------------------------------------

    def check_fields(self, method: str, path: str, data: Any) -> None:
        """The fields of the issues served, against their types' schemas (the description leaves ``fields`` open)."""
        issues = data.get("issues", []) if isinstance(data, dict) and "issues" in data else [data]
        for issue in issues:
            fields = issue.get("fields") if isinstance(issue, dict) else None
            if not isinstance(fields, dict):
                continue
            for name, pointer in (("status", "StatusDetails"), ("priority", "Priority")):
                if fields.get(name) is not None:
                    for problem in self.spec.errors(f"/components/schemas/{pointer}", fields[name]):
                        self.violations.append(f"response: {method} {path}: fields.{name}: {problem}")


def _kinds(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_kinds(n) for n in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {node["type"]} if isinstance(node.get("type"), str) else set()
    for mark in node.get("marks") or []:
        if isinstance(mark, dict) and mark.get("type") == "link":
            href = (mark.get("attrs") or {}).get("href", "")
            if not re.match(r"https?://", str(href)):
                found.add("link to a non-http address")
    return found | _kinds(node.get("content"))


_CLAUSE = re.compile(r'(labels|project) = "([^"]+)"')


def _matches(jql: str, issue: dict[str, Any]) -> bool:
    """The part of the JQL beflow writes that the fake understands: project, labels, not Done."""
    fields = issue["fields"]
    for name, value in _CLAUSE.findall(jql):
        if name == "project" and not issue["key"].startswith(value + "-"):
            return False
        if name == "labels" and value not in fields["labels"]:
            return False
    return not ("statusCategory != Done" in jql and fields["status"]["statusCategory"]["key"] == "done")


_TERM = re.compile(r"^\s*(priority|Rank|created|key)\s+(ASC|DESC)\s*$", re.IGNORECASE)


def _ordered(jql: str, issues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issues in the order of the JQL's ``ORDER BY`` (priority, Rank, created, key; ascending or descending), else
    by key as Jira's default; a term the fake does not know is a violation of what beflow should send."""
    _, _, order = jql.rpartition("ORDER BY ")
    terms = [_TERM.match(term) for term in order.split(",")] if order else []
    if any(t is None for t in terms):
        raise ValueError(f"the fake does not order by {order!r}")
    for term in reversed([t for t in terms if t is not None]):
        field, way = term.group(1).lower(), term.group(2).upper()

        def value(issue: dict[str, Any], field: str = field) -> Any:
            fields = issue["fields"]
            if field == "priority":  # (Highest is id 1: the highest first is DESC)
                return -int(fields["priority"]["id"])
            if field == "rank":
                return fields[RANK]
            if field == "created":
                return fields["created"]
            return int(issue["key"].rpartition("-")[2])

        issues.sort(key=value, reverse=way == "DESC")
    return issues


def _priority(pid: str) -> dict[str, Any]:
    names = {"1": "Highest", "2": "High", "3": "Medium", "4": "Low", "5": "Lowest"}
    return {"id": pid, "name": names.get(pid, "Medium"), "self": f"http://jira/rest/api/3/priority/{pid}",
            "iconUrl": "http://jira/images/priority.svg", "statusColor": "#ffffff", "description": ""}  # fmt: skip


def _handler(fake: FakeJira) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def date_time_string(self, timestamp: float | None = None) -> str:
            return email.utils.formatdate(time.time() + fake.date_skew, usegmt=True)

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            with fake.lock:
                try:
                    answer = fake.handle(self.command, parts.path, query, body, headers)
                except Exception as error:  # a request the fake cannot act on: Jira would refuse it, say so
                    fake.violations.append(f"request: {self.command} {parts.path}: the fake could not act: {error!r}")
                    answer = _error(400, "Bad request")
                status, data = answer.status, answer.data
                payload = b"" if data is None else json.dumps(data).encode()
                fake.violations.extend(
                    f"response: {p}" for p in fake.spec.check_response(self.command, parts.path, status, data)
                )
                if 200 <= status < 300 and self.command == "GET":
                    fake.check_fields(self.command, parts.path, data)
                fake.seen.append(Seen(self.command, parts.path, query, body, status))
            self.send_response(status)
            self.send_header("Content-Type", "application/json;charset=UTF-8")
            for key, value in (answer.headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client killed mid-request is no failure of the fake


@contextlib.contextmanager
def serve() -> Iterator[FakeJira]:
    """A fake Jira on a local port, served from a thread of this process until the block ends."""
    fake = FakeJira(jira_spec())
    server = _Server(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.server = server
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    """A fake Jira on a local port; the test fails if a request or answer strays from Atlassian's description."""
    with serve() as fake:
        yield fake
    assert not fake.violations, "the fake Jira strayed from Atlassian's description of its API:\n" + "\n".join(
        fake.violations[:20]
    )
