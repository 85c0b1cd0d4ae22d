"""The Jira tracker: the issues of one Jira Cloud project, through its REST API v3 (docs/trackers.md).

- **Which issues**: the project's (``tracker.project``), carrying every label of ``tracker.labels``, matching
  ``tracker.jql`` when given; listed with ``/search/jql`` (``nextPageToken`` pages). The search is eventually
  consistent: before a claim or a move an issue is read back on its own (``GET /issue/{key}``).
- **Keys** are Jira's (``WID-42``); the record keeps the issue's numeric id (:attr:`Issue.id`), which a move to
  another project does not change.
- **Status** is the status's category (To Do, In Progress, Done) and the workflow's transitions named in
  ``tracker.transitions``; what Jira has no category for (review, failed, open, closed) is a label under
  ``tracker.status_prefix``. The configured transitions are checked against the project's workflows before any run
  (:meth:`JiraTracker.check_setup`), and a claim is refused when the issue's status offers no ``in_progress`` one.
- **Order**: Jira's priority (Highest first, Lowest last), then Jira's Rank, then age — the search's own order,
  kept as :attr:`Issue.rank`; a ``tracker.jql`` with its own ``ORDER BY`` orders the issues of one priority instead.
- **Comments** are Atlassian Document Format both ways (:mod:`beflow.trackers.jira_adf`): written from Markdown,
  read as Markdown with hidden content left out; a comment by someone who may not edit the project's issues (and is
  not in ``feedback.allow``) stays out of prompts. A run keeps one progress comment that it edits in place. An agent's
  words are made inert (:mod:`beflow.trackers.jira_quoting`).
- **Claims** are a chain of the account's own comments (:mod:`beflow.trackers.jira_claims`), seen only by
  ``tracker.claim_visibility`` when set (so they notify no one else).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from beflow.config import JiraTrackerSettings, Project
from beflow.errors import NotFoundError, excerpt
from beflow.trackers import jira_adf as adf
from beflow.trackers import jira_quoting
from beflow.trackers import jira_wire as wire
from beflow.trackers.base import Finding, RateBudget
from beflow.trackers.claims import Claim, ClaimInfo, ClaimsOver, ClaimStore, orphans_of, ready_of
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
from beflow.trackers.jira_access import access_checks
from beflow.trackers.jira_api import Api, JiraError, credentials
from beflow.trackers.jira_claims import JiraLeases, is_claim
from beflow.trackers.jira_comments import IssueComments
from beflow.trackers.jira_workflow import JiraWorkflowError, Workflow
from beflow.validation import place_of

__all__ = ["JiraTracker", "JiraWorkflowError", "jira_key", "open_jira"]

_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,19}-[0-9]{1,12}$")
#: beflow's order of a search: priority, then Jira's Rank (the board's order), then age.
ORDER = "ORDER BY priority DESC, Rank ASC, created ASC"
_ORDER_BY = re.compile(r"order\s+by\b\s*", re.IGNORECASE)
#: The fields beflow reads of an issue.
FIELDS = "summary,status,labels,priority,created,updated,description"
#: Issues a search page asks for.
PAGE = 100
#: Jira's default priorities by id (Highest 1 ... Lowest 5) as beflow's (0 first); another id is the default.
_PRIORITIES = {"1": 0, "2": 1, "3": 2, "4": 3, "5": 4}


def jira_key(key: str) -> str:
    """A key as people type it (``wid-42``) as Jira's (``WID-42``)."""
    return normalize_key(key).upper()


def open_jira(project: Project, settings: JiraTrackerSettings, claims: ClaimsOver | None = None) -> JiraTracker:
    """The Jira tracker of ``settings``; ``claims``: the engine's store over its leases (beflow.app)."""
    email, token = credentials(settings)
    api = Api(settings.site, email, token, token_name=settings.token_env)
    allow = project.config.feedback.allow if project is not None else []
    where = project.config_path if project is not None else None
    return JiraTracker(settings, api, claims=claims, allow=allow, config_path=where)


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
        config_path: Path | None = None,
    ) -> None:
        self.settings = settings
        #: The configuration file, named by doctor's findings about a setting.
        self.config_path = config_path
        self.api = api
        host = urlsplit(settings.site).hostname or settings.site
        labels = ", ".join(settings.labels) or "(any)"
        self.description = f"Jira issues of {settings.project} on {host} labelled {labels}"
        self.identity = f"jira:{host}/{settings.project}"
        self._me: str | None = None
        self.leases = JiraLeases(settings, api, self.me, **({} if settle is None else {"settle": settle}))
        self.claims: ClaimStore = claims(self.identity, self.leases) if claims else self.leases
        self.workflow = Workflow(api, settings)
        self.comments = IssueComments(api, settings.project, lambda: self.claims, self.me, allow or [])
        #: Issues the last listing could not read, and why.
        self.unreadable: dict[str, str] = {}
        #: Within :meth:`reading_once`, the searches made so far (by whether finished issues were asked for).
        self._once: dict[bool, list[wire.Issue]] | None = None

    def me(self) -> str:
        """The account id of the token's account (asked once)."""
        if self._me is None:
            self._me = wire.parse(wire.User, self.api.get("/myself"), "GET /myself").accountId
        return self._me

    # -- reading -----------------------------------------------------------------------------------------------------

    def jql(self, *, finished: bool) -> str:
        """The JQL of beflow's issues (``finished``: those in a Done status too), in beflow's order — or in the
        order of ``tracker.jql``'s own ``ORDER BY`` when it has one (priority still comes first: Issue.order)."""
        parts = [f"project = {_jql_string(self.settings.project)}"]
        parts += [f"labels = {_jql_string(label)}" for label in self.settings.labels]
        order = ORDER
        if self.settings.jql:
            where, own = split_order(self.settings.jql)
            if where:
                parts.append(f"({where})")
            order = own or order
        if not finished:
            parts.append("statusCategory != Done")
        return " AND ".join(parts) + " " + order

    @contextlib.contextmanager
    def reading_once(self) -> Iterator[None]:
        """Every question of the block is answered from one search (a watch tick asks for ready and orphaned
        issues: one request, not two)."""
        outer, self._once = self._once, {}
        try:
            yield
        finally:
            self._once = outer

    def _search(self, *, finished: bool) -> list[wire.Issue]:
        if self._once is None:
            return self._searched(finished=finished)
        if finished in self._once:
            return self._once[finished]
        if not finished and True in self._once:  # (the active ones, out of a search that had the finished ones too)
            return [r for r in self._once[True] if r.fields.status.statusCategory.key != "done"]
        self._once[finished] = self._searched(finished=finished)
        return self._once[finished]

    def _searched(self, *, finished: bool) -> list[wire.Issue]:
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

    def _mine(self, raw: wire.Issue) -> bool:
        wanted = {label.lower() for label in self.settings.labels}
        return raw.key.startswith(self.settings.project + "-") and wanted <= {x.lower() for x in raw.fields.labels}

    def issue(self, raw: wire.Issue, comments: list[Comment] | None = None, rank: str | None = None) -> Issue:
        prefix = self.settings.status_prefix
        priority = raw.fields.priority
        return Issue(
            key=raw.key,
            id=raw.id,
            title=raw.fields.summary.strip() or "(no summary)",
            status=self.workflow.status_of(raw),
            labels=[label for label in raw.fields.labels if not label.startswith(prefix)][:50],
            priority=_PRIORITIES.get(priority.id, DEFAULT_PRIORITY) if priority else DEFAULT_PRIORITY,
            created=raw.fields.created,
            updated=raw.fields.updated,
            body=adf.markdown(raw.fields.description),
            comments=comments or [],
            url=f"{self.settings.site}/browse/{raw.key}",
            rank=rank,
        )

    def _readable(self, raws: list[wire.Issue]) -> list[Issue]:
        """``raws`` as issues, each ranked by its place in the search (Jira's Rank, or the ``jql``'s own order)."""
        out = []
        for place, raw in enumerate(raws):
            try:
                out.append(self.issue(raw, rank=f"{place:06d}"))
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
        comments, _ = self.leases.comments.listed(raw.key)
        read = [c for c in (self.comments.read(c) for c in comments if not is_claim(c)) if c is not None]
        return self.issue(raw, read)

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
            "issuetype": {"name": self.settings.issue_type},
            "labels": names,
        }
        if draft.body:
            fields["description"] = adf.document(draft.body)
        if priority != DEFAULT_PRIORITY:
            fields["priority"] = {"id": str(min(priority, 4) + 1)}
        made = wire.parse(wire.Created, self.api.request("POST", "/issue", json={"fields": fields}).data, "POST /issue")
        return self.issue(self._fetch(made.key, mine=False))

    def comment(self, key: str, text: str, author: str) -> Comment:
        draft_comment(text, author)
        raw = self._fetch(key)
        with self.claims.under_lease(raw.key):
            got = self.comments.post(raw.key, text)
        return Comment(author=author, created=got.created, text=text)

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        status = Status(status)
        raw = self._fetch(key)
        current = self.workflow.status_of(raw)
        check_transition(raw.key, current, status)
        with self.claims.under_lease(raw.key):
            if current != status:
                self.workflow.move(raw, status)
            if note and note.strip():
                self.comments.note(raw.key, current, status, note)
            elif status == Status.IN_PROGRESS and current != status:
                self.comments.start_progress(raw.key, "beflow is working on this issue.")
        return self.get(raw.key, mine=False)

    # -- claims ------------------------------------------------------------------------------------------------------

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress comment (at most every few seconds); whether it was edited."""
        return self.comments.progress(jira_key(key), text, force=force)

    def claim(self, key: str, owner: str) -> Claim:
        """Read the issue back first (the search lags): a ready one whose workflow lacks the ``in_progress``
        transition is refused before anything is written."""
        raw = self._fetch(key)
        self.workflow.check_start(raw)
        return self.claims.claim(raw.key, owner)

    def check_setup(self) -> None:
        """Before any run: every configured transition in the project's workflows (:meth:`Workflow.check_setup`)."""
        self.workflow.check_setup()

    def holder(self, key: str) -> ClaimInfo | None:
        return self.claims.holder(jira_key(key))

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.claims.last_holder(jira_key(key))

    # -- what beflow may do there ------------------------------------------------------------------------------------

    def access_checks(self) -> list[Finding]:
        """Whose token it is, the project, the account's permissions in it, and the transitions beflow takes."""
        where = place_of(self.config_path, "tracker", "issue_type")
        return access_checks(self.api, self.settings, self.listing, self.workflow, where)

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


def split_order(jql: str) -> tuple[str, str | None]:
    """``jql`` as its condition and its own ``ORDER BY`` clause (None without one); an ``ORDER BY`` in a quoted string
    is text, not a clause."""
    quote: str | None = None
    escaped = False
    for at, char in enumerate(jql):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif quote is not None:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif (at == 0 or not jql[at - 1].isalnum()) and (found := _ORDER_BY.match(jql, at)):
            return jql[:at].strip(), "ORDER BY " + jql[found.end() :].strip()
    return jql.strip(), None


def _jql_string(value: str) -> str:
    """``value`` as a JQL string: quoted, its quotes and backslashes escaped (nothing in it can end the string)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _by_key(issue: Issue) -> tuple[str, int, str]:
    project, _, number = issue.key.rpartition("-")
    return (project, int(number) if number.isdigit() else 0, issue.key)
