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

import datetime as dt
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import pydantic

from beflow.config import GitHubCodeHostSettings, GitHubTrackerSettings, Project
from beflow.errors import BeflowError, ConfigError, NotFoundError, UsageError, excerpt
from beflow.system import proc
from beflow.trackers.base import (
    DEFAULT_PRIORITY,
    Claim,
    ClaimInfo,
    Comment,
    FileProblem,
    Issue,
    Listing,
    RateBudget,
    Status,
    as_utc,
    check_transition,
    draft_issue,
    normalize_key,
    utc_now,
)
from beflow.trackers.claims import LeaseStore, orphans_of, ready_of
from beflow.trackers.github_api import (
    PUBLIC_API,
    Api,
    GitHubAccessError,
    GitHubAuthError,
    GitHubError,
)
from beflow.trackers.github_comments import Authors, IssueComments
from beflow.trackers.github_leases import GitHubLeases

#: Before the marker, a comment beflow posted holds a token of its own: a post whose answer was lost is found by it.
_MARKERS = re.compile(r"\s*(<!-- beflow:post [0-9a-f]+ -->\s*)?<!-- beflow(:progress)? -->\s*$")
#: The label suffix of each status an open issue can have (``open`` is "no status label").
STATUS_LABELS: dict[Status, str] = {
    Status.READY: "ready",
    Status.IN_PROGRESS: "in-progress",
    Status.REVIEW: "review",
    Status.FAILED: "failed",
}
#: When an issue carries several status labels (two people edited it), the furthest along wins.
_PRECEDENCE = [Status.IN_PROGRESS, Status.REVIEW, Status.FAILED, Status.READY]
LABEL_COLORS = {"ready": "0e8a16", "in-progress": "fbca04", "review": "1d76db", "failed": "b60205"}
_PRIORITY = re.compile(r"^priority:\s*(\d+)$")


def resolve_token(settings: GitHubTrackerSettings | GitHubCodeHostSettings, what: str = "tracker") -> str:
    """The token: ``$token_env``, else ``gh auth token``; a clear error naming both when neither gives one
    (``what``: the setting it is for, ``tracker`` or ``code_host``)."""
    token = os.environ.get(settings.token_env, "").strip()
    if token:
        return token
    if shutil.which("gh"):
        try:
            result = proc.run_sync(["gh", "auth", "token"], timeout=15)
        except BeflowError:
            result = None
        if result is not None and result.ok and result.stdout.strip():
            return result.stdout.decode("utf-8", "replace").strip()
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


def open_github(project: Project, settings: GitHubTrackerSettings) -> GitHubTracker:
    api = api_url(settings)
    repo = settings.repo or repo_from_remote(project, api)
    return GitHubTracker(settings, repo, Api(api, resolve_token(settings), token_name=settings.token_env), project)


class GitHubTracker:
    """Issues of one GitHub repository (see the module's description)."""

    def __init__(self, settings: GitHubTrackerSettings, repo: str, api: Api, project: Project | None = None) -> None:
        self.settings = settings
        self.repo = repo
        self.api = api
        self.project = project
        self.prefix = settings.status_prefix
        self.description = f"GitHub issues of {repo} labelled {', '.join(settings.labels) or '(any)'}"
        self._base = f"/repos/{repo}"
        self._call = _RepoCalls(api, repo, settings.token_env)
        self._labels_checked = False
        #: Who runs which issue: leases in git refs of the repository (beflow.trackers.github_leases); on a fleet,
        #: its running workflows over them (beflow.fleet.claims).
        self.leases: LeaseStore = GitHubLeases(settings, api, self._base, self._call)
        #: The comments beflow writes: each posted once, and a run's one progress comment (github_comments.py).
        self.comments = IssueComments(api, self._base, self._call, self.leases)
        self._login: str | None = None
        self.authors = Authors(api, repo, project.config.feedback.allow if project else [])  # (whose words count)
        #: The issues the last listing could not read (a hostile label) and why: they are skipped until fixed.
        self.unreadable: dict[str, str] = {}

    # -- reading ---------------------------------------------------------------------------------------------------

    def status_label(self, status: Status) -> str | None:
        suffix = STATUS_LABELS.get(status)
        return f"{self.prefix}{suffix}" if suffix else None

    def _status_of(self, raw: dict[str, Any], names: list[str]) -> Status:
        if raw.get("state") == "closed":
            return Status.DONE if raw.get("state_reason") == "completed" else Status.CLOSED
        present = {s for s in _PRECEDENCE if self.status_label(s) in names}
        return next((s for s in _PRECEDENCE if s in present), Status.OPEN)

    def _mine(self, raw: dict[str, Any]) -> bool:
        names = _label_names(raw)
        return "pull_request" not in raw and all(label in names for label in self.settings.labels)

    def _issue(self, raw: dict[str, Any], comments: list[Comment] | None = None) -> Issue:
        names = _label_names(raw)
        priorities = []
        shown = []
        for name in names:
            match = _PRIORITY.match(name)
            if match:
                priorities.append(int(match.group(1)))
            elif not name.startswith(self.prefix) or name.removeprefix(self.prefix) not in STATUS_LABELS.values():
                shown.append(name)
        try:
            return self._model(raw, names, shown, priorities, comments)
        except pydantic.ValidationError as exc:  # a label a person (or an agent) made that no issue may carry
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            raise UnreadableIssue(
                f"issue {raw['number']} in {self.repo} cannot be read: {where}: {message}",
                fix="Rename or remove that label on GitHub; beflow skips the issue until then.",
            ) from None

    def _model(
        self,
        raw: dict[str, Any],
        names: list[str],
        shown: list[str],
        priorities: list[int],
        comments: list[Comment] | None,
    ) -> Issue:
        return Issue(
            key=str(raw["number"]),
            title=(raw.get("title") or "").strip().splitlines()[0]
            if (raw.get("title") or "").strip()
            else "(untitled)",
            status=self._status_of(raw, names),
            labels=shown,
            priority=min(priorities) if priorities else DEFAULT_PRIORITY,
            created=_time(raw["created_at"]),
            updated=_time(raw["updated_at"]),
            body=raw.get("body") or "",
            comments=comments or [],
            url=raw.get("html_url"),
        )

    def _raw_issues(self, state: str, extra: list[str] = ()) -> list[dict[str, Any]]:  # type: ignore[assignment]
        labels = [*self.settings.labels, *extra]
        params: dict[str, Any] = {"state": state, "sort": "created", "direction": "asc"}
        if labels:
            params["labels"] = ",".join(labels)
        return [raw for raw in self._call(self.api.paginate, f"{self._base}/issues", params) if self._mine(raw)]

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
        issues, problems = self._readable(self._raw_issues(state, extra))
        chosen = [i for i in issues if (status is None or i.status == status) and (label is None or label in i.labels)]
        return Listing(issues=sorted(chosen, key=lambda i: int(i.key)), problems=problems)

    def _readable(self, raws: Iterable[dict[str, Any]]) -> tuple[list[Issue], list[FileProblem]]:
        """The issues beflow can read, and a problem naming each one it cannot: one hostile issue is that issue's
        problem (skipped, named), never a stall of every listing, pick and watch tick."""
        issues, problems, unreadable = [], [], {}
        for raw in raws:
            try:
                issues.append(self._issue(raw))
            except UnreadableIssue as error:
                unreadable[str(raw["number"])] = error.message
                problems.append(FileProblem(path=Path(f"{self.repo}#{raw['number']}"), message=error.message))
        self.unreadable = unreadable
        return issues, problems

    def ready(self) -> list[Issue]:
        candidates, _ = self._readable(self._raw_issues("open", [self.status_label(Status.READY) or ""]))
        return ready_of(candidates, self.leases)

    def _raw_issue(self, key: str) -> dict[str, Any]:
        wanted = normalize_key(key)
        if not wanted.isdigit():
            shown = excerpt(key, quote=False)
            raise NotFoundError(f"no issue {shown} in {self.repo}: GitHub issues are numbers", fix="beflow issues list")
        try:
            raw: dict[str, Any] = self._call(self.api.get, f"{self._base}/issues/{wanted}")
        except GitHubError as error:
            if error.status in (404, 410):
                raise NotFoundError(
                    f"no issue {wanted} in {self.repo}", fix="`beflow issues list` shows every issue."
                ) from None
            raise
        if "pull_request" in raw:
            raise NotFoundError(f"#{wanted} in {self.repo} is a pull request, not an issue")
        if not self._mine(raw):
            labels = ", ".join(self.settings.labels)
            raise NotFoundError(
                f"issue {wanted} in {self.repo} is not beflow's: it does not carry the label(s) {labels}",
                fix=f"Add the label(s) {labels} on GitHub to hand it to beflow.",
            )
        return raw

    def get(self, key: str) -> Issue:
        raw = self._raw_issue(key)
        comments = [
            self._comment(c) for c in self._call(self.api.paginate, f"{self._base}/issues/{raw['number']}/comments")
        ]
        return self._issue(raw, [c for c in comments if c is not None])

    def _comment(self, raw: dict[str, Any]) -> Comment | None:
        text = _MARKERS.sub("", raw.get("body") or "")
        if not text.strip():
            return None
        author = (raw.get("user") or {}).get("login") or "ghost"
        # The text of one who may not give feedback stays out of prompts, as in review rounds.
        return Comment(author=author, created=_time(raw["created_at"]), text=text).withholding(
            self.authors.why_unread(raw)
        )

    # -- writing ---------------------------------------------------------------------------------------------------

    def ensure_labels(self) -> list[str]:
        """Create the labels beflow needs that the repository lacks; returns the names created."""
        existing = {label["name"] for label in self._call(self.api.paginate, f"{self._base}/labels")}
        wanted = [*self.settings.labels, *(f"{self.prefix}{suffix}" for suffix in STATUS_LABELS.values())]
        created = []
        for name in wanted:
            if name in existing:
                continue
            color = LABEL_COLORS.get(name.removeprefix(self.prefix), "5319e7")
            response = self._call(
                self.api.request,
                "POST",
                f"{self._base}/labels",
                json={"name": name, "color": color, "description": "beflow: issues for coding agents"},
                ok=(422,),  # created meanwhile by another machine
                retry=True,
            )
            if response.status == 201:
                created.append(name)
        self._labels_checked = True
        return created

    def rate_budget(self) -> RateBudget:
        stats = self.api.stats
        return RateBudget(stats.remaining, stats.reset, stats.rate_limited)

    def missing_labels(self) -> list[str]:
        existing = {label["name"] for label in self._call(self.api.paginate, f"{self._base}/labels")}
        wanted = [*self.settings.labels, *(f"{self.prefix}{suffix}" for suffix in STATUS_LABELS.values())]
        return [name for name in wanted if name not in existing]

    def _labels_ready(self) -> None:
        if not self._labels_checked:
            self.ensure_labels()

    def create(
        self,
        title: str,
        body: str = "",
        labels: list[str] | None = None,
        priority: int = DEFAULT_PRIORITY,
        status: Status = Status.READY,
    ) -> Issue:
        draft = draft_issue(title, body, labels, priority, status)  # the same checks as every tracker
        self._labels_ready()
        names = [*self.settings.labels, *draft.labels]
        label = self.status_label(status)
        if label:
            names.append(label)
        if priority != DEFAULT_PRIORITY:
            names.append(f"priority:{priority}")
        payload = {"title": draft.title, "body": draft.body, "labels": list(dict.fromkeys(names))}
        raw = self._call(self.api.request, "POST", f"{self._base}/issues", json=payload).data
        return self._issue(raw)

    def comment(self, key: str, text: str, author: str) -> Comment:
        try:
            Comment(author=author, created=utc_now(), text=text)
        except pydantic.ValidationError as exc:
            raise UsageError(f"comment: {str(exc.errors()[0]['msg']).removeprefix('Value error, ')}") from None
        number = self._raw_issue(key)["number"]
        with self.leases.under_lease(str(number)):
            raw = self.comments.post(number, text)
        made = self._comment(raw)
        assert made is not None
        return made

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        status = Status(status)
        raw = self._raw_issue(key)
        number = raw["number"]
        current = self._status_of(raw, _label_names(raw))
        check_transition(str(number), current, status)
        with self.leases.under_lease(str(number)):  # a run's labels and comments, only while the issue is its own
            if current != status:
                self._labels_ready()
                self._move(raw, status)
            if note and note.strip():
                self.comments.note(str(number), current, status, note)
            elif status == Status.IN_PROGRESS and current != status:
                self.comments.start_progress(str(number), "beflow is working on this issue.")
        # As it is now, even if it stopped being beflow's meanwhile (a person took the label away).
        raw = self._call(self.api.get, f"{self._base}/issues/{number}")
        comments = self._call(self.api.paginate, f"{self._base}/issues/{number}/comments")
        return self._issue(raw, [c for c in map(self._comment, comments) if c is not None])

    def _move(self, raw: dict[str, Any], status: Status) -> None:
        number, names = raw["number"], _label_names(raw)
        path = f"{self._base}/issues/{number}"
        target = self.status_label(status)
        if status in (Status.DONE, Status.CLOSED):
            reason = "completed" if status == Status.DONE else "not_planned"
            self._call(self.api.request, "PATCH", path, json={"state": "closed", "state_reason": reason})
        elif raw.get("state") == "closed":
            self._call(self.api.request, "PATCH", path, json={"state": "open", "state_reason": "reopened"})
        if target and target not in names:
            self._call(self.api.request, "POST", f"{path}/labels", json={"labels": [target]}, retry=True)
        for other in STATUS_LABELS.values():
            name = f"{self.prefix}{other}"
            if name != target and name in names:
                self._call(self.api.request, "DELETE", f"{path}/labels/{quote(name, safe='')}", ok=(404,))

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress comment (at most every ``PROGRESS_EVERY`` seconds); whether it was edited."""
        return self.comments.progress(key, text, force=force)

    # -- claims: leases in git refs (beflow.trackers.github_leases) ----------------------------------------------

    def claim(self, key: str, owner: str) -> Claim:
        return self.leases.claim(str(self._raw_issue(key)["number"]), owner)

    def holder(self, key: str) -> ClaimInfo | None:
        return self.leases.holder(normalize_key(key))

    def orphaned(self) -> list[Issue]:
        issues, _ = self._readable(self._raw_issues("open", [self.status_label(Status.IN_PROGRESS) or ""]))
        return orphans_of(issues, self.leases)

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.leases.last_holder(key)

    # -- the repository --------------------------------------------------------------------------------------------

    def repository(self) -> dict[str, Any]:
        """The repository as GitHub describes it (checks the token and its access on the way)."""
        data: dict[str, Any] = self._call(self.api.get, self._base)
        return data

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


class UnreadableIssue(BeflowError):
    """An issue beflow cannot take as it is on GitHub (a label holding a line break or control characters, or
    longer than labels may be): named and skipped, never a crash of the listing it is in."""

    code = "unreadable_issue"


def _label_names(raw: dict[str, Any]) -> list[str]:
    return [label if isinstance(label, str) else label.get("name", "") for label in raw.get("labels") or []]


def _time(value: str) -> dt.datetime:
    return as_utc(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
