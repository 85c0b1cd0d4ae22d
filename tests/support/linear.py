"""A fake Linear: one workspace's teams, workflow states, labels, projects, issues, comments, agent sessions and
activities, served over HTTP on a local port as Linear's GraphQL endpoint, every request executed with graphql-core
against Linear's published schema (pinned in ``tests/support/linear/``, built once per test session).

Executing against the schema is what holds the fake to Linear: a request that does not validate is refused as Linear
refuses it (and recorded as a violation: beflow sent it), and an answer can only have the schema's shape, since
graphql-core shapes it from the query; state the fake lacks for a field a query selects is a null where the schema
allows none, recorded as a violation too. The state is kept as dicts shaped like Linear's types, which graphql-core's
default resolver reads key by key; connections (``comments(first:, after:, filter:)``), the root fields and the
mutations have resolvers here.

It speaks what the Linear tracker will meet: a personal API key in ``Authorization: <key>`` and an OAuth token in
``Authorization: Bearer <token>`` (an app's, with ``actor=app``, is an app user that may open agent sessions);
cursor pagination (``first``/``after``, ``orderBy``); ``IssueFilter`` and friends (the comparators beflow uses; one
the fake does not implement is a violation, never ignored); client-chosen ids on creation (a second create with a
taken id fails); rate limiting by two leaky buckets, requests and complexity, with the headers Linear documents and a
``RATELIMITED`` error when one is spent; faults injected by status (5xx storms), answered before or after the change
is made; and a record of every request.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import itertools
import json
import math
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    build_schema,
    execute,
    get_named_type,
    parse,
    validate,
    value_from_ast_untyped,
)

from tests.support.gitlab import _Server

SCHEMA = Path(__file__).with_name("linear") / "schema.graphql"
#: The pinned schema's SHA-256 (tests/support/linear/README.md says where it comes from and how to refresh it).
SCHEMA_SHA256 = "b00d24d8d252a306f5e2088267b1a17dd6e4442f8b793928410b8d4673a7081d"

#: A person's personal API key (sent bare), the same person's OAuth token, and an app's OAuth token (``actor=app``).
API_KEY = "lin_api_fakekeyofbeflowstests0000000000"
OAUTH_TOKEN = "lin_oauth_fakepersontoken000000000000"
APP_TOKEN = "lin_oauth_fakeapptoken0000000000000000"
#: The fake's buckets (Linear's own numbers vary by kind of token and plan; the headers say what they are).
REQUESTS_LIMIT = 1500
COMPLEXITY_LIMIT = 250_000
#: The page size Linear gives a connection asked without ``first``, and the most it gives.
DEFAULT_PAGE, MAX_PAGE = 50, 250


@functools.cache
def linear_schema() -> GraphQLSchema:
    """Linear's schema with the fake's resolvers, built once per test session (the file is 1.2 MB: about a second)."""
    schema = build_schema(SCHEMA.read_text(encoding="utf-8"))
    _install(schema)
    return schema


# -- records ---------------------------------------------------------------------------------------------------------


@dataclass
class Fault:
    status: int
    body: Any
    field: str | None
    after: bool
    #: Headers of the answer beyond the buckets' (a rate limit's own reset, ``Retry-After``).
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    """A request as the fake saw it: the operation, its root fields, what was asked and what came of it."""

    operation: str | None
    fields: list[str]
    query: str
    variables: dict[str, Any]
    #: ``key`` (a bare personal API key), ``bearer`` (an OAuth token) or None (no ``Authorization``).
    auth: str | None
    status: int
    codes: list[str]


@dataclass
class Answer:
    status: int
    data: Any
    headers: dict[str, str] = field(default_factory=dict)
    text: str | None = None


class Refusal(Exception):
    """Linear refusing a request (a resolver raises it): it reaches the answer as a GraphQL error with Linear's
    ``extensions``, and is no violation."""

    KINDS: ClassVar[dict[str, str]] = {
        "INVALID_INPUT": "invalid input",
        "FORBIDDEN": "forbidden",
        "RATELIMITED": "ratelimited",
        "AUTHENTICATION_ERROR": "authentication error",
    }

    def __init__(self, code: str, message: str, presentable: str | None = None) -> None:
        super().__init__(message)
        self.extensions = {"code": code, "type": self.KINDS.get(code, code.lower()), "userError": True,
                           "userPresentableMessage": presentable or message}  # fmt: skip


class Violation(Exception):
    """Something the fake does not implement was asked of it: the test fails (never a silent guess)."""


def _error(code: str, message: str) -> dict[str, Any]:
    return {"message": message, "extensions": Refusal(code, message).extensions}


@dataclass
class Ctx:
    fake: FakeLinear
    user: dict[str, Any]


# -- the workspace ---------------------------------------------------------------------------------------------------


class FakeLinear:
    """The state of one workspace and what the server saw."""

    def __init__(self, schema: GraphQLSchema) -> None:
        self.schema = schema
        self.lock = threading.RLock()
        self.numbers = itertools.count(1)
        self.clock = dt.datetime(2026, 7, 1, 9, 0, tzinfo=dt.UTC)
        self.org = {"id": self._id(), "name": "Acme", "urlKey": "acme"}
        self.users: dict[str, dict[str, Any]] = {}
        #: token -> (user id, "key" | "bearer")
        self.tokens: dict[str, tuple[str, str]] = {}
        self.teams: dict[str, dict[str, Any]] = {}
        self.states: list[dict[str, Any]] = []
        self.labels: list[dict[str, Any]] = []
        self.projects: list[dict[str, Any]] = []
        self.issues: list[dict[str, Any]] = []
        self.comments: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, dict[str, Any]] = {}
        self.activities: dict[str, dict[str, Any]] = {}
        self.faults: list[Fault] = []
        self.seen: list[Seen] = []
        self.violations: list[str] = []
        self.requests_remaining = REQUESTS_LIMIT
        self.complexity_remaining = COMPLEXITY_LIMIT
        self.server: _Server | None = None
        self.person = self.user("Ada Lovelace")
        self.tokens[API_KEY] = (self.person["id"], "key")
        self.tokens[OAUTH_TOKEN] = (self.person["id"], "bearer")
        self.app = self.user("beflow", app=True)
        self.tokens[APP_TOKEN] = (self.app["id"], "bearer")
        self.team = self.add_team("ENG", "Engineering")

    @property
    def url(self) -> str:
        """The GraphQL endpoint (``tracker.api_url``)."""
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/graphql"

    def _id(self) -> str:
        return str(uuid.uuid4())

    def now(self) -> str:
        """Linear's clock: ISO 8601 with milliseconds, each reading later than the last (so ``updatedAt`` orders)."""
        with self.lock:
            self.clock = max(self.clock + dt.timedelta(milliseconds=1), dt.datetime.now(dt.UTC))
            return self.clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    # -- arranging -----------------------------------------------------------------------------------------------

    def user(self, name: str, *, app: bool = False, guest: bool = False) -> dict[str, Any]:
        """A user of the workspace: a person (a member, or a ``guest`` let into some teams), or an app user (an OAuth
        app installed with ``actor=app``)."""
        with self.lock:
            handle = re.sub(r"\W+", ".", name.lower())
            now = self.now()
            raw = {"id": self._id(), "name": name, "displayName": handle, "email": f"{handle}@acme.example",
                   "app": app, "active": True, "admin": False, "guest": guest, "createdAt": now, "updatedAt": now,
                   "url": f"https://linear.app/acme/profiles/{handle}", "archivedAt": None,
                   "supportsAgentSessions": app}  # fmt: skip
            self.users[raw["id"]] = raw
            return raw

    def token(self, user: dict[str, Any], *, bearer: bool = True) -> str:
        """A token of ``user``: an OAuth token (``Bearer``) or a personal API key."""
        with self.lock:
            token = ("lin_oauth_" if bearer else "lin_api_") + hashlib.sha1(self._id().encode()).hexdigest()
            self.tokens[token] = (user["id"], "bearer" if bearer else "key")
            return token

    def add_team(self, key: str, name: str) -> dict[str, Any]:
        """A team with Linear's default workflow (and an ``In Review`` state, as many teams add)."""
        with self.lock:
            now = self.now()
            team: dict[str, Any] = {"id": self._id(), "key": key, "name": name, "createdAt": now, "updatedAt": now,
                                    "archivedAt": None, "states": [], "labels": [], "issues": [],
                                    "organization": self.org}  # fmt: skip
            self.teams[team["id"]] = team
            for position, (state, kind) in enumerate(
                [
                    ("Backlog", "backlog"),
                    ("Todo", "unstarted"),
                    ("In Progress", "started"),
                    ("In Review", "started"),
                    ("Done", "completed"),
                    ("Canceled", "canceled"),
                    ("Duplicate", "canceled"),
                ]
            ):
                self.add_state(team, state, kind, float(position))
            return team

    def add_state(self, team: dict[str, Any], name: str, kind: str, position: float) -> dict[str, Any]:
        with self.lock:
            now = self.now()
            raw = {"id": self._id(), "name": name, "type": kind, "position": position, "color": "#bec2c8",
                   "description": None, "team": team, "createdAt": now, "updatedAt": now,
                   "archivedAt": None}  # fmt: skip
            self.states.append(raw)
            team["states"].append(raw)
            return raw

    def state(self, name: str, team: dict[str, Any] | None = None) -> dict[str, Any]:
        team = team or self.team
        return next(s for s in team["states"] if s["name"] == name)

    def label(self, name: str, team: dict[str, Any] | None = None) -> dict[str, Any]:
        """The team's label of ``name``, made if it has none."""
        with self.lock:
            team = team or self.team
            found = next((lb for lb in team["labels"] if lb["name"] == name), None)
            if found is None:
                now = self.now()
                found = {"id": self._id(), "name": name, "color": "#95a2b3", "description": None, "team": team,
                         "createdAt": now, "updatedAt": now, "archivedAt": None, "isGroup": False,
                         "parent": None}  # fmt: skip
                self.labels.append(found)
                team["labels"].append(found)
            return found

    def project(self, name: str) -> dict[str, Any]:
        with self.lock:
            found = next((p for p in self.projects if p["name"] == name), None)
            if found is None:
                now = self.now()
                found = {"id": self._id(), "name": name, "createdAt": now, "updatedAt": now, "archivedAt": None,
                         "url": f"https://linear.app/acme/project/{name.lower()}"}  # fmt: skip
                self.projects.append(found)
            return found

    def add_issue(
        self,
        title: str,
        *,
        description: str | None = "",
        labels: list[str] | None = None,
        state: str = "Todo",
        priority: int = 0,
        project: str | None = None,
        team: dict[str, Any] | None = None,
        creator: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        with self.lock:
            team = team or self.team
            number = len(team["issues"]) + 1
            identifier = f"{team['key']}-{number}"
            now = self.now()
            raw: dict[str, Any] = {
                "id": self._id(), "identifier": identifier, "number": float(number), "title": title,
                "description": description, "priority": float(priority),
                "priorityLabel": ["No priority", "Urgent", "High", "Medium", "Low"][priority],
                "createdAt": now, "updatedAt": now, "archivedAt": None, "startedAt": None, "completedAt": None,
                "canceledAt": None, "url": f"https://linear.app/acme/issue/{identifier.lower()}",
                "branchName": f"ada/{identifier.lower()}", "state": self.state(state, team), "team": team,
                "project": self.project(project) if project else None,
                "labels": [self.label(name, team) for name in labels or []], "assignee": None, "delegate": None,
                "creator": creator or self.person, "comments": [], "agentSessions": [], "attachments": [],
                "previousIdentifiers": [], "reactions": [], "trashed": None, "relations": [], "inverseRelations": [],
            }  # fmt: skip
            self.issues.append(raw)
            team["issues"].append(raw)
            return raw

    def block(self, issue: dict[str, Any], *by: dict[str, Any]) -> None:
        """``issue`` is blocked by the issues ``by`` (a relation of type ``blocks`` from each)."""
        with self.lock:
            for blocker in by:
                now = self.now()
                relation = {"id": self._id(), "type": "blocks", "issue": blocker, "relatedIssue": issue,
                            "createdAt": now, "updatedAt": now, "archivedAt": None}  # fmt: skip
                blocker["relations"].append(relation)
                issue["inverseRelations"].append(relation)

    def move(self, issue: dict[str, Any], team: dict[str, Any]) -> dict[str, Any]:
        """A person moves ``issue`` to ``team``: it takes the team's next identifier and keeps its id (Linear keeps
        the former identifiers), its state the same type's in the new team."""
        with self.lock:
            issue["team"]["issues"].remove(issue)
            issue["previousIdentifiers"].append(issue["identifier"])
            number = len(team["issues"]) + 1
            issue["identifier"] = f"{team['key']}-{number}"
            issue["number"] = float(number)
            issue["url"] = f"https://linear.app/acme/issue/{issue['identifier'].lower()}"
            issue["state"] = next(s for s in team["states"] if s["type"] == issue["state"]["type"])
            issue["labels"] = [self.label(label["name"], team) for label in issue["labels"]]
            issue["team"] = team
            issue["updatedAt"] = self.now()
            team["issues"].append(issue)
            return issue

    def issue(self, key: str) -> dict[str, Any]:
        """An issue by its id or identifier (``ENG-1``)."""
        return next(i for i in self.issues if key in (i["id"], i["identifier"]))

    def add_comment(
        self, issue: dict[str, Any], body: str, *, user: dict[str, Any] | None = None, parent: str | None = None
    ) -> dict[str, Any]:
        with self.lock:
            return self._comment(issue, body, user or self.person, parent, self._id())

    def _comment(
        self, issue: dict[str, Any], body: str, user: dict[str, Any], parent: str | None, cid: str
    ) -> dict[str, Any]:
        now = self.now()
        raw = {"id": cid, "body": body, "bodyData": json.dumps({"type": "doc"}), "createdAt": now, "updatedAt": now,
               "editedAt": None, "archivedAt": None, "resolvedAt": None, "parentId": parent,
               "parent": self.comments.get(parent or ""), "user": user, "issue": issue, "issueId": issue["id"],
               "url": f"{issue['url']}#comment-{cid[:8]}", "children": [], "reactions": [], "reactionData": {},
               "hideInLinear": False, "isArtificialAgentSessionRoot": False}  # fmt: skip
        self.comments[cid] = raw
        issue["comments"].append(raw)
        return raw

    def delete_comment(self, comment: dict[str, Any]) -> None:
        """A comment deleted (Linear archives it: its id stays taken, and ``includeArchived`` still lists it)."""
        with self.lock:
            comment["archivedAt"] = self.now()

    def delegate(self, issue: dict[str, Any], agent: dict[str, Any] | None = None) -> dict[str, Any]:
        """A person delegates ``issue`` to the agent (the app user): Linear opens a session on it."""
        with self.lock:
            issue["delegate"] = agent or self.app
            issue["updatedAt"] = self.now()
            return self._session(issue, issue["delegate"], creator=self.person)

    def _session(self, issue: dict[str, Any], app: dict[str, Any], *, creator: dict[str, Any] | None) -> Any:
        now = self.now()
        sid = self._id()
        raw = {"id": sid, "status": "pending", "createdAt": now, "updatedAt": now, "startedAt": None,
               "endedAt": None, "archivedAt": None, "dismissedAt": None, "url": f"{issue['url']}#session-{sid[:8]}",
               "slugId": sid[:8], "issue": issue, "appUser": app, "creator": creator, "externalLinks": [],
               "externalUrls": [], "externalLink": None, "context": {}, "plan": None, "summary": None,
               "comment": None, "sourceComment": None, "activities": []}  # fmt: skip
        self.sessions[sid] = raw
        issue["agentSessions"].append(raw)
        return raw

    def prompt(
        self, session: dict[str, Any], body: str, *, stop: bool = False, by: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A person's message in a session (``by``: that user's, else Ada's); ``stop`` sends Linear's stop signal
        with it."""
        with self.lock:
            content = {"__typename": "AgentActivityPromptContent", "type": "prompt", "body": body,
                       "bodyData": {}, "title": None}  # fmt: skip
            user = by or self.person
            return self._activity(session, user, content, signal="stop" if stop else None, ephemeral=False)

    def _activity(
        self,
        session: dict[str, Any],
        user: dict[str, Any],
        content: dict[str, Any],
        *,
        signal: str | None,
        ephemeral: bool,
        aid: str | None = None,
        metadata: Any = None,
    ) -> dict[str, Any]:
        now = self.now()
        # (``type``, the content's, is what an ``AgentActivityFilter`` compares)
        raw = {"id": aid or self._id(), "createdAt": now, "updatedAt": now, "archivedAt": None, "sentAt": now,
               "ephemeral": ephemeral, "queued": False, "signal": signal, "signalMetadata": metadata, "user": user,
               "sourceComment": None, "sourceMetadata": None, "contextualMetadata": None, "content": content,
               "agentSession": session, "type": content["type"]}  # fmt: skip
        self.activities[raw["id"]] = raw
        session["activities"].append(raw)
        session["updatedAt"] = now
        return raw

    def fail(
        self, status: int, *, times: int = 1, body: Any = None, field: str | None = None, after: bool = False
    ) -> None:
        """The next ``times`` requests (those asking root field ``field``, when given) get this answer; ``after``:
        the request is carried out first and its answer lost (a proxy's 502 on the way back). A proxy's page when
        no ``body`` is given."""
        self.faults.extend(Fault(status, body, field, after) for _ in range(times))

    def rate_limit(
        self,
        *,
        reset_in: float | None,
        field: str | None = None,
        times: int = 1,
        status: int = 400,
        retry_after: int | None = None,
        graphql: bool = True,
    ) -> None:
        """The next ``times`` requests (asking ``field``, when given) are refused as rate limited, unexecuted, as
        Linear refuses them: a ``RATELIMITED`` GraphQL error under ``status`` (400, as Linear answers; 429, as a
        proxy may), with the requests bucket empty until ``reset_in`` seconds from now (None: no reset header) and
        ``Retry-After`` when given; ``graphql=False``: a proxy's page instead of a GraphQL answer."""
        headers: dict[str, str] = {"X-RateLimit-Requests-Remaining": "0", "X-RateLimit-Requests-Reset": "",
                                   "X-RateLimit-Complexity-Reset": ""}  # fmt: skip
        if reset_in is not None:
            at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=reset_in)
            headers["X-RateLimit-Requests-Reset"] = str(int(at.timestamp() * 1000))
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        body = {"errors": [_error("RATELIMITED", "Rate limit exceeded")]} if graphql else None
        self.faults.extend(Fault(status, body, field, False, headers) for _ in range(times))

    def spend(self, *, requests: int | None = None, complexity: int | None = None) -> None:
        """What is left of the buckets (0: the next request is rate limited)."""
        with self.lock:
            if requests is not None:
                self.requests_remaining = requests
            if complexity is not None:
                self.complexity_remaining = complexity

    def refill(self) -> None:
        self.spend(requests=REQUESTS_LIMIT, complexity=COMPLEXITY_LIMIT)

    def requests(self, field: str | None = None) -> list[Seen]:
        """What the fake saw (of requests asking root field ``field``)."""
        return [s for s in self.seen if field is None or field in s.fields]

    # -- answering -----------------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
        with self.lock:
            auth, user = self._auth(headers.get("authorization"))
            if method != "POST" or path != "/graphql":
                self.violations.append(f"request: {method} {path}: Linear's API is POST /graphql")
                return self._record(Answer(404, None, text="Not found"), None, [], "", {}, auth)
            try:
                request = json.loads(body)
                query, variables = request["query"], request.get("variables") or {}
                operation = request.get("operationName")
                document = parse(query)
            except Exception as error:
                self.violations.append(f"request: not a GraphQL request: {error!r}")
                answer = Answer(400, {"errors": [_error("GRAPHQL_PARSE_FAILED", f"Syntax Error: {error}")]})
                return self._record(answer, None, [], "", {}, auth)
            fields = _root_fields(document, operation)
            if user is None:
                answer = Answer(400, {"errors": [_error("AUTHENTICATION_ERROR", "Authentication required, not "
                                                        "authenticated")]})  # fmt: skip
                return self._record(answer, operation, fields, query, variables, auth)
            problems = validate(self.schema, document)
            if problems:
                self.violations.extend(f"request {operation or fields}: {p.message}" for p in problems)
                errors = [{**p.formatted, "extensions": {"code": "GRAPHQL_VALIDATION_FAILED", "type": "graphql error",
                                                         "userError": True}} for p in problems]  # fmt: skip
                return self._record(Answer(400, {"errors": errors}), operation, fields, query, variables, auth)
            cost = complexity(self.schema, document, variables, operation)
            limited = self._rate(cost)
            if limited is not None:
                return self._record(limited, operation, fields, query, variables, auth)
            fault = next((f for f in self.faults if f.field is None or f.field in fields), None)
            if fault is not None:
                self.faults.remove(fault)
                if fault.after:
                    self._execute(document, variables, operation, user)
                text = None if fault.body is not None else f"<html><body>{fault.status} upstream error</body></html>"
                headers = {k: v for k, v in (self._headers(cost) | fault.headers).items() if v}  # ("": left out)
                answer = Answer(fault.status, fault.body, headers, text=text)
                return self._record(answer, operation, fields, query, variables, auth)
            data, errors = self._execute(document, variables, operation, user)
            out: dict[str, Any] = {"data": data}
            if errors:
                out["errors"] = errors
            # A request that failed whole (variables that do not fit their types) is a bad request.
            status = 400 if data is None and any("path" not in e for e in errors) else 200
            return self._record(Answer(status, out, self._headers(cost)), operation, fields, query, variables, auth)

    def _auth(self, header: str | None) -> tuple[str | None, dict[str, Any] | None]:
        if not header:
            return None, None
        kind, token = ("bearer", header[7:].strip()) if header.startswith("Bearer ") else ("key", header.strip())
        held = self.tokens.get(token)
        # A personal API key goes bare, an OAuth token after "Bearer" (Linear refuses either the other way).
        if held is None or held[1] != kind:
            return kind, None
        return kind, self.users[held[0]]

    def _rate(self, cost: int) -> Answer | None:
        if self.requests_remaining <= 0 or self.complexity_remaining < cost:
            answer = Answer(400, {"errors": [_error("RATELIMITED", "Rate limit exceeded")]}, self._headers(0))
            return answer
        self.requests_remaining -= 1
        self.complexity_remaining -= cost
        return None

    def _headers(self, cost: int) -> dict[str, str]:
        # Leaky buckets: full again an hour after they were last drained to this level, in epoch milliseconds.
        reset = str(int((dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).timestamp() * 1000))
        return {"X-RateLimit-Requests-Limit": str(REQUESTS_LIMIT),
                "X-RateLimit-Requests-Remaining": str(max(self.requests_remaining, 0)),
                "X-RateLimit-Requests-Reset": reset,
                "X-RateLimit-Complexity-Limit": str(COMPLEXITY_LIMIT),
                "X-RateLimit-Complexity-Remaining": str(max(self.complexity_remaining, 0)),
                "X-RateLimit-Complexity-Reset": reset,
                "X-Complexity": str(cost)}  # fmt: skip

    def _execute(
        self, document: Any, variables: dict[str, Any], operation: str | None, user: dict[str, Any]
    ) -> tuple[Any, list[dict[str, Any]]]:
        result = execute(self.schema, document, None, Ctx(self, user), variables, operation)
        errors = []
        for error in result.errors or []:
            original = error.original_error
            if isinstance(original, Refusal):
                errors.append({**error.formatted, "extensions": original.extensions})
                continue
            if error.path is None and result.data is None:
                # Variables that do not fit their types: the request does not validate.
                self.violations.append(f"request {operation}: {error.message}")
                invalid = {"code": "GRAPHQL_VALIDATION_FAILED", "type": "graphql error", "userError": True}
                errors.append({**error.formatted, "extensions": invalid})
                continue
            # Anything else is the fake's failing: a field it keeps no state for, or something it does not do.
            self.violations.append(f"response {operation}: {error.message} (at {error.path})")
            errors.append(
                {**error.formatted, "extensions": {"code": "INTERNAL_SERVER_ERROR", "type": "internal error"}}
            )
        return result.data, errors

    def _record(
        self,
        answer: Answer,
        operation: str | None,
        fields: list[str],
        query: str,
        variables: dict[str, Any],
        auth: str | None,
    ) -> Answer:
        errors = answer.data.get("errors", []) if isinstance(answer.data, dict) else []
        codes = [e.get("extensions", {}).get("code", "") for e in errors]
        self.seen.append(Seen(operation, fields, query, variables, auth, answer.status, codes))
        return answer

    # -- state as the resolvers see it ---------------------------------------------------------------------------

    def page(self, items: list[dict[str, Any]], args: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
        """A connection's page of ``items``, as Linear answers one: archived items left out unless asked for,
        filtered, ordered (the latest first), from after the cursor, ``first`` of them."""
        if "last" in args or "before" in args:
            raise Violation("the fake pages forwards only (first/after)")
        found = [i for i in items if args.get("includeArchived") or not i.get("archivedAt")]
        if args.get("filter"):
            found = [i for i in found if self.matches(i, args["filter"], ctx)]
        key = args.get("orderBy") or "createdAt"
        found.sort(key=lambda i: (i[key], i["id"]), reverse=True)
        if args.get("after"):
            at = next((n for n, i in enumerate(found) if i["id"] == args["after"]), None)
            if at is None:
                raise Refusal("INVALID_INPUT", "Invalid cursor")
            found = found[at + 1 :]
        first = args.get("first")
        first = DEFAULT_PAGE if first is None else first
        if not 0 <= first <= MAX_PAGE:
            raise Refusal("INVALID_INPUT", f"first must be between 0 and {MAX_PAGE}")
        shown = found[:first]
        return {
            "nodes": shown,
            "edges": [{"node": i, "cursor": i["id"]} for i in shown],
            "pageInfo": {
                "hasNextPage": len(found) > first,
                "hasPreviousPage": bool(args.get("after")),
                "startCursor": shown[0]["id"] if shown else None,
                "endCursor": shown[-1]["id"] if shown else None,
            },
        }

    def matches(self, node: Any, filter_: dict[str, Any], ctx: Ctx) -> bool:
        """Whether ``node`` passes a Linear filter (``IssueFilter``, ``CommentFilter``, ...): each key a field of
        the node, compared (a comparator), filtered further (an object), or some/every of a collection."""
        for key, wanted in filter_.items():
            if wanted is None:
                continue
            if key == "and":
                if not all(self.matches(node, part, ctx) for part in wanted):
                    return False
            elif key == "or":
                if not any(self.matches(node, part, ctx) for part in wanted):
                    return False
            elif key == "null":
                if (node is None) != wanted:
                    return False
            elif key == "isMe":
                if not _compare(node is not None and node["id"] == ctx.user["id"], wanted):
                    return False
            elif node is None:
                return False
            elif key not in node:
                raise Violation(f"the fake keeps no {key!r} to filter by")
            else:
                value = node[key]
                if isinstance(value, list):
                    if not self._collection(value, wanted, ctx):
                        return False
                elif isinstance(value, dict) or (value is None and _nested(wanted)):
                    if not self.matches(value, wanted, ctx):
                        return False
                elif not _compare(value, wanted):
                    return False
        return True

    def _collection(self, items: list[Any], wanted: dict[str, Any], ctx: Ctx) -> bool:
        live = [i for i in items if not i.get("archivedAt")]
        for key, part in wanted.items():
            if key == "some" and not any(self.matches(i, part, ctx) for i in live):
                return False
            if key == "every" and not all(self.matches(i, part, ctx) for i in live):
                return False
            if key == "length" and not _compare(len(live), part):
                return False
            if key == "null" and (not live) != part:
                return False
            # A collection filter's own fields (``labels: {name: ...}``) ask whether some item matches.
            if key not in ("some", "every", "length", "null") and not any(
                self.matches(i, {key: part}, ctx) for i in live
            ):
                return False
        return True


def _nested(wanted: Any) -> bool:
    return isinstance(wanted, dict) and not set(wanted) <= {*_OPS, "null"}


def _when(value: Any) -> Any:
    if isinstance(value, str) and re.match(r"^\d{4}-\d\d-\d\dT", value):
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, str) and re.match(r"^-?P", value):
        raise Violation("the fake compares times, not durations (DateTimeOrDuration)")
    return value


def _fold(value: Any) -> Any:
    return value.casefold() if isinstance(value, str) else value


#: Each comparator: whether ``value`` (never None) passes it with ``arg``.
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda v, a: v == a,
    "neq": lambda v, a: v != a,
    "in": lambda v, a: v in a,
    "nin": lambda v, a: v not in a,
    "eqIgnoreCase": lambda v, a: _fold(v) == _fold(a),
    "neqIgnoreCase": lambda v, a: _fold(v) != _fold(a),
    "contains": lambda v, a: a in v,
    "containsIgnoreCase": lambda v, a: _fold(a) in _fold(v),
    "notContains": lambda v, a: a not in v,
    "startsWith": lambda v, a: v.startswith(a),
    "endsWith": lambda v, a: v.endswith(a),
    "gt": lambda v, a: v > a,
    "gte": lambda v, a: v >= a,
    "lt": lambda v, a: v < a,
    "lte": lambda v, a: v <= a,
}
#: The comparators that a missing value (None) passes.
_NONE_PASSES = {"neq", "nin", "neqIgnoreCase", "notContains"}


def _compare(value: Any, comparator: Any) -> bool:
    """``value`` against a comparator (``{"eq": ...}``, ``{"in": [...]}``, ``{"gt": <time>}``, ...)."""
    if not isinstance(comparator, dict):
        raise Violation(f"not a comparator: {comparator!r}")
    for op, arg in comparator.items():
        if op == "null":
            if arg is not None and (value is None) != arg:
                return False
            continue
        if op not in _OPS:
            raise Violation(f"the fake does not implement the comparator {op!r}")
        if arg is None:
            continue
        if value is None:
            if op not in _NONE_PASSES:
                return False
            continue
        wanted = [_when(x) for x in arg] if isinstance(arg, list) else _when(arg)
        if not _OPS[op](_when(value), wanted):
            return False
    return True


def _root_fields(document: Any, operation: str | None) -> list[str]:
    ops = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    op = next((o for o in ops if operation is None or (o.name and o.name.value == operation)), None)
    if op is None:
        return []
    return [s.name.value for s in op.selection_set.selections if isinstance(s, FieldNode)]


def complexity(schema: GraphQLSchema, document: Any, variables: dict[str, Any], operation: str | None) -> int:
    """A request's cost as Linear counts it: a tenth of a point for each scalar field, a point for each object, and
    a connection's nodes times its ``first`` (50 when not given); rounded up."""
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    ops = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    op = next((o for o in ops if operation is None or (o.name and o.name.value == operation)), ops[0])
    root = schema.mutation_type if op.operation.value == "mutation" else schema.query_type

    def cost(selection: SelectionSetNode, parent: Any) -> float:
        total = 0.0
        for node in selection.selections:
            if isinstance(node, FragmentSpreadNode):
                frag = fragments[node.name.value]
                total += cost(frag.selection_set, schema.get_type(frag.type_condition.name.value))
            elif isinstance(node, InlineFragmentNode):
                kind = schema.get_type(node.type_condition.name.value) if node.type_condition else parent
                total += cost(node.selection_set, kind)
            elif isinstance(node, FieldNode):
                if node.name.value == "__typename":
                    continue
                defn = getattr(parent, "fields", {}).get(node.name.value)
                if defn is None or node.selection_set is None:
                    total += 0.1
                    continue
                inner = 1 + cost(node.selection_set, get_named_type(defn.type))
                args = {a.name.value: value_from_ast_untyped(a.value, variables) for a in node.arguments or []}
                if get_named_type(defn.type).name.endswith("Connection"):
                    size = args.get("first", args.get("last"))
                    inner *= size if isinstance(size, int) and size >= 0 else DEFAULT_PAGE
                total += inner
        return total

    return math.ceil(cost(op.selection_set, root))


# -- resolvers -----------------------------------------------------------------------------------------------------

Resolver = Callable[..., Any]


def _install(schema: GraphQLSchema) -> None:
    """The fake's resolvers on the schema: connections of stored objects page their lists; the root fields and
    mutations the fake answers read and change its state; any other root field is a violation."""
    for kind in schema.type_map.values():
        if isinstance(kind, GraphQLObjectType) and kind not in (schema.query_type, schema.mutation_type):
            for defn in kind.fields.values():
                if get_named_type(defn.type).name.endswith("Connection"):
                    defn.resolve = _stored_connection
    # Fields that follow from others: whether a user is the token's, and the ids of an issue's labels.
    user, issue = schema.type_map["User"], schema.type_map["Issue"]
    assert isinstance(user, GraphQLObjectType) and isinstance(issue, GraphQLObjectType)
    user.fields["isMe"].resolve = lambda user, info: user["id"] == info.context.user["id"]
    issue.fields["labelIds"].resolve = lambda issue, info: [label["id"] for label in issue["labels"]]
    for root, table in ((schema.query_type, QUERIES), (schema.mutation_type, MUTATIONS)):
        assert root is not None
        for name, defn in root.fields.items():
            defn.resolve = table.get(name, _not_implemented)


def _stored_connection(source: Any, info: Any, **args: Any) -> Any:
    if not isinstance(source, dict) or info.field_name not in source:
        raise Violation(f"the fake keeps no {info.parent_type.name}.{info.field_name}")
    return info.context.fake.page(source[info.field_name], args, info.context)


def _not_implemented(source: Any, info: Any, **args: Any) -> Any:
    raise Violation(f"the fake does not answer {info.field_name}")


def _ctx(info: Any) -> tuple[FakeLinear, dict[str, Any]]:
    return info.context.fake, info.context.user


def _by_id(items: Any, key: str, kind: str) -> dict[str, Any]:
    for item in items:
        if key in (item["id"], item.get("identifier"), item.get("key")):
            return item
    raise Refusal("INVALID_INPUT", f"Entity not found: {kind}", f"Could not find referenced {kind}.")


def _q_issue(_: Any, info: Any, id: str) -> Any:
    fake, _user = _ctx(info)
    issue = _by_id(fake.issues, id, "Issue")
    if issue.get("archivedAt"):
        raise Refusal("INVALID_INPUT", "Entity not found: Issue", "Could not find referenced Issue.")
    return issue


def _q_comment(_: Any, info: Any, id: str | None = None, hash: str | None = None) -> Any:
    fake, _user = _ctx(info)
    if id is None:
        raise Violation("the fake finds comments by id only")
    # A deleted comment is found by its id still (archived): its id stays taken.
    return _by_id(fake.comments.values(), id, "Comment")


def _q_team(_: Any, info: Any, id: str) -> Any:
    fake, _user = _ctx(info)
    return _by_id(fake.teams.values(), id, "Team")


def _q_session(_: Any, info: Any, id: str) -> Any:
    fake, _user = _ctx(info)
    return _by_id(fake.sessions.values(), id, "AgentSession")


def _q_rate(_: Any, info: Any) -> Any:
    fake, _user = _ctx(info)
    reset = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).timestamp() * 1000
    return {"identifier": None, "kind": "api key",
            "limits": [{"type": "requestCount", "allowedAmount": REQUESTS_LIMIT, "period": 3600000.0,
                        "remainingAmount": fake.requests_remaining, "requestedAmount": 1, "reset": reset},
                       {"type": "queryComplexity", "allowedAmount": COMPLEXITY_LIMIT, "period": 3600000.0,
                        "remainingAmount": fake.complexity_remaining, "requestedAmount": 1,
                        "reset": reset}]}  # fmt: skip


def _listing(name: str) -> Resolver:
    def resolve(_: Any, info: Any, **args: Any) -> Any:
        fake, _user = _ctx(info)
        items = {"issues": fake.issues, "workflowStates": fake.states, "teams": list(fake.teams.values()),
                 "issueLabels": fake.labels, "comments": list(fake.comments.values()),
                 "agentSessions": list(fake.sessions.values())}[name]  # fmt: skip
        return fake.page(items, args, info.context)

    return resolve


QUERIES: dict[str, Resolver] = {
    "viewer": lambda _, info: info.context.user,
    "organization": lambda _, info: info.context.fake.org,
    "issue": _q_issue,
    "comment": _q_comment,
    "team": _q_team,
    "agentSession": _q_session,
    "rateLimitStatus": _q_rate,
    **{
        name: _listing(name)
        for name in ("issues", "workflowStates", "teams", "issueLabels", "comments", "agentSessions")
    },
}


def _only(input_: dict[str, Any], known: set[str], kind: str) -> None:
    unknown = {k for k, v in input_.items() if v is not None} - known
    if unknown:
        raise Violation(f"the fake does not implement {kind} {sorted(unknown)}")


def _new_id(fake: FakeLinear, wanted: str | None, taken: Any) -> str:
    """A created entity's id: the one asked for (a UUID v4, not yet taken, archived ones included), else a new one."""
    if wanted is None:
        return fake._id()
    try:
        parsed = uuid.UUID(wanted)
    except ValueError:
        raise Refusal("INVALID_INPUT", "id must be a UUID", "The identifier must be a valid UUID v4.") from None
    if parsed.version != 4 or str(parsed) != wanted.lower():
        raise Refusal("INVALID_INPUT", "id must be a UUID", "The identifier must be a valid UUID v4.")
    if wanted in taken:
        raise Refusal("INVALID_INPUT", "Entity with this id already exists", "This entity already exists.")
    return wanted


def _m_comment_create(_: Any, info: Any, input: dict[str, Any]) -> Any:
    fake, user = _ctx(info)
    _only(input, {"issueId", "body", "id", "parentId", "doNotSubscribeToIssue"}, "CommentCreateInput")
    if not input.get("issueId"):
        raise Violation("the fake makes comments on issues only")
    if not input.get("body"):
        raise Refusal("INVALID_INPUT", "Argument Validation Error", "A comment needs a body.")
    issue = _q_issue(None, info, input["issueId"])
    parent = input.get("parentId")
    if parent is not None and (parent not in fake.comments or fake.comments[parent]["issue"] is not issue):
        raise Refusal("INVALID_INPUT", "Entity not found: Comment", "Could not find referenced Comment.")
    cid = _new_id(fake, input.get("id"), fake.comments)
    return {"success": True, "lastSyncId": float(next(fake.numbers)),
            "comment": fake._comment(issue, input["body"], user, parent, cid)}  # fmt: skip


def _m_comment_update(_: Any, info: Any, id: str, input: dict[str, Any], skipEditedAt: bool | None = None) -> Any:
    fake, user = _ctx(info)
    _only(input, {"body"}, "CommentUpdateInput")
    comment = _by_id(fake.comments.values(), id, "Comment")
    if comment.get("archivedAt"):
        raise Refusal("INVALID_INPUT", "Entity not found: Comment", "Could not find referenced Comment.")
    if comment["user"] is None or comment["user"]["id"] != user["id"]:
        raise Refusal("FORBIDDEN", "Only the author can edit a comment", "You can only edit your own comments.")
    if input.get("body") is not None:
        comment["body"] = input["body"]
    now = fake.now()
    comment["updatedAt"] = now
    if not skipEditedAt:
        comment["editedAt"] = now
    return {"success": True, "lastSyncId": float(next(fake.numbers)), "comment": comment}


def _m_issue_update(_: Any, info: Any, id: str, input: dict[str, Any]) -> Any:
    fake, _user = _ctx(info)
    _only(input, {"stateId", "assigneeId", "delegateId", "labelIds", "addedLabelIds", "removedLabelIds", "title",
                  "description", "priority", "projectId"}, "IssueUpdateInput")  # fmt: skip
    issue = _q_issue(None, info, id)
    team = issue["team"]
    if input.get("stateId") is not None:
        state = next((s for s in team["states"] if s["id"] == input["stateId"]), None)
        if state is None:
            raise Refusal("INVALID_INPUT", "Workflow state not found in the issue's team", "Invalid workflow state.")
        issue["state"] = state
        stamp = {"started": "startedAt", "completed": "completedAt", "canceled": "canceledAt"}.get(state["type"])
        if stamp:
            issue[stamp] = fake.now()
    for key in ("assigneeId", "delegateId"):
        if key in input:
            who = fake.users.get(input[key] or "")
            if input[key] is not None and who is None:
                raise Refusal("INVALID_INPUT", "Entity not found: User", "Could not find referenced User.")
            if key == "delegateId" and who is not None and not who["app"]:
                raise Refusal("INVALID_INPUT", "Only agents can be delegated to", "Issues can only be delegated to "
                              "agents.")  # fmt: skip
            issue[key.removesuffix("Id")] = who

    def label(lid: str) -> dict[str, Any]:
        found = next((lb for lb in team["labels"] if lb["id"] == lid), None)
        if found is None:
            raise Refusal("INVALID_INPUT", "Entity not found: IssueLabel", "Could not find referenced label.")
        return found

    if input.get("labelIds") is not None:
        issue["labels"] = [label(lid) for lid in input["labelIds"]]
    for lid in input.get("addedLabelIds") or []:
        if all(lb["id"] != lid for lb in issue["labels"]):
            issue["labels"].append(label(lid))
    removed = set(input.get("removedLabelIds") or [])
    issue["labels"] = [lb for lb in issue["labels"] if lb["id"] not in removed]
    for key in ("title", "description"):
        if input.get(key) is not None:
            issue[key] = input[key]
    if input.get("priority") is not None:
        if not 0 <= input["priority"] <= 4:
            raise Refusal("INVALID_INPUT", "priority must be between 0 and 4", "Invalid priority.")
        issue["priority"] = float(input["priority"])
    if input.get("projectId") is not None:
        issue["project"] = _by_id(fake.projects, input["projectId"], "Project")
    issue["updatedAt"] = fake.now()
    return {"success": True, "lastSyncId": float(next(fake.numbers)), "issue": issue}


def _m_issue_create(_: Any, info: Any, input: dict[str, Any]) -> Any:
    fake, user = _ctx(info)
    _only(input, {"id", "teamId", "title", "description", "labelIds", "priority", "stateId", "projectId"},
          "IssueCreateInput")  # fmt: skip
    team = _by_id(fake.teams.values(), input["teamId"], "Team")
    if not (input.get("title") or "").strip():
        raise Refusal("INVALID_INPUT", "title should not be empty", "An issue needs a title.")
    iid = _new_id(fake, input.get("id"), {i["id"] for i in fake.issues})
    state = next((s for s in team["states"] if s["id"] == input.get("stateId")), None)
    if input.get("stateId") is not None and state is None:
        raise Refusal("INVALID_INPUT", "Workflow state not found in the issue's team", "Invalid workflow state.")
    # (Linear files an issue in the team's first backlog state when no state is given)
    state = state or next(s for s in team["states"] if s["type"] == "backlog")
    issue = fake.add_issue(input["title"], description=input.get("description"), team=team, creator=user,
                           priority=int(input.get("priority") or 0), state=state["name"])  # fmt: skip
    issue["id"] = iid
    labels = []
    for lid in input.get("labelIds") or []:
        found = next((lb for lb in fake.labels if lb["id"] == lid), None)
        if found is None:
            raise Refusal("INVALID_INPUT", "Entity not found: IssueLabel", "Could not find referenced label.")
        labels.append(found)
    issue["labels"] = labels
    if input.get("projectId") is not None:
        issue["project"] = _by_id(fake.projects, input["projectId"], "Project")
    return {"success": True, "lastSyncId": float(next(fake.numbers)), "issue": issue}


def _m_label_create(_: Any, info: Any, input: dict[str, Any], replaceTeamLabels: bool | None = None) -> Any:
    fake, _user = _ctx(info)
    _only(input, {"name", "teamId", "color", "description", "id"}, "IssueLabelCreateInput")
    if input.get("teamId") is None:
        raise Violation("the fake makes team labels only")
    team = _by_id(fake.teams.values(), input["teamId"], "Team")
    if any(lb["name"].casefold() == input["name"].casefold() for lb in team["labels"]):
        raise Refusal("INVALID_INPUT", "Duplicate label name", "A label with this name already exists.")
    label = fake.label(input["name"], team)
    if input.get("color"):
        label["color"] = input["color"]
    return {"success": True, "lastSyncId": float(next(fake.numbers)), "issueLabel": label}


def _links(urls: list[dict[str, Any]] | None) -> list[dict[str, str]]:
    return [{"label": u["label"], "url": u["url"]} for u in urls or []]


def _m_session_create_on_issue(_: Any, info: Any, input: dict[str, Any]) -> Any:
    fake, user = _ctx(info)
    _only(input, {"issueId", "externalUrls", "externalLink"}, "AgentSessionCreateOnIssue")
    if not user["app"]:
        raise Refusal("FORBIDDEN", "Only app users can create agent sessions", "Agent sessions are for agents.")
    issue = _q_issue(None, info, input["issueId"])
    session = fake._session(issue, user, creator=None)
    session["externalLinks"] = _links(input.get("externalUrls"))
    session["externalUrls"] = session["externalLinks"]
    return {"success": True, "lastSyncId": float(next(fake.numbers)), "agentSession": session}


def _own_session(fake: FakeLinear, user: dict[str, Any], sid: str) -> dict[str, Any]:
    session = _by_id(fake.sessions.values(), sid, "AgentSession")
    if session["appUser"]["id"] != user["id"]:
        raise Refusal("FORBIDDEN", "Not the agent of this session", "Only the session's agent can do this.")
    return session


def _m_session_update(_: Any, info: Any, id: str, input: dict[str, Any]) -> Any:
    fake, user = _ctx(info)
    _only(input, {"externalUrls", "addedExternalUrls", "removedExternalUrls", "plan"}, "AgentSessionUpdateInput")
    session = _own_session(fake, user, id)
    if input.get("externalUrls") is not None:
        session["externalLinks"] = _links(input["externalUrls"])
    gone = set(input.get("removedExternalUrls") or [])
    kept = [link for link in session["externalLinks"] if link["url"] not in gone]
    added = [link for link in _links(input.get("addedExternalUrls")) if all(k["url"] != link["url"] for k in kept)]
    session["externalLinks"] = kept + added
    session["externalUrls"] = session["externalLinks"]
    if input.get("plan") is not None:
        session["plan"] = input["plan"]
    session["updatedAt"] = fake.now()
    return {"success": True, "lastSyncId": float(next(fake.numbers)), "agentSession": session}


#: What an agent may post, and what each kind needs (``AgentActivity*Content`` in the schema): a prompt is a person's.
CONTENTS = {
    "thought": ("AgentActivityThoughtContent", ("body",)),
    "action": ("AgentActivityActionContent", ("action", "parameter")),
    "response": ("AgentActivityResponseContent", ("body",)),
    "elicitation": ("AgentActivityElicitationContent", ("body",)),
    "error": ("AgentActivityErrorContent", ("body",)),
}
#: Where an activity of each kind leaves its session.
STATUS_AFTER = {"thought": "active", "action": "active", "response": "complete", "elicitation": "awaitingInput",
                "error": "error"}  # fmt: skip


def _m_activity_create(_: Any, info: Any, input: dict[str, Any]) -> Any:
    fake, user = _ctx(info)
    _only(
        input, {"agentSessionId", "content", "ephemeral", "id", "signal", "signalMetadata"}, "AgentActivityCreateInput"
    )
    session = _own_session(fake, user, input["agentSessionId"])
    content = input["content"]
    kind = content.get("type") if isinstance(content, dict) else None
    if kind not in CONTENTS:
        raise Refusal("INVALID_INPUT", f"Invalid activity content type: {kind!r}", "Invalid activity content.")
    typename, needed = CONTENTS[kind]
    missing = [name for name in needed if not isinstance(content.get(name), str) or not content[name]]
    if missing:
        raise Refusal("INVALID_INPUT", f"Activity content of type {kind} needs {', '.join(missing)}",
                      "Invalid activity content.")  # fmt: skip
    shaped = {"__typename": typename, **content}
    if kind == "action":
        shaped |= {"result": content.get("result"), "resultData": content.get("resultData")}
    else:
        shaped |= {"bodyData": content.get("bodyData") or {}}
    if kind == "error":
        shaped["reasonCode"] = content.get("reasonCode")
    aid = _new_id(fake, input.get("id"), fake.activities)
    if session["activities"] and session["activities"][-1]["ephemeral"]:
        # An ephemeral activity is replaced by the next one.
        gone = session["activities"].pop()
        del fake.activities[gone["id"]]
    activity = fake._activity(session, user, shaped, signal=input.get("signal"),
                              ephemeral=bool(input.get("ephemeral")), aid=aid,
                              metadata=input.get("signalMetadata"))  # fmt: skip
    now = activity["createdAt"]
    session["status"] = STATUS_AFTER[kind]
    session["startedAt"] = session["startedAt"] or now
    session["endedAt"] = now if kind in ("response", "error") else None
    return {"success": True, "lastSyncId": float(next(fake.numbers)), "agentActivity": activity}


MUTATIONS: dict[str, Resolver] = {
    "commentCreate": _m_comment_create,
    "commentUpdate": _m_comment_update,
    "issueUpdate": _m_issue_update,
    "issueCreate": _m_issue_create,
    "issueLabelCreate": _m_label_create,
    "agentSessionCreateOnIssue": _m_session_create_on_issue,
    "agentSessionUpdate": _m_session_update,
    "agentActivityCreate": _m_activity_create,
}


# -- serving ---------------------------------------------------------------------------------------------------------


def _handler(fake: FakeLinear) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = self.path.split("?", 1)[0]
            try:
                answer = fake.handle(self.command, path, raw, headers)
            except Exception as error:  # the fake failing is a violation, answered as Linear's own failure
                fake.violations.append(f"request: the fake could not act: {error!r}")
                answer = Answer(500, {"errors": [_error("INTERNAL_SERVER_ERROR", "Internal server error")]})
            if answer.text is not None:
                payload, kind = answer.text.encode(), "text/html; charset=utf-8"
            else:
                payload, kind = json.dumps(answer.data).encode(), "application/json; charset=utf-8"
            self.send_response(answer.status)
            for key, value in {"Content-Type": kind, **answer.headers}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _serve

    return Handler


@contextlib.contextmanager
def serve() -> Iterator[FakeLinear]:
    """A fake Linear on a local port, served from a thread of this process until the block ends."""
    fake = FakeLinear(linear_schema())
    server = _Server(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.server = server
    # (a short poll: shutting the server down at the end of each test takes that long)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def linear() -> Iterator[FakeLinear]:
    """A fake Linear on a local port; the test fails if a request strays from Linear's schema or asks what the fake
    does not do."""
    with serve() as fake:
        yield fake
    assert not fake.violations, "the fake Linear saw what Linear's schema does not allow, or what it does not do:\n" + (
        "\n".join(fake.violations[:20])
    )
