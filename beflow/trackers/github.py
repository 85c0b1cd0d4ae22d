"""The GitHub tracker: the issues of one repository, through the REST API (docs/trackers.md, docs/scaling.md).

- **Which issues**: open or closed issues carrying every label of ``tracker.labels`` (default ``beflow``); pull
  requests are never issues.
- **Status** lives in labels under ``tracker.status_prefix``: ``beflow:ready``, ``beflow:in-progress``,
  ``beflow:review``, ``beflow:failed``; an open issue without one is ``open``. A closed issue is ``done`` when it was
  closed as completed, else ``closed``. Priority comes from a ``priority:N`` label.
- **Comments** beflow writes end with a hidden marker; a run keeps one progress comment that it edits in place.
- **Claims** are leases kept in git refs ``refs/beflow/claims/<number>``, each a compare-and-swap, so two machines
  can never both hold one issue (:mod:`beflow.trackers.github_leases`, the tracker's claim store).
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any
from urllib.parse import quote, urlparse

from beflow.config import GitHubCodeHostSettings, GitHubTrackerSettings, Project
from beflow.errors import ConfigError, NotFoundError, excerpt
from beflow.trackers import github_wire as wire
from beflow.trackers import quoting
from beflow.trackers.base import RateBudget
from beflow.trackers.blockers import Blocker
from beflow.trackers.claims import Claim, ClaimInfo, ClaimsOver, ClaimStore, orphans_of, ready_of
from beflow.trackers.forge_api import find_token
from beflow.trackers.github_api import (
    PUBLIC_API,
    Api,
    GitHubAccessError,
    GitHubAuthError,
    GitHubError,
)
from beflow.trackers.github_comments import PROGRESS_MARKER, Authors, IssueComments
from beflow.trackers.github_issues import IssueReader
from beflow.trackers.github_labels import RepoLabels
from beflow.trackers.github_leases import GitHubLeases
from beflow.trackers.github_triggers import GitHubTriggers
from beflow.trackers.handovers import HANDED_MARKER, Own, unhanded
from beflow.trackers.issue import (
    DEFAULT_PRIORITY,
    Comment,
    FileProblem,
    Issue,
    Listing,
    Status,
    check_transition,
    draft_comment,
    draft_issue,
    labels_of_new,
    normalize_key,
)
from beflow.trackers.triggers import Heard


def resolve_token(settings: GitHubTrackerSettings | GitHubCodeHostSettings, what: str = "tracker") -> str:
    """The token: ``$token_env``, else ``gh auth token``; a clear error naming both when neither gives one
    (``what``: the setting it is for, ``tracker`` or ``code_host``)."""
    token = find_token(settings.token_env, ["gh", "auth", "token"])
    if token:
        return token
    raise GitHubAuthError(
        f"{what}: no GitHub token: ${settings.token_env} is not set"
        + ("" if shutil.which("gh") else ", and the GitHub CLI (gh) is not installed"),
        fix=f"export {settings.token_env}=<a token with issues, contents and pull requests: write>, or "
        f"`gh auth login`; {what}.token_env names another variable.",
    )


def api_url(settings: GitHubTrackerSettings | GitHubCodeHostSettings) -> str:
    return settings.api_url or os.environ.get("GITHUB_API_URL", "").strip().rstrip("/") or PUBLIC_API


def web_host(api: str) -> str:
    """The host people and git use for an API base: api.github.com -> github.com; GHE keeps its host."""
    host = urlparse(api).hostname or "github.com"
    return "github.com" if host == "api.github.com" else host


def repo_from_remote(project: Project, api: str, setting: str = "tracker.repo") -> str:
    """``owner/name`` of the checkout's ``origin`` when it points at GitHub (``setting`` left out)."""
    from beflow.repository import remote

    url = remote.remote_url(project.directory, "origin")
    host = web_host(api)
    match = re.match(
        rf"^(?:https?://(?:[^@/]+@)?|ssh://(?:[^@/]+@)?|[^@/]+@){re.escape(host)}[:/](.+?)(?:\.git)?/?$", url or ""
    )
    if match and re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", match.group(1)):
        return match.group(1)
    where = f"{project.config_path}: " if project.config_path else ""
    said = f"origin is {url}" if url else "the checkout has no origin remote"
    raise ConfigError(
        f"{where}{setting}: not set, and {said}, which is not a repository on {host}",
        fix=f'Set "repo": "owner/name" in the {setting.partition(".")[0]} settings.',
    )


def open_github(project: Project, settings: GitHubTrackerSettings, claims: ClaimsOver | None = None) -> GitHubTracker:
    """The GitHub tracker of ``settings`` (its repository configured, else the checkout's ``origin``); ``claims``:
    the engine's store over its leases (beflow.app)."""
    api = api_url(settings)
    repo = settings.repo or repo_from_remote(project, api)
    client = Api(api, resolve_token(settings), token_name=settings.token_env)
    return GitHubTracker(settings, repo, client, project, claims=claims)


class GitHubTracker:
    """Issues of one GitHub repository (see the module's description)."""

    def __init__(
        self,
        settings: GitHubTrackerSettings,
        repo: str,
        api: Api,
        project: Project | None = None,
        *,
        claims: ClaimsOver | None = None,
    ) -> None:
        self.settings = settings
        self.repo = repo
        self.api = api
        self.project = project
        self.description = f"GitHub issues of {repo} labelled {', '.join(settings.labels) or '(any)'}"
        self.identity = f"github:{repo}"
        self.labels_home = f"GitHub issues of {repo}"
        self._base = f"/repos/{repo}"
        self._call = _RepoCalls(api, repo, settings.token_env)
        #: Its status labels (``beflow:ready``, ...) and the labels that say an issue is beflow's.
        self.labels = RepoLabels(api, self._base, self._call, settings)
        #: Leases in git refs of the repository (beflow.trackers.github_leases): the tracker's own claims.
        self.leases = GitHubLeases(settings, api, self._base, self._call)
        #: Who runs which issue: the leases, or the engine's store over them (a fleet's running workflows).
        self.claims: ClaimStore = claims(self.identity, self.leases) if claims else self.leases
        #: The comments beflow writes: each posted once, and a run's one progress comment (github_comments.py); a
        #: run's comment is written under its lease.
        self.comments = IssueComments(api, self._base, self._call, self.leases)
        self._login: str | None = None
        self.authors = Authors(api, repo, project.config.feedback.allow if project else [])  # (whose words count)
        #: What GitHub says of an issue, as beflow's (github_issues.py).
        self.reader = IssueReader(repo, self.labels, self.authors, settings.labels)
        #: Mentions and assignments that hand issues over (beflow.trackers.github_triggers).
        self.triggers = GitHubTriggers(api, self._base, self._call, self.labels, self.authors, settings.labels)
        #: The issues the last listing could not read (a hostile label) and why: they are skipped until fixed.
        self.unreadable: dict[str, str] = {}
        #: ``triggers.label: false``: beflow's hand-overs leave a mark (beflow.trackers.handovers).
        self.marks_hand_overs = project is not None and not project.config.triggers.label
        self.triggers.marks = self.mark_handed
        if self.marks_hand_overs:
            self.triggers.handed = lambda key: self._unhanded(key) is None

    # -- reading ---------------------------------------------------------------------------------------------------

    def status_label(self, status: Status) -> str | None:
        return self.labels.of(status)

    def _listed(self, state: str, extra: list[str] = ()) -> tuple[list[Issue], list[FileProblem]]:  # type: ignore[assignment]
        """The issues in ``state`` carrying the tracker's labels and ``extra``, and a problem naming each one that
        cannot be read: one hostile issue is that issue's problem (skipped, named), never a stall of every listing,
        pick and watch tick."""
        labels = [*self.settings.labels, *extra]
        params: dict[str, Any] = {"state": state, "sort": "created", "direction": "asc"}
        if labels:
            params["labels"] = ",".join(labels)
        path = f"{self._base}/issues"
        issues, problems, self.unreadable = self.reader.listing(
            self._call(self.api.paginate, path, params), f"GET {path}"
        )
        return issues, problems

    def listing(self, status: Status | None = None, label: str | None = None) -> Listing:
        extra = [label] if label else []
        if status in (Status.DONE, Status.CLOSED):
            state = "closed"
        elif status is None:
            state = "all"
        else:
            state = "open"
            wanted = self.status_label(status)
            if wanted:
                extra.append(wanted)
        issues, problems = self._listed(state, extra)
        chosen = [i for i in issues if (status is None or i.status == status) and (label is None or label in i.labels)]
        return Listing(issues=sorted(chosen, key=lambda i: int(i.key)), problems=problems)

    def ready(self) -> list[Issue]:
        candidates, _ = self._listed("open", [self.status_label(Status.READY) or ""])
        return ready_of(candidates, self.claims)

    def _raw_issue(self, key: str) -> wire.Issue:
        wanted = normalize_key(key)
        if not wanted.isdigit():
            shown = excerpt(key, quote=False)
            raise NotFoundError(f"no issue {shown} in {self.repo}: GitHub issues are numbers", fix="beflow issues list")
        try:
            raw = self.reader.one(self._call(self.api.get, f"{self._base}/issues/{wanted}"), wanted)
        except GitHubError as error:
            if error.status in (404, 410):
                raise NotFoundError(
                    f"no issue {wanted} in {self.repo}", fix="`beflow issues list` shows every issue."
                ) from None
            raise
        if raw.is_pull:
            raise NotFoundError(f"#{wanted} in {self.repo} is a pull request, not an issue")
        if not self.reader.mine(raw):
            labels = ", ".join(self.settings.labels)
            raise NotFoundError(
                f"issue {wanted} in {self.repo} is not beflow's: it does not carry the label(s) {labels}",
                fix=f"Add the label(s) {labels} on GitHub to hand it to beflow.",
            )
        return raw

    def get(self, key: str) -> Issue:
        return self._with_comments(self._raw_issue(key))

    def _with_comments(self, raw: wire.Issue) -> Issue:
        path = f"{self._base}/issues/{raw.number}/comments"
        comments = self.reader.comments(self._call(self.api.paginate, path), f"GET {path}", raw)
        return self.reader.issue(raw, comments)

    def blockers(self, issue: Issue) -> list[Blocker]:
        """The issues ``issue`` is blocked by: GitHub's issue dependencies (never its sub-issues). One request, and
        none where the listing said no open issue blocks it."""
        if self.reader.blocked_counts.get(issue.key) == 0:
            return []
        path = f"{self._base}/issues/{issue.key}/dependencies/blocked_by"
        try:
            data = self._call(self.api.paginate, path)
        except GitHubError as error:
            if error.status == 404:  # a GitHub without issue dependencies (an older Enterprise Server)
                return []
            raise
        raws, _ = wire.read_each(wire.Issue, data, f"GET {path}")
        return [Blocker(self._blocker_key(raw), self.labels.status_of(raw, raw.label_names)) for raw in raws]

    def hear(self, mention: str | None, assign: bool) -> Heard:
        return self.triggers.hear(mention, assign)

    def mark_handed(self, key: str, why: str) -> None:
        if self.marks_hand_overs:
            text = f"Handed over to beflow: {self.inert(quoting.unmarked(why))}."
            self.comments.post(int(normalize_key(key)), text, HANDED_MARKER)

    def unhanded(self, issue: Issue) -> str | None:
        return self._unhanded(issue.key)

    def _unhanded(self, key: str) -> str | None:
        path = f"{self._base}/issues/{normalize_key(key)}/comments"
        comments, _ = wire.read_each(wire.Comment, self._call(self.api.paginate, path), f"GET {path}")
        return unhanded((Own(c.id, c.text) for c in comments if self.authors.own(c)), PROGRESS_MARKER)

    def _blocker_key(self, raw: wire.Issue) -> str:
        """``5`` in this repository, ``owner/name#5`` in another."""
        home = "/".join((raw.repository_url or "").rstrip("/").split("/")[-2:])
        return str(raw.number) if not home or home.lower() == self.repo.lower() else f"{home}#{raw.number}"

    # -- writing ---------------------------------------------------------------------------------------------------

    def ensure_labels(self) -> list[str]:
        """Create the labels beflow needs that the repository lacks; returns the names created."""
        return self.labels.ensure()

    def rate_budget(self) -> RateBudget:
        stats = self.api.stats
        return RateBudget(stats.remaining, stats.reset, stats.rate_limited)

    def missing_labels(self) -> list[str]:
        return self.labels.missing()

    def create(
        self,
        title: str,
        body: str = "",
        labels: list[str] | None = None,
        priority: int = DEFAULT_PRIORITY,
        status: Status = Status.READY,
    ) -> Issue:
        draft = draft_issue(title, body, labels, priority, status)  # the same checks as every tracker
        self.labels.ready()
        names = labels_of_new(self.settings.labels, draft, self.status_label(status))
        payload = {"title": draft.title, "body": draft.body, "labels": names}
        path = f"{self._base}/issues"
        made = self._call(self.api.request, "POST", path, json=payload).data
        return self.reader.issue(wire.parse(wire.Issue, made, f"POST {path}"))

    def comment(self, key: str, text: str, author: str) -> Comment:
        draft_comment(text, author)
        number = self._raw_issue(key).number
        with self.claims.under_lease(str(number)):
            posted = self.comments.post(number, text)
        made = self.reader.comment(posted, posted.created_at)
        assert made is not None
        return made

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        status = Status(status)
        raw = self._raw_issue(key)
        number = raw.number
        current = self.labels.status_of(raw, raw.label_names)
        check_transition(str(number), current, status)
        with self.claims.under_lease(str(number)):  # a run's labels and comments, only while the issue is its own
            if current != status:
                self.labels.ready()
                self._move(raw, status)
            if note and note.strip():
                self.comments.note(str(number), current, status, note)
            elif status == Status.IN_PROGRESS and current != status:
                self.comments.start_progress(str(number), "beflow is working on this issue.")
        # As it is now, even if it stopped being beflow's meanwhile (a person took the label away).
        return self._with_comments(
            self.reader.one(self._call(self.api.get, f"{self._base}/issues/{number}"), str(number))
        )

    def _move(self, raw: wire.Issue, status: Status) -> None:
        number, names = raw.number, raw.label_names
        path = f"{self._base}/issues/{number}"
        target = self.status_label(status)
        if status in (Status.DONE, Status.CLOSED):
            reason = "completed" if status == Status.DONE else "not_planned"
            self._call(self.api.request, "PATCH", path, json={"state": "closed", "state_reason": reason})
        elif raw.state == "closed":
            self._call(self.api.request, "PATCH", path, json={"state": "open", "state_reason": "reopened"})
        if target and target not in names:
            self._call(self.api.request, "POST", f"{path}/labels", json={"labels": [target]}, retry=True)
        for name in self.labels.statuses():
            if name != target and name in names:
                self._call(self.api.request, "DELETE", f"{path}/labels/{quote(name, safe='')}", ok=(404,))

    def flag_label(self, flag: str) -> str:
        return f"{self.settings.status_prefix}{flag}"

    def flag(self, key: str, flag: str, note: str) -> Issue:
        """The label ``flag`` under the status prefix (GitHub makes it when the repository lacks it), and ``note``
        as one comment."""
        raw = self._raw_issue(key)
        number, label = raw.number, self.flag_label(flag)
        with self.claims.under_lease(str(number)):
            if label not in raw.label_names:
                path = f"{self._base}/issues/{number}/labels"
                self._call(self.api.request, "POST", path, json={"labels": [label]}, retry=True)
            self.comments.post(number, note)
        return self.get(str(number))

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress comment (at most every ``PROGRESS_EVERY`` seconds); whether it was edited."""
        return self.comments.progress(key, text, force=force)

    # -- claims: leases in git refs (beflow.trackers.github_leases) ----------------------------------------------

    def claim(self, key: str, owner: str) -> Claim:
        return self.claims.claim(str(self._raw_issue(key).number), owner)

    def holder(self, key: str) -> ClaimInfo | None:
        return self.claims.holder(normalize_key(key))

    def orphaned(self) -> list[Issue]:
        issues, _ = self._listed("open", [self.status_label(Status.IN_PROGRESS) or ""])
        return orphans_of(issues, self.claims)

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.claims.last_holder(key)

    # -- the repository --------------------------------------------------------------------------------------------

    def repository(self) -> wire.Repository:
        """The repository as GitHub describes it (checks the token and its access on the way)."""
        return wire.parse(wire.Repository, self._call(self.api.get, self._base), f"GET {self._base}")

    def inert(self, text: str) -> str:
        """Quoted so that GitHub acts on nothing in it: no mention pings, no reference closes or links an issue."""
        return quoting.inert(text)

    def held_secrets(self) -> list[str]:
        """Values that must never reach the agent, a log or a record: the token this tracker calls GitHub with
        (from its variable, or found through ``gh auth token``)."""
        return [self.api.token] if self.api.token else []


class _RepoCalls:
    """The API called for one repository: "the repository is not there for this token" becomes an error naming the
    setting, and a refusal names the token's variable."""

    def __init__(self, api: Api, repo: str, token_env: str) -> None:
        self.api = api
        self.repo = repo
        self.token_env = token_env
        self._base = f"/repos/{repo}"

    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the API, turning "the repository is not there for this token" into an error naming the setting."""
        try:
            return fn(*args, **kwargs)
        except GitHubAuthError:
            raise
        except GitHubError as error:
            if error.status in (403, 404) and not self._repo_visible():
                raise GitHubAccessError(
                    f"tracker.repo: {self.repo} is not a repository this token can see"
                    + (" (403)" if error.status == 403 else " (404)"),
                    fix=f'Check "repo" in the tracker settings, and that the token in ${self.token_env} '
                    "has access to it (issues, contents and pull requests: read and write).",
                ) from None
            if error.status == 403:
                raise GitHubAccessError(
                    f"{error.message} — the token in ${self.token_env} may not do this in {self.repo}",
                    fix="Give the token issues, contents and pull requests: read and write.",
                ) from None
            raise

    def _repo_visible(self) -> bool:
        try:
            self.api.get(self._base)
        except GitHubAuthError:
            raise
        except GitHubError as error:
            if error.status in (403, 404):
                return False
            raise
        return True
