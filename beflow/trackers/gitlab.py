"""The GitLab tracker: the issues of one project, through the REST API v4 (docs/trackers.md, docs/scaling.md).

- **Which issues**: open or closed issues carrying every label of ``tracker.labels`` (default ``beflow``); their
  keys are their ``iid``s (``#3`` in the project). A confidential issue is skipped, and named, unless
  ``tracker.confidential`` is true.
- **Status** lives in labels under ``tracker.status_prefix``: ``beflow:ready``, ``beflow:in-progress``,
  ``beflow:review``, ``beflow:failed``; an open issue without one is ``open``. A closed issue is ``done``, unless it
  carries ``beflow:closed`` (:mod:`beflow.trackers.gitlab_labels`). Priority comes from a ``priority:N`` label, else
  from GitLab's weight (:mod:`beflow.trackers.gitlab_issues`).
- **Polling** costs one request per look: the issues are held in memory and brought up to date with
  ``updated_after`` (:mod:`beflow.trackers.gitlab_listing`); a watch tick looks once.
- **Notes** beflow writes end with a hidden marker and hold no quick action; a run keeps one progress note that it
  edits in place (:mod:`beflow.trackers.gitlab_notes`). An agent's words are made inert
  (:mod:`beflow.trackers.gitlab_quoting`).
- **Claims** are leases kept as internal notes (:mod:`beflow.trackers.gitlab_claims`, the tracker's claim store).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from beflow.config import GitLabTrackerSettings, Project
from beflow.errors import NotFoundError, UsageError, excerpt
from beflow.trackers import gitlab_quoting
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.base import Finding, RateBudget
from beflow.trackers.blockers import Blocker
from beflow.trackers.claims import Claim, ClaimInfo, ClaimsOver, ClaimStore, orphans_of, ready_of
from beflow.trackers.gitlab_access import access_checks
from beflow.trackers.gitlab_api import (
    Api,
    GitLabAccessError,
    GitLabAuthError,
    GitLabError,
    api_base,
    project_from_remote,
    project_id,
    resolve_token,
    web_host,
)
from beflow.trackers.gitlab_claims import GitLabLeases
from beflow.trackers.gitlab_issues import IssueReader
from beflow.trackers.gitlab_labels import ProjectLabels
from beflow.trackers.gitlab_listing import Look, ProjectIssues
from beflow.trackers.gitlab_notes import PROGRESS_MARKER, IssueNotes, Members
from beflow.trackers.gitlab_triggers import GitLabTriggers
from beflow.trackers.handovers import HANDED_MARKER, Own, unhanded
from beflow.trackers.issue import (
    DEFAULT_PRIORITY,
    Comment,
    Issue,
    Listing,
    Status,
    check_transition,
    draft_comment,
    draft_issue,
    labels_of_new,
    normalize_key,
)
from beflow.trackers.quoting import unmarked
from beflow.trackers.triggers import Heard


def open_gitlab(project: Project, settings: GitLabTrackerSettings, claims: ClaimsOver | None = None) -> GitLabTracker:
    """The GitLab tracker of ``settings`` (its project configured, else the checkout's ``origin``); ``claims``: the
    engine's store over its leases (beflow.app)."""
    path = settings.project or project_from_remote(project, settings.url)
    client = Api(api_base(settings.url), resolve_token(settings), token_name=settings.token_env)
    return GitLabTracker(settings, path, client, project, claims=claims)


class GitLabTracker:
    """Issues of one GitLab project (see the module's description)."""

    def __init__(
        self,
        settings: GitLabTrackerSettings,
        project: str,
        api: Api,
        home: Project | None = None,
        *,
        claims: ClaimsOver | None = None,
    ) -> None:
        self.settings = settings
        #: The project's path (``acme/widgets``), and the API's path of it (``/projects/acme%2Fwidgets``).
        self.project = project
        self.base = f"/projects/{project_id(project)}"
        self.api = api
        #: The beflow project whose config named this tracker, if any.
        self.home = home
        labelled = ", ".join(settings.labels) or "(any)"
        self.description = f"GitLab issues of {project} labelled {labelled}"
        self.identity = f"gitlab:{web_host(settings.url)}/{project}"
        self.labels_home = f"GitLab project {project}"
        self._call = _ProjectCalls(api, project, self.base, settings.token_env)
        #: Its status labels (``beflow:ready``, ...) and the labels that say an issue is beflow's.
        self.labels = ProjectLabels(api, self.base, self._call, settings)
        #: Whose words count: members with Developer access or more, and ``feedback.allow``.
        self.members = Members(api, self.base, project, home.config.feedback.allow if home else [])
        #: The tracker's own claims: leases as internal notes (beflow.trackers.gitlab_claims).
        self.leases = GitLabLeases(settings, api, self.base, self._call, me=lambda: self.members.me().id)
        #: Who runs which issue: the leases, or the engine's store over them (a fleet's running workflows).
        self.claims: ClaimStore = claims(self.identity, self.leases) if claims else self.leases
        #: The notes beflow writes: each posted once, and a run's one progress note; a run's note is written under
        #: its lease.
        self.notes = IssueNotes(api, self.base, self._call, self.leases)
        #: What GitLab says of an issue, as beflow's.
        self.reader = IssueReader(
            project, self.labels, self.members, settings.labels, confidential=settings.confidential
        )
        #: The issues held in memory, one request per look (beflow.trackers.gitlab_listing); every look tells the
        #: leases when each issue last changed, so that they know whose claims to read again.
        self.issues = ProjectIssues(api, self.base, self._call, self.reader, self.leases.observe)
        #: Mentions and assignments that hand issues over (beflow.trackers.gitlab_triggers).
        self.triggers = GitLabTriggers(api, self.base, self._call, self.labels, self.members, self.reader, self.issues)
        #: The issues the last look skipped (they cannot be read, or are confidential) and why.
        self.unreadable: dict[str, str] = {}
        #: ``triggers.label: false``: beflow's hand-overs leave a mark (beflow.trackers.handovers).
        self.marks_hand_overs = home is not None and not home.config.triggers.label
        self.triggers.marks = self.mark_handed
        if self.marks_hand_overs:
            self.triggers.handed = lambda key: self._unhanded(key) is None

    # -- reading ---------------------------------------------------------------------------------------------------

    def status_label(self, status: Status) -> str | None:
        return self.labels.of(status)

    def reading_once(self) -> AbstractContextManager[None]:
        """Within the block, this thread's questions are answered from one look at the issues (a watch tick)."""
        return self.issues.reading_once()

    def _look(self) -> Look:
        look = self.issues.look()
        self.unreadable = look.skipped
        return look

    def listing(self, status: Status | None = None, label: str | None = None) -> Listing:
        look = self._look()
        chosen = [i for i in look.issues if (status is None or i.status == status) and (label in (None, *i.labels))]
        return Listing(issues=chosen, problems=look.problems)

    def ready(self) -> list[Issue]:
        return ready_of(self._look().issues, self.claims)

    def orphaned(self) -> list[Issue]:
        return orphans_of(self._look().issues, self.claims)

    def _raw_issue(self, key: str) -> wire.Issue:
        wanted = normalize_key(key)
        if not (wanted.isascii() and wanted.isdigit()):
            shown = excerpt(key, quote=False)
            raise NotFoundError(
                f"no issue {shown} in {self.project}: GitLab issues are numbers (their iid)", fix="beflow issues list"
            )
        path = f"{self.base}/issues/{wanted}"
        try:
            raw = self.reader.one(self._call(self.api.get, path), wanted)
        except GitLabError as error:
            if error.status in (404, 410):
                self.issues.forget(int(wanted))
                raise NotFoundError(
                    f"no issue {wanted} in {self.project}", fix="`beflow issues list` shows every issue."
                ) from None
            raise
        self.issues.saw(raw)
        if not self.reader.mine(raw):
            labels = ", ".join(self.settings.labels)
            raise NotFoundError(
                f"issue {wanted} in {self.project} is not beflow's: it does not carry the label(s) {labels}",
                fix=f"Add the label(s) {labels} on GitLab to hand it to beflow.",
            )
        withheld = self.reader.withheld(raw)
        if withheld is not None:
            raise NotFoundError(withheld, fix='Set "confidential": true in the tracker settings to hand them over.')
        return raw

    def get(self, key: str) -> Issue:
        return self._with_notes(self._raw_issue(key))

    def _with_notes(self, raw: wire.Issue) -> Issue:
        path = f"{self.base}/issues/{raw.iid}/notes"
        data = self._call(self.api.paginate, path, {"sort": "asc", "order_by": "created_at"})
        return self.reader.issue(raw, self.reader.comments(data, f"GET {path}", raw))

    def blockers(self, issue: Issue) -> list[Blocker]:
        """The issues ``issue`` is blocked by: its blocking links (``is_blocked_by``; GitLab Premium). One request,
        asked only of an issue about to be dispatched: GitLab's listing says nothing of them."""
        path = f"{self.base}/issues/{normalize_key(issue.key)}/links"
        links, _ = wire.read_each(wire.IssueLink, self._call(self.api.get, path), f"GET {path}")
        return [
            Blocker(self._linked_key(link), self.labels.status_of(link))
            for link in links
            if link.link_type == "is_blocked_by"
        ]

    def hear(self, mention: str | None, assign: bool) -> Heard:
        return self.triggers.hear(mention, assign)

    def mark_handed(self, key: str, why: str) -> None:
        if self.marks_hand_overs:
            text = f"Handed over to beflow: {self.inert(unmarked(why))}."
            self.notes.post(int(normalize_key(key)), text, HANDED_MARKER)

    def unhanded(self, issue: Issue) -> str | None:
        return self._unhanded(issue.key)

    def _unhanded(self, key: str) -> str | None:
        path = f"{self.base}/issues/{normalize_key(key)}/notes"
        data = self._call(self.api.paginate, path, {"sort": "asc", "order_by": "created_at"})
        notes, _ = wire.read_each(wire.Note, data, f"GET {path}")
        own = (Own(n.id, n.text) for n in notes if not n.system and self.members.own(n))
        return unhanded(own, PROGRESS_MARKER)

    def _linked_key(self, link: wire.IssueLink) -> str:
        """``5`` in this project, ``group/other#5`` in another (read from its page's address)."""
        home = (link.web_url or "").partition("/-/")[0].split("://", 1)[-1].partition("/")[2]
        return str(link.iid) if not home or home.lower() == self.project.lower() else f"{home}#{link.iid}"

    # -- writing ---------------------------------------------------------------------------------------------------

    def ensure_labels(self) -> list[str]:
        """Create the labels beflow needs that the project lacks; returns the names created."""
        return self.labels.ensure()

    def missing_labels(self) -> list[str]:
        return self.labels.missing()

    def access_checks(self) -> list[Finding]:
        """What GitLab says the token may do: the api scope, the project, the right to push (``beflow doctor``)."""
        return access_checks(self.api, self.project, self.settings)

    def rate_budget(self) -> RateBudget:
        stats = self.api.stats
        return RateBudget(stats.remaining, stats.reset, stats.rate_limited)

    def create(
        self,
        title: str,
        body: str = "",
        labels: list[str] | None = None,
        priority: int = DEFAULT_PRIORITY,
        status: Status = Status.READY,
    ) -> Issue:
        draft = draft_issue(title, body, labels, priority, status)  # the same checks as every tracker
        for name in draft.labels:
            if "," in name:  # GitLab splits label names at commas: "bug,beflow:ready" would be two labels
                shown = excerpt(name, quote=True)
                raise UsageError(f"new issue: labels: {shown} holds a comma, and GitLab reads it as several labels")
        self.labels.ready()
        names = labels_of_new(self.settings.labels, draft, self.status_label(status))
        payload = {"title": draft.title, "description": draft.body, "labels": ",".join(names)}
        path = f"{self.base}/issues"
        made = wire.parse(wire.Issue, self._call(self.api.request, "POST", path, json=payload).data, f"POST {path}")
        self.issues.saw(made)
        return self.reader.issue(made)

    def comment(self, key: str, text: str, author: str) -> Comment:
        draft_comment(text, author)
        iid = self._raw_issue(key).iid
        with self.claims.under_lease(str(iid)):
            posted = self.notes.post(iid, text)
        made = self.reader.comment(posted, posted.created_at)
        assert made is not None
        return made

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        status = Status(status)
        raw = self._raw_issue(key)
        iid = raw.iid
        current = self.labels.status_of(raw)
        check_transition(str(iid), current, status)
        with self.claims.under_lease(str(iid)):  # a run's labels and notes, only while the issue is its own
            if current != status:
                self.labels.ready()
                self._move(raw, status)
            if note and note.strip():
                self.notes.note(str(iid), current, status, note)
            elif status == Status.IN_PROGRESS and current != status:
                self.notes.start_progress(str(iid), "beflow is working on this issue.")
        # As it is now, even if it stopped being beflow's meanwhile (a person took the label away).
        path = f"{self.base}/issues/{iid}"
        now = self.reader.one(self._call(self.api.get, path), str(iid))
        self.issues.saw(now)
        return self._with_notes(now)

    def _move(self, raw: wire.Issue, status: Status) -> None:
        edit = self.labels.change(raw, status)
        if not edit:
            return
        path = f"{self.base}/issues/{raw.iid}"
        answer = self._call(self.api.request, "PUT", path, json=edit).data
        moved = wire.read(wire.Issue, answer)
        if not isinstance(moved, wire.Unread):
            self.issues.saw(moved)

    def flag_label(self, flag: str) -> str:
        return f"{self.settings.status_prefix}{flag}"

    def flag(self, key: str, flag: str, note: str) -> Issue:
        """The label ``flag`` under the status prefix (GitLab makes it when the project lacks it), and ``note`` as
        one note."""
        raw = self._raw_issue(key)
        iid, label = raw.iid, self.flag_label(flag)
        with self.claims.under_lease(str(iid)):
            if label not in raw.labels:
                path = f"{self.base}/issues/{iid}"
                self._call(self.api.request, "PUT", path, json={"add_labels": label})
            self.notes.post(iid, note)
        return self.get(str(iid))

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress note (at most every ``PROGRESS_EVERY`` seconds); whether it was edited. The text
        is beflow's line with the agent's latest activity in it, made inert as GitLab reads it (a run quotes the
        activity for GitHub, which links ``#`` and ``@`` only: ``!3``, ``~label`` or ``%milestone`` would act here)."""
        return self.notes.progress(key, gitlab_quoting.inert(text), force=force)

    # -- claims: leases as internal notes (beflow.trackers.gitlab_claims) ----------------------------------------

    def claim(self, key: str, owner: str) -> Claim:
        return self.claims.claim(str(self._raw_issue(key).iid), owner)

    def holder(self, key: str) -> ClaimInfo | None:
        return self.claims.holder(normalize_key(key))

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.claims.last_holder(normalize_key(key))

    # -- the project -----------------------------------------------------------------------------------------------

    def inert(self, text: str) -> str:
        """Made so that GitLab acts on nothing in it: no mention, reference, closing keyword or quick action."""
        return gitlab_quoting.inert(text)

    def held_secrets(self) -> list[str]:
        """Values that must never reach the agent, a log or a record: the token this tracker calls GitLab with
        (from its variable, or found through glab)."""
        return [self.api.token] if self.api.token else []


class _ProjectCalls:
    """The API called for one project: "the project is not there for this token" becomes an error naming the
    setting, and a refusal names the token's variable."""

    def __init__(self, api: Api, project: str, base: str, token_env: str) -> None:
        self.api = api
        self.project = project
        self.base = base
        self.token_env = token_env

    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GitLabAuthError:
            raise
        except GitLabError as error:
            if error.status in (403, 404) and not self._visible():
                raise GitLabAccessError(
                    f"tracker.project: {self.project} is not a project this token can see ({error.status})",
                    fix=f'Check "project" (and "url") in the tracker settings, and that the token in '
                    f"${self.token_env} has the api scope and access to it (Developer or more).",
                ) from None
            if error.status == 403:
                raise GitLabAccessError(
                    f"{error.message} — the token in ${self.token_env} may not do this in {self.project}",
                    fix="Give the token the api scope, and its user Developer access or more to the project.",
                ) from None
            raise

    def _visible(self) -> bool:
        try:
            self.api.get(self.base)
        except GitLabAuthError:
            raise
        except GitLabError as error:
            if error.status in (403, 404):
                return False
            raise
        return True
