"""The Jira tracker: the issues of one Jira Cloud project, through its REST API v3 (docs/trackers.md).

- **Which issues**: the project's (``tracker.project``), carrying every label of ``tracker.labels``, matching
  ``tracker.jql`` when given; listed with ``/search/jql`` (``nextPageToken`` pages). The search is eventually
  consistent: before a claim or a move an issue is read back on its own (``GET /issue/{key}``).
- **Keys** are Jira's (``WID-42``); the record keeps the issue's numeric id (:attr:`Issue.id`), which a move to
  another project does not change.
- **Status** is the status's category (To Do, In Progress, Done) and the workflow's transitions named in
  ``tracker.transitions``; what Jira has no category for (review, failed, open, closed) is a label under
  ``tracker.status_prefix``. A workflow without the ``in_progress`` transition starts no run. **Priority** is Jira's
  (Highest first, Lowest last), then age.
- **Comments** are Atlassian Document Format both ways (:mod:`beflow.trackers.jira_adf`): written from Markdown,
  read as Markdown with hidden content left out; a comment by someone who may not edit the project's issues (and is
  not in ``feedback.allow``) stays out of prompts. A run keeps one progress comment that it edits in place. An agent's
  words are made inert (:mod:`beflow.trackers.jira_quoting`).
- **Claims** are a chain of the account's own comments (:mod:`beflow.trackers.jira_claims`).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from beflow.config import JiraTrackerSettings, Project
from beflow.errors import BeflowError, ConfigError, NotFoundError, excerpt
from beflow.trackers import jira_adf as adf
from beflow.trackers import jira_quoting
from beflow.trackers import jira_wire as wire
from beflow.trackers.base import Finding, RateBudget
from beflow.trackers.claims import Claim, ClaimInfo, ClaimLost, ClaimsOver, ClaimStore, orphans_of, ready_of
from beflow.trackers.issue import (
    DEFAULT_PRIORITY,
    Comment,
    Issue,
    Listing,
    Status,
    check_transition,
    draft_comment,
    draft_issue,
    normalize_key,
)
from beflow.trackers.jira_api import Api, JiraError, credentials
from beflow.trackers.jira_claims import JiraLeases, is_claim

_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,19}-[0-9]{1,12}$")
#: The fields beflow reads of an issue.
FIELDS = "summary,status,labels,priority,created,updated,description"
#: Issues a search page asks for.
PAGE = 100
#: Edits of a run's progress comment are at most this often (seconds).
PROGRESS_EVERY = 15.0
#: How long a person's right to edit the project's issues is remembered (seconds).
PERMISSION_TTL = 300.0
#: Jira's default priorities by id (Highest 1 ... Lowest 5) as beflow's (0 first); another id is the default.
_PRIORITIES = {"1": 0, "2": 1, "3": 2, "4": 3, "5": 4}
#: The categories of Jira's statuses.
NEW, STARTED, FINISHED = "new", "indeterminate", "done"


class JiraWorkflowError(ConfigError):
    """The issue's workflow has no transition beflow needs (``tracker.transitions``): no run starts."""

    code = "jira_workflow"


def jira_key(key: str) -> str:
    """A key as people type it (``wid-42``) as Jira's (``WID-42``)."""
    return normalize_key(key).upper()


def open_jira(project: Project, settings: JiraTrackerSettings, claims: ClaimsOver | None = None) -> JiraTracker:
    """The Jira tracker of ``settings``; ``claims``: the engine's store over its leases (beflow.app)."""
    email, token = credentials(settings)
    api = Api(settings.site, email, token, token_name=settings.token_env)
    allow = project.config.feedback.allow if project is not None else []
    return JiraTracker(settings, api, claims=claims, allow=allow)


class JiraTracker:
    """Issues of one Jira Cloud project (see the module's description)."""

    def __init__(
        self,
        settings: JiraTrackerSettings,
        api: Api,
        *,
        claims: ClaimsOver | None = None,
        allow: list[str] | None = None,
        settle: float | None = None,
    ) -> None:
        self.settings = settings
        self.api = api
        host = urlsplit(settings.site).hostname or settings.site
        labels = ", ".join(settings.labels) or "(any)"
        self.description = f"Jira issues of {settings.project} on {host} labelled {labels}"
        self.identity = f"jira:{host}/{settings.project}"
        self._me: str | None = None
        self.leases = JiraLeases(settings, api, self.me, **({} if settle is None else {"settle": settle}))
        self.claims: ClaimStore = claims(self.identity, self.leases) if claims else self.leases
        self.allow = {a.lower() for a in allow or []}
        #: Issues the last listing could not read, and why.
        self.unreadable: dict[str, str] = {}
        self._progress: dict[str, tuple[str, float]] = {}  # issue key -> (the run's progress comment id, last edit)
        self._permissions: dict[str, tuple[bool, float]] = {}
        self._lock = threading.Lock()

    def me(self) -> str:
        """The account id of the token's account (asked once)."""
        if self._me is None:
            self._me = wire.parse(wire.User, self.api.get("/myself"), "GET /myself").accountId
        return self._me

    # -- reading -----------------------------------------------------------------------------------------------------

    def jql(self, *, finished: bool) -> str:
        """The JQL of beflow's issues (``finished``: those in a Done status too)."""
        parts = [f'project = "{self.settings.project}"']
        parts += [f'labels = "{label}"' for label in self.settings.labels]
        if self.settings.jql:
            parts.append(f"({self.settings.jql})")
        if not finished:
            parts.append("statusCategory != Done")
        return " AND ".join(parts) + " ORDER BY priority DESC, created ASC"

    def _search(self, *, finished: bool) -> list[wire.Issue]:
        found: list[wire.Issue] = []
        token: str | None = None
        seen: set[str] = set()
        unreadable: dict[str, str] = {}
        for _ in range(200):
            params = {"jql": self.jql(finished=finished), "fields": FIELDS, "maxResults": PAGE}
            if token:
                params["nextPageToken"] = token
            page = wire.parse(wire.SearchPage, self.api.get("/search/jql", params), "GET /search/jql")
            for item in page.issues:
                got = wire.read_issue(item)
                if isinstance(got, wire.Unread):
                    unreadable[got.key or "?"] = got.why
                else:
                    found.append(got)
            token = page.nextPageToken
            if page.isLast is not False or not token or token in seen:
                break
            seen.add(token)
        self.unreadable = unreadable
        self.leases.observe({raw.key: raw.fields.updated for raw in found})
        return found

    def status_of(self, raw: wire.Issue) -> Status:
        """beflow's status of an issue: its status's category, and beflow's labels for what Jira has none for."""
        prefix = self.settings.status_prefix
        flags = {label[len(prefix) :] for label in raw.fields.labels if label.startswith(prefix)}
        category = raw.fields.status.statusCategory.key
        if category == FINISHED:
            return Status.CLOSED if "closed" in flags else Status.DONE
        if "failed" in flags:
            return Status.FAILED
        if "review" in flags:
            return Status.REVIEW
        if category == STARTED:
            return Status.IN_PROGRESS
        return Status.OPEN if "open" in flags else Status.READY

    def _mine(self, raw: wire.Issue) -> bool:
        wanted = {label.lower() for label in self.settings.labels}
        return raw.key.startswith(self.settings.project + "-") and wanted <= {x.lower() for x in raw.fields.labels}

    def issue(self, raw: wire.Issue, comments: list[Comment] | None = None) -> Issue:
        prefix = self.settings.status_prefix
        priority = raw.fields.priority
        return Issue(
            key=raw.key,
            id=raw.id,
            title=raw.fields.summary.strip() or "(no summary)",
            status=self.status_of(raw),
            labels=[label for label in raw.fields.labels if not label.startswith(prefix)][:50],
            priority=_PRIORITIES.get(priority.id, DEFAULT_PRIORITY) if priority else DEFAULT_PRIORITY,
            created=raw.fields.created,
            updated=raw.fields.updated,
            body=adf.markdown(raw.fields.description),
            comments=comments or [],
            url=f"{self.settings.site}/browse/{raw.key}",
        )

    def _readable(self, raws: list[wire.Issue]) -> list[Issue]:
        out = []
        for raw in raws:
            try:
                out.append(self.issue(raw))
            except ValueError as error:
                self.unreadable[raw.key] = str(error).splitlines()[0]
        return out

    def listing(self, status: Status | None = None, label: str | None = None) -> Listing:
        finished = status is None or status in (Status.DONE, Status.CLOSED)
        issues = self._readable(self._search(finished=finished))
        chosen = [i for i in issues if (status is None or i.status == status) and (label is None or label in i.labels)]
        return Listing(issues=sorted(chosen, key=_by_key))

    def ready(self) -> list[Issue]:
        return ready_of(self._readable(self._search(finished=False)), self.claims)

    def orphaned(self) -> list[Issue]:
        return orphans_of(self._readable(self._search(finished=False)), self.claims)

    def _fetch(self, key: str, *, mine: bool = True) -> wire.Issue:
        """Issue ``key`` read on its own (never from the search, which may lag)."""
        wanted = jira_key(key)
        if not _KEY.match(wanted):
            raise NotFoundError(
                f"no issue {excerpt(key, quote=False)} in Jira: its keys are such as {self.settings.project}-42",
                fix="beflow issues list",
            )
        try:
            data = self.api.get(f"/issue/{wanted}", {"fields": FIELDS})
        except JiraError as error:
            if error.status == 404:
                raise NotFoundError(
                    f"no issue {wanted} in Jira", fix="`beflow issues list` shows every issue."
                ) from None
            raise
        got = wire.read_issue(data)
        if isinstance(got, wire.Unread):
            raise wire.MalformedAnswer(f"Jira's issue {wanted} cannot be read: {got.why}")
        if mine and not self._mine(got):
            labels = ", ".join(self.settings.labels)
            raise NotFoundError(
                f"issue {got.key} is not beflow's: it is not in the project {self.settings.project} with the "
                f"label(s) {labels}",
                fix=f"Add the label(s) {labels} in Jira to hand it to beflow.",
            )
        return got

    def get(self, key: str, *, mine: bool = True) -> Issue:
        raw = self._fetch(key, mine=mine)
        comments, _ = self.leases.comments(raw.key)
        read = [c for c in (self._comment(c) for c in comments if not is_claim(c)) if c is not None]
        return self.issue(raw, read)

    def _comment(self, raw: wire.Comment) -> Comment | None:
        text = adf.markdown(raw.body)
        if not text.strip():
            return None
        author = raw.author
        comment = Comment(author=(author.displayName or author.accountId) if author else "unknown", created=raw.created,
                          text=text)  # fmt: skip
        return comment.withholding(self.why_unread(author))

    def why_unread(self, author: wire.User | None) -> str | None:
        """None when a comment by ``author`` may reach an agent's prompt: beflow's own account, one in
        ``feedback.allow`` (by account id), or one who may edit the project's issues; else why not."""
        if author is None:
            return "its author is unknown"
        if author.accountId == self.me() or author.accountId.lower() in self.allow:
            return None
        if self._may_edit(author.accountId):
            return None
        return (
            f"{author.displayName or author.accountId} may not edit the issues of {self.settings.project} and is not "
            "in feedback.allow"
        )

    def _may_edit(self, account: str) -> bool:
        with self._lock:
            held = self._permissions.get(account)
        if held is not None and time.monotonic() - held[1] < PERMISSION_TTL:
            return held[0]
        params = {"accountId": account, "projectKey": self.settings.project, "permissions": "EDIT_ISSUES"}
        try:
            found = self.api.get("/user/permission/search", params)
        except JiraError:
            return False  # (not known: the words stay out, as a stranger's)
        ok = isinstance(found, list) and any(isinstance(u, dict) and u.get("accountId") == account for u in found)
        with self._lock:
            self._permissions[account] = (ok, time.monotonic())
        return ok

    # -- writing -----------------------------------------------------------------------------------------------------

    def create(
        self,
        title: str,
        body: str = "",
        labels: list[str] | None = None,
        priority: int = DEFAULT_PRIORITY,
        status: Status = Status.READY,
    ) -> Issue:
        draft = draft_issue(title, body, labels, priority, status)
        names = list(dict.fromkeys([*self.settings.labels, *(x.replace(" ", "-") for x in draft.labels)]))
        if status == Status.OPEN:
            names.append(f"{self.settings.status_prefix}open")
        fields: dict[str, Any] = {
            "project": {"key": self.settings.project},
            "summary": draft.title,
            "issuetype": {"name": "Task"},
            "labels": names,
        }
        if draft.body:
            fields["description"] = adf.document(draft.body)
        if priority != DEFAULT_PRIORITY:
            fields["priority"] = {"id": str(min(priority, 4) + 1)}
        made = wire.parse(wire.Created, self.api.request("POST", "/issue", json={"fields": fields}).data, "POST /issue")
        return self.issue(self._fetch(made.key, mine=False))

    def _post(self, key: str, text: str) -> str:
        path = f"/issue/{key}/comment"
        made = self.api.request("POST", path, json={"body": adf.document(text)})
        return wire.parse(wire.Comment, made.data, f"POST {path}").id

    def _edit(self, key: str, comment_id: str, text: str) -> None:
        self.api.request("PUT", f"/issue/{key}/comment/{comment_id}", json={"body": adf.document(text)})

    def comment(self, key: str, text: str, author: str) -> Comment:
        draft_comment(text, author)
        raw = self._fetch(key)
        with self.claims.under_lease(raw.key):
            path = f"/issue/{raw.key}/comment"
            made = self.api.request("POST", path, json={"body": adf.document(text)})
        got = wire.parse(wire.Comment, made.data, f"POST {path}")
        return Comment(author=author, created=got.created, text=text)

    def transitions(self, key: str) -> list[wire.Transition]:
        path = f"/issue/{key}/transitions"
        return [t for t in wire.parse(wire.Transitions, self.api.get(path), f"GET {path}").transitions if t.isAvailable]

    def _transition(self, raw: wire.Issue, named: str | None, category: str | None, setting: str) -> None:
        """Take the transition ``named`` (its name or its status's), else any into ``category``; a named one that the
        workflow lacks is :class:`JiraWorkflowError`; a category none leads to is left as it is."""
        found = self.transitions(raw.key)
        if named is not None:
            chosen = next((t for t in found if named.lower() in (t.name.lower(), t.to.name.lower())), None)
            if chosen is None:
                offered = ", ".join(t.name for t in found) or "none"
                raise JiraWorkflowError(
                    f"issue {raw.key}: its workflow offers no transition {named!r} from {raw.fields.status.name!r} "
                    f"(it offers: {offered})",
                    fix=f"Set {setting} to one of them, or add the transition to the project's workflow in Jira.",
                )
        else:
            chosen = next((t for t in found if t.to.statusCategory.key == category), None)
            if chosen is None:
                return
        if chosen.to.id and chosen.to.id == raw.fields.status.id:
            return
        self.api.request("POST", f"/issue/{raw.key}/transitions", json={"transition": {"id": chosen.id}})

    def _move(self, raw: wire.Issue, current: Status, status: Status) -> None:
        prefix = self.settings.status_prefix
        flags = {f"{prefix}{name}" for name in ("open", "review", "failed", "closed")}
        keep: set[str] = set()
        category = raw.fields.status.statusCategory.key
        moves = self.settings.transitions
        if status == Status.IN_PROGRESS:
            self._transition(raw, moves.in_progress, None, "tracker.transitions.in_progress")
        elif status == Status.REVIEW:
            if moves.review is not None:
                self._transition(raw, moves.review, None, "tracker.transitions.review")
            keep = {f"{prefix}review"}
        elif status == Status.DONE:
            self._transition(raw, moves.done, None, "tracker.transitions.done")
        elif status == Status.CLOSED:
            if category != FINISHED:
                self._transition(raw, None, FINISHED, "tracker.transitions.done")
            keep = {f"{prefix}closed"}
        elif status in (Status.READY, Status.OPEN, Status.FAILED):
            if category != NEW:
                self._transition(raw, None, NEW, "tracker.transitions")
            keep = {f"{prefix}{status.value}"} if status != Status.READY else set()
        present = set(raw.fields.labels)
        changes = [{"remove": label} for label in sorted((flags - keep) & present)]
        changes += [{"add": label} for label in sorted(keep - present)]
        if changes:
            self.api.request("PUT", f"/issue/{raw.key}", json={"update": {"labels": changes}})

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        status = Status(status)
        raw = self._fetch(key)
        current = self.status_of(raw)
        check_transition(raw.key, current, status)
        with self.claims.under_lease(raw.key):
            if current != status:
                self._move(raw, current, status)
            if note and note.strip():
                self._note(raw.key, current, status, note)
            elif status == Status.IN_PROGRESS and current != status:
                self._start_progress(raw.key, "beflow is working on this issue.")
        return self.get(raw.key, mine=False)

    def _note(self, key: str, before: Status, after: Status, note: str) -> None:
        if after == Status.IN_PROGRESS and before != after:
            self._start_progress(key, note)
            return
        with self._lock:
            progress = self._progress.pop(key, None) if before == Status.IN_PROGRESS else None
        if progress is not None:
            try:
                self._edit(key, progress[0], note)  # the run's one comment now says how it ended
                return
            except JiraError as error:
                if error.status != 404:  # deleted by a person: said in a new comment
                    raise
        self._post(key, note)

    def _start_progress(self, key: str, text: str) -> None:
        made = self._post(key, text)
        with self._lock:
            self._progress[key] = (made, time.monotonic())

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress comment (at most every ``PROGRESS_EVERY`` seconds); whether it was edited."""
        key = jira_key(key)
        with self._lock:
            held = self._progress.get(key)
            if held is None or (not force and time.monotonic() - held[1] < PROGRESS_EVERY):
                return False
            self._progress[key] = (held[0], time.monotonic())
        try:
            with self.claims.under_lease(key, prove=False):
                self._edit(key, held[0], text)
        except (BeflowError, ClaimLost):
            return False  # progress is a courtesy: a failed edit never fails a run
        return True

    # -- claims ------------------------------------------------------------------------------------------------------

    def claim(self, key: str, owner: str) -> Claim:
        """Read the issue back first (the search lags): a ready one whose workflow lacks the ``in_progress``
        transition is refused before anything is written."""
        raw = self._fetch(key)
        if self.status_of(raw) == Status.READY:
            named = self.settings.transitions.in_progress.lower()
            if not any(named in (t.name.lower(), t.to.name.lower()) for t in self.transitions(raw.key)):
                raise JiraWorkflowError(
                    f"issue {raw.key}: its workflow offers no transition {self.settings.transitions.in_progress!r} "
                    f"from {raw.fields.status.name!r}: no run starts",
                    fix="Set tracker.transitions.in_progress to the transition's name, or add it in Jira "
                    "(`beflow doctor` lists what is missing).",
                )
        return self.claims.claim(raw.key, owner)

    def holder(self, key: str) -> ClaimInfo | None:
        return self.claims.holder(jira_key(key))

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.claims.last_holder(jira_key(key))

    # -- what beflow may do there ------------------------------------------------------------------------------------

    def access_checks(self) -> list[Finding]:
        """Whose token it is, the project, the account's permissions in it, and the transitions beflow takes."""
        from beflow.trackers.jira_access import access_checks

        return access_checks(self)

    def rate_budget(self) -> RateBudget:
        stats = self.api.stats
        return RateBudget(stats.remaining, stats.reset, stats.rate_limited)

    # -- words -------------------------------------------------------------------------------------------------------

    def inert(self, text: str) -> str:
        return jira_quoting.inert(text)

    def pull_request_inert(self, text: str) -> str:
        """Jira's code-host integrations read issue keys in a pull request (and smart commits): every key of the
        agent's words is broken."""
        return jira_quoting.keys_inert(text)

    def held_secrets(self) -> list[str]:
        """The API token, and the basic auth header's value that holds it."""
        return [s for s in (self.api.token, self.api.basic) if s]


def _by_key(issue: Issue) -> tuple[str, int, str]:
    project, _, number = issue.key.rpartition("-")
    return (project, int(number) if number.isdigit() else 0, issue.key)
