"""GitLab as a code host: a run's branch pushed to the project's ``origin`` and proposed as a merge request.

- **The push** goes to ``origin``'s push URL as it was when the code host was opened (before any agent ran), and on
  this GitLab only to the code host's own project; it runs from an empty repository that borrows the objects
  (:func:`beflow.repository.remote.push`), so no configuration an agent wrote is read.
- **The token** reaches git through beflow's credential helper as the password of the user ``oauth2`` (GitLab takes
  any token so), for exactly this instance's scheme, host and port, over a socket only that git command inherits
  (:class:`beflow.repository.remote.PushAuth`): never in an environment, argv, the remote URL, git config or a file.
- **Merge requests** are opened from ``beflow/<key>`` to the project's default branch (a draft is a ``Draft:`` title),
  or the open one is updated in place; a request whose answer was lost is found rather than done twice. Titles and
  descriptions act on nothing (:mod:`beflow.trackers.gitlab_quoting`): no quick action, reference, mention or closing
  word of an agent's, only beflow's own ``Closes #<key>`` line.
- **Feedback** on them (discussions, mentions, failed pipelines) is read and answered for review rounds:
  :mod:`beflow.codehosts.gitlab_feedback`; the code host is a :class:`~beflow.feedback.FeedbackSource`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from beflow.codehosts.base import Landing, PullRequest
from beflow.codehosts.gitlab_feedback import GitLabFeedback
from beflow.codehosts.gitlab_landing import GitLabLanding
from beflow.config import CodeHostSettings, GitLabCodeHostSettings, Project
from beflow.config import Feedback as FeedbackSettings
from beflow.feedback import Feedback, Gathered
from beflow.repository import git, refs, remote
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.base import Finding, Tracker
from beflow.trackers.gitlab_access import access_checks
from beflow.trackers.gitlab_api import (
    Api,
    GitLabAccessError,
    GitLabAuthError,
    GitLabError,
    RateLimited,
    api_base,
    project_from_remote,
    project_id,
    resolve_token,
)
from beflow.trackers.gitlab_quoting import inert, inert_markdown

#: The user name GitLab takes with a token as its password (any token: personal, project, group, OAuth).
GIT_USER = "oauth2"
#: What GitLab makes a draft of: a title that starts so.
DRAFT = "Draft: "
#: beflow's own line about the issue, the last of a description: ``Closes #<key>`` (after_run.closes_issue), the one
#: line left to act, or the issue's link (which GitLab shows on the issue as a mention, as it should).
_ISSUE_LINE = re.compile(r"Closes #\d+(?: \(https?://\S+\))?|Issue: (?:https?://\S+|`[^`\n]+`)")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def open_for(project: Project, settings: CodeHostSettings, tracker: Tracker | None) -> GitLabCodeHost:
    """The GitLab code host of ``settings``, sharing the GitLab tracker's client when it speaks to the same
    instance with the same token (one client, one rate limit; left out, ``code_host`` is the tracker's project, as
    it resolved it)."""
    from beflow.trackers.gitlab import GitLabTracker

    assert isinstance(settings, GitLabCodeHostSettings)  # (its registry line says so)
    if not isinstance(tracker, GitLabTracker):
        return open_gitlab(project, settings)
    if project.config.code_host is None:
        settings = settings.model_copy(update={"project": tracker.project})
    return open_gitlab(project, settings, tracker.api)


def open_gitlab(project: Project, settings: GitLabCodeHostSettings, api: Api | None = None) -> GitLabCodeHost:
    """The code host of ``settings``; ``api``: the GitLab tracker's client, shared when it speaks to the same API
    with the same token (a claim's lease then bounds the code host's requests too)."""
    from beflow.agent.agent_env import held_secrets

    base = api_base(settings.url)
    path = settings.project or project_from_remote(project, settings.url, setting="code_host.project")
    if api is None or api.base_url != base or api.token_name != settings.token_env:
        api = Api(base, resolve_token(settings, what="code_host"), token_name=settings.token_env)
    # Read now, before any agent runs in a worktree of this repository (they share its config).
    return GitLabCodeHost(
        settings,
        path,
        api,
        remote.remote_url(project.directory, "origin", push=True),
        feedback=project.config.feedback,
        secrets=lambda: held_secrets(project.config),
    )


class GitLabCodeHost:
    """One GitLab project as the place runs' branches go (see the module's description)."""

    def __init__(
        self,
        settings: GitLabCodeHostSettings,
        project: str,
        api: Api,
        push_url: str | None,
        *,
        feedback: FeedbackSettings | None = None,
        secrets: Callable[[], Iterable[str]] = lambda: (),
    ) -> None:
        self.settings = settings
        #: The project's path (``acme/widgets``).
        self.project = project
        self.api = api
        #: Where :meth:`push` pushes: ``origin``'s push URL, read when the code host was opened (None: no origin).
        self.push_url = push_url
        self.description = f"GitLab project {project}"
        self._base = f"/projects/{project_id(project)}"
        self._feedback = GitLabFeedback(api, project, self._base, feedback or FeedbackSettings(), secrets=secrets)
        self._landing = GitLabLanding(api, self._base, self._feedback.members, self._open_mr)

    # -- the push --------------------------------------------------------------------------------------------------

    def push(self, directory: Path, branch: str) -> str:
        """Push ``branch`` to ``origin`` (see the module's description); the commit pushed."""
        url = self._push_url()
        with git.open_repo(directory) as repo:
            commit = refs.branch_tip(repo, branch)
        if commit is None:
            raise GitLabError(f"there is no branch {branch} to push")
        remote.push(directory, url, commit, branch, self.git_credentials(url))
        return commit

    def branch_url(self, branch: str) -> str:
        """``<instance>/<project>/-/tree/<branch>``."""
        return f"{self.settings.url.rstrip('/')}/{self.project}/-/tree/{quote(branch, safe='/')}"

    def commit_inert(self, text: str) -> str:
        return inert(text)

    def fetch(self, directory: Path, branch: str) -> str | None:
        """The commit of ``branch`` on ``origin`` (as the push's URL, with the same credential helper and from an
        empty repository of its own: :func:`beflow.repository.remote.fetch`), None when it has no such branch."""
        url = self._push_url()
        return remote.fetch(directory, url, branch, self.git_credentials(url))

    def git_credentials(self, remote_url: str | None) -> remote.PushAuth | None:
        """How git authenticates to ``remote_url``: for a URL on this GitLab (its scheme, host and port: where the
        API's requests carry the token already), the token as the password of ``oauth2``, which beflow's credential
        helper gives git for exactly that host and nothing else; for any other URL (ssh, a path, another host or
        port, http to an https instance) none: it never sees the token."""
        if not self.api.token or remote_url is None or not self._on_instance(remote_url):
            return None
        split = urlsplit(remote_url)
        return remote.PushAuth(self.api.token, split.netloc.rpartition("@")[2], split.scheme, GIT_USER)

    def _on_instance(self, url: str) -> bool:
        """Whether ``url`` is on this GitLab: its scheme, host and port (under its path, when it has one)."""
        mine, theirs = urlsplit(self.settings.url), urlsplit(url)
        if theirs.scheme not in _DEFAULT_PORTS or theirs.scheme != mine.scheme:
            return False
        try:
            ports = (theirs.port, mine.port)
        except ValueError:
            return False
        default = _DEFAULT_PORTS[mine.scheme]
        return (
            (theirs.hostname or "") == (mine.hostname or "").lower()
            and (ports[0] or default) == (ports[1] or default)
            and theirs.path.startswith(mine.path.rstrip("/") + "/")
        )

    def _push_url(self) -> str:
        """Where the branch is pushed: ``origin`` as it was when the code host was opened (before any agent ran),
        and on this GitLab only the code host's own project."""
        url = self.push_url
        web = self.settings.url.rstrip("/")
        if url is None:
            raise GitLabError(
                "the checkout has no origin remote to push the branch to",
                fix=f"Add it: git remote add origin {web}/{self.project}.git",
            )
        split = urlsplit(url)
        if split.scheme in ("http", "https") and (split.hostname or "") == (urlsplit(web).hostname or "").lower():
            prefix = urlsplit(web).path.rstrip("/")
            path = split.path.removeprefix(prefix).strip("/").removesuffix(".git")
            if not self._on_instance(url) or path.lower() != self.project.lower():
                raise GitLabError(
                    f"origin is {remote.without_credentials(url)}, not {web}/{self.project}.git; "
                    "beflow pushes only to the code host's project",
                    fix='Point origin at the project of "project" in the code_host (or tracker) settings.',
                )
        return url

    # -- merge requests --------------------------------------------------------------------------------------------

    def find(self, branch: str) -> PullRequest | None:
        found = self._call(self._open_mr, branch)
        return PullRequest(found.web_url or "") if found is not None else None

    def propose(self, branch: str, title: str, body: str, *, draft: bool) -> PullRequest:
        """Open a merge request from ``branch`` to the default branch, or update the one open for it (its title
        and description: whether it is a draft stays as people left it)."""
        description = _description(body)
        existing = self._call(self._open_mr, branch)
        if existing is not None:
            shown = f"{DRAFT}{inert(title)}" if existing.draft else inert(title)
            path = f"{self._base}/merge_requests/{existing.iid}"
            answer = self._call(self.api.request, "PUT", path, json={"title": shown, "description": description})
            return PullRequest(wire.parse(wire.MergeRequest, answer.data, f"PUT {path}").web_url or "", opened=False)
        project = wire.parse(wire.Project, self._call(self.api.get, self._base), f"GET {self._base}")
        if not project.default_branch:
            raise GitLabError(f"the GitLab project {self.project} has no default branch to propose {branch} to")
        opening: dict[str, Any] = {
            "source_branch": branch,
            "target_branch": project.default_branch,
            "title": f"{DRAFT if draft else ''}{inert(title)}",
            "description": description,
        }
        path = f"{self._base}/merge_requests"
        # A POST whose answer was lost may have opened it, and one that failed (a 5xx, a rate limit) did not: look
        # for the branch's merge request first, then try again, as the client retries everything else.
        for attempt in range(3):
            try:
                answer = self._call(self.api.request, "POST", path, json=opening)
                return PullRequest(wire.parse(wire.MergeRequest, answer.data, f"POST {path}").web_url or "", True)
            except GitLabError as error:
                # 409 "another open merge request already exists": opened meanwhile (a retry elsewhere): updated.
                if error.status == 409 and self._open_mr(branch) is not None:
                    return self.propose(branch, title, body, draft=draft)
                if error.status is not None and error.status < 500 and error.status != 429:
                    raise
                try:
                    found = self._open_mr(branch)
                except GitLabError:
                    found = None
                if found is not None:
                    return PullRequest(found.web_url or "", opened=True)
                wait = max(0.0, error.until - time.time()) if isinstance(error, RateLimited) else 0.5 * (attempt + 1)
                if attempt == 2 or wait > 60 or not self.api._can_wait(wait):
                    raise
                time.sleep(wait)
        raise AssertionError("unreachable")

    def _open_mr(self, branch: str) -> wire.MergeRequest | None:
        path = f"{self._base}/merge_requests"
        found = self.api.paginate(path, {"source_branch": branch, "state": "opened"}, max_pages=1)
        mrs = [mr for mr in wire.parse_list(wire.MergeRequest, found, f"GET {path}") if wire.own_branch(mr, branch)]
        return max(mrs, key=lambda mr: mr.iid) if mrs else None

    # -- feedback (review rounds) ----------------------------------------------------------------------------------

    def gather(self, key: str, branch: str) -> Gathered:
        """The feedback on the merge request of ``branch`` (a ``FeedbackSource``)."""
        return self._call(self._feedback.gather, key, branch)  # type: ignore[no-any-return]

    def mirror(self, branch: str, piece: Feedback, body: str) -> None:
        """Say beflow's answer to a page review's ``piece`` in ``branch``'s open merge request (a
        ``MirrorsAnswers``); nothing when there is none."""
        found = self._call(self._open_mr, branch)
        if found is not None:
            self._call(self._feedback.replies.mirror, found.iid, piece, body)

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` in its own thread of the merge request (a ``FeedbackSource``)."""
        self._call(self._feedback.reply, piece, body)

    def look_again(self) -> None:
        """The next :meth:`gather` reads the project's changes afresh (a refresh asked for by a person)."""
        self._feedback.look_again()

    # -- landing (after_review.merge) -------------------------------------------------------------------------------

    def landing(self, branch: str) -> Landing | None:
        """The open merge request of ``branch``, its approvals and its head's latest pipeline (a ``Lands``)."""
        return self._call(self._landing.landing, branch)  # type: ignore[no-any-return]

    def land(self, landing: Landing, method: str) -> bool:
        """Merge it at ``landing.head``, removing its branch (a ``Lands``)."""
        return self._call(self._landing.land, landing, method)  # type: ignore[no-any-return]

    def access_checks(self) -> list[Finding]:
        """What GitLab says this code host's token may do in its project (``beflow doctor``: ``ChecksAccess``)."""
        return access_checks(self.api, self.project, self.settings, what="code_host")

    def held_secrets(self) -> list[str]:
        """The token this code host calls GitLab and pushes with (from its variable, or glab's)."""
        return [self.api.token] if self.api.token else []

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the API, turning "the project is not there for this token" into an error naming the setting."""
        try:
            return fn(*args, **kwargs)
        except GitLabAuthError:
            raise
        except GitLabError as error:
            if error.status in (403, 404) and not isinstance(error, RateLimited):
                raise GitLabAccessError(
                    f"{error.message} — the token in ${self.settings.token_env} may not do this in {self.project}",
                    fix="Give the token the api scope, as a member of the project with the Developer role or above.",
                ) from None
            raise


def _description(body: str) -> str:
    """A merge request's description of ``body`` (a run's summary, the agent's words fenced in it) that acts on
    nothing but beflow's own line about the issue, its last (the run writes it after everything else)."""
    lines = body.rstrip().split("\n")
    keep = [lines[-1]] if lines and _ISSUE_LINE.fullmatch(lines[-1]) else []
    return inert_markdown(body, keep=keep)
