"""GitHub as a code host: a run's branch pushed to the repository's ``origin`` and proposed as a pull request.

- **The push** goes to ``origin``'s push URL as it was when the code host was opened (before any agent ran), and on
  this GitHub only to the code host's own repository; it runs from an empty repository that borrows the objects
  (:func:`beflow.repository.remote.push`), so no configuration an agent wrote is read.
- **The token** reaches git through beflow's credential helper, for exactly this GitHub's host, over a socket only
  that git command inherits (:class:`beflow.repository.remote.PushAuth`): never in an environment, argv, the remote URL,
  git
  config or a file; every other git child of beflow has it withheld.
- **Pull requests** are opened from ``beflow/<key>`` to the default branch, or the open one is updated; a request
  whose answer was lost is found rather than done twice.
- **Feedback** on them (reviews, threads, mentions, failed checks) is read and answered for review rounds:
  :mod:`beflow.codehosts.github_feedback`; the code host is a :class:`~beflow.feedback.FeedbackSource`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from beflow.codehosts.base import Landing, PullRequest
from beflow.codehosts.github_feedback import GitHubFeedback
from beflow.codehosts.github_landing import GitHubLanding
from beflow.config import CodeHostSettings, GitHubCodeHostSettings, Project
from beflow.config import Feedback as FeedbackSettings
from beflow.feedback import Feedback, Gathered
from beflow.repository import git, refs, remote
from beflow.trackers import github_wire as wire
from beflow.trackers import quoting
from beflow.trackers.base import Tracker
from beflow.trackers.github import api_url, repo_from_remote, resolve_token, web_host
from beflow.trackers.github_api import Api, GitHubAccessError, GitHubAuthError, GitHubError, RateLimited


def open_for(project: Project, settings: CodeHostSettings, tracker: Tracker | None) -> GitHubCodeHost:
    """The GitHub code host of ``settings``, sharing the GitHub tracker's client when the project's tracker is
    GitHub's (one client, one rate limit; left out, ``code_host`` is the tracker's repository, as it resolved it)."""
    from beflow.trackers.github import GitHubTracker

    assert isinstance(settings, GitHubCodeHostSettings)  # (its registry line says so)
    if not isinstance(tracker, GitHubTracker):
        return open_github(project, settings)
    if project.config.code_host is None:
        settings = settings.model_copy(update={"repo": tracker.repo})
    return open_github(project, settings, tracker.api, tracker_repo=tracker.repo)


def open_github(
    project: Project, settings: GitHubCodeHostSettings, api: Api | None = None, *, tracker_repo: str | None = None
) -> GitHubCodeHost:
    """The code host of ``settings``; ``api``: the GitHub tracker's client, shared when it speaks to the same API
    with the same token (one client, one rate limit, and a claim's lease bounds the code host's requests too);
    ``tracker_repo``: the GitHub tracker's repository (when it is this one, issues' feedback is read here too)."""
    from beflow.agent.agent_env import held_secrets

    base = api_url(settings)
    repo = settings.repo or repo_from_remote(project, base, setting="code_host.repo")
    if api is None or api.base_url != base or api.token_name != settings.token_env:
        api = Api(base, resolve_token(settings, what="code_host"), token_name=settings.token_env)
    # Read now, before any agent runs in a worktree of this repository (they share its config).
    return GitHubCodeHost(
        settings,
        repo,
        api,
        remote.remote_url(project.directory, "origin", push=True),
        feedback=project.config.feedback,
        issues=tracker_repo is not None and tracker_repo.lower() == repo.lower(),
        secrets=lambda: held_secrets(project.config),
    )


class GitHubCodeHost:
    """One GitHub repository as the place runs' branches go (see the module's description)."""

    def __init__(
        self,
        settings: GitHubCodeHostSettings,
        repo: str,
        api: Api,
        push_url: str | None,
        *,
        feedback: FeedbackSettings | None = None,
        issues: bool = False,
        secrets: Callable[[], Iterable[str]] = lambda: (),
    ) -> None:
        self.settings = settings
        self.repo = repo
        self.api = api
        #: Where :meth:`push` pushes: ``origin``'s push URL, read when the code host was opened (None: no origin).
        self.push_url = push_url
        self.description = f"GitHub repository {repo}"
        self._base = f"/repos/{repo}"
        self._feedback = GitHubFeedback(api, repo, feedback or FeedbackSettings(), issues=issues, secrets=secrets)
        self._landing = GitHubLanding(api, repo, self._feedback.authors)

    # -- the push --------------------------------------------------------------------------------------------------

    def push(self, directory: Path, branch: str) -> str:
        """Push ``branch`` to ``origin`` (see the module's description); the commit pushed."""
        url = self._push_url()
        with git.open_repo(directory) as repo:
            commit = refs.branch_tip(repo, branch)
        if commit is None:
            raise GitHubError(f"there is no branch {branch} to push")
        remote.push(directory, url, commit, branch, self.git_credentials(url))
        return commit

    def branch_url(self, branch: str) -> str:
        """``https://github.com/<repo>/tree/<branch>`` (the host of a GitHub Enterprise API's own)."""
        return f"https://{web_host(self.api.base_url)}/{self.repo}/tree/{quote(branch, safe='/')}"

    def commit_inert(self, text: str) -> str:
        return quoting.inert(text)

    def fetch(self, directory: Path, branch: str) -> str | None:
        """The commit of ``branch`` on ``origin`` (as the push's URL, with the same credential helper and from an
        empty repository of its own: :func:`beflow.repository.remote.fetch`), None when it has no such branch."""
        url = self._push_url()
        return remote.fetch(directory, url, branch, self.git_credentials(url))

    def git_credentials(self, remote_url: str | None) -> remote.PushAuth | None:
        """How git authenticates to ``remote_url``: for an https URL on this GitHub, the token, which beflow's
        credential helper gives git for exactly that host (port included) and nothing else
        (:class:`beflow.repository.remote.PushAuth`); for any other URL (ssh, a path, another host) none: it never sees
        the token."""
        host = self._token_host(remote_url)
        if host is None or not self.api.token:
            return None
        return remote.PushAuth(self.api.token, host, "https")

    def _token_host(self, remote_url: str | None) -> str | None:
        """``host[:port]`` of an https URL on this GitHub (the one the token is for), else None."""
        parsed = urlparse(remote_url or "")
        if parsed.scheme != "https" or parsed.hostname != web_host(self.api.base_url):
            return None
        return parsed.netloc.rpartition("@")[2]

    def _push_url(self) -> str:
        """Where the branch is pushed: ``origin`` as it was when the code host was opened (before any agent ran),
        and on this GitHub only the code host's own repository."""
        url = self.push_url
        if url is None:
            raise GitHubError(
                "the checkout has no origin remote to push the branch to",
                fix=f"Add it: git remote add origin https://{web_host(self.api.base_url)}/{self.repo}.git",
            )
        parsed = urlparse(url)
        if parsed.scheme in ("http", "https") and parsed.hostname == web_host(self.api.base_url):
            path = parsed.path.strip("/").removesuffix(".git")
            if parsed.scheme != "https" or path.lower() != self.repo.lower():
                raise GitHubError(
                    f"origin is {remote.without_credentials(url)}, "
                    f"not https://{web_host(self.api.base_url)}/{self.repo}; "
                    "beflow pushes only to the code host's repository",
                    fix='Point origin at the repository of "repo" in the code_host (or tracker) settings.',
                )
        return url

    # -- pull requests ---------------------------------------------------------------------------------------------

    def find(self, branch: str) -> PullRequest | None:
        found = self._open_pull(branch)
        return PullRequest(found.html_url) if found is not None else None

    def propose(self, branch: str, title: str, body: str, *, draft: bool) -> PullRequest:
        existing = self._open_pull(branch)
        if existing:
            payload = {"title": title, "body": body}
            path = f"{self._base}/pulls/{existing.number}"
            data = self._call(self.api.request, "PATCH", path, json=payload)
            return PullRequest(wire.parse(wire.Pull, data.data, f"PATCH {path}").html_url, opened=False)
        repository = wire.parse(wire.Repository, self._call(self.api.get, self._base), f"GET {self._base}")
        opening: dict[str, Any] = {
            "title": title,
            "body": body,
            "head": branch,
            "base": repository.default_branch,
            "draft": draft,
        }
        # A POST whose answer was lost may have opened it, and one that failed (a 5xx, a rate limit) did not:
        # look for the branch's pull request first, then try again, as the client retries everything else.
        for attempt in range(3):
            try:
                data = self._call(self.api.request, "POST", f"{self._base}/pulls", json=opening)
                return PullRequest(wire.parse(wire.Pull, data.data, f"POST {self._base}/pulls").html_url, opened=True)
            except GitHubError as error:
                # 422 "a pull request already exists": opened meanwhile (a retry elsewhere): updated.
                if error.status == 422 and self._open_pull(branch) is not None:
                    return self.propose(branch, title, body, draft=draft)
                if error.status is not None and error.status < 500 and error.status != 429:
                    raise
                try:
                    found = self._open_pull(branch)
                except GitHubError:
                    found = None
                if found is not None:
                    return PullRequest(found.html_url, opened=True)
                wait = max(0.0, error.until - time.time()) if isinstance(error, RateLimited) else 0.5 * (attempt + 1)
                if attempt == 2 or wait > 60 or not self.api._can_wait(wait):
                    raise
                time.sleep(wait)
        raise AssertionError("unreachable")

    def _open_pull(self, branch: str) -> wire.Pull | None:
        owner = self.repo.split("/")[0]
        path = f"{self._base}/pulls"
        found = self._call(self.api.get, path, {"head": f"{owner}:{branch}", "state": "open"})
        pulls = wire.parse_list(wire.Pull, found, f"GET {path}")
        return pulls[0] if pulls else None

    # -- feedback (review rounds) ----------------------------------------------------------------------------------

    def gather(self, key: str, branch: str) -> Gathered:
        """The feedback on issue ``key`` and the pull request of ``branch`` (a ``FeedbackSource``)."""
        return self._call(self._feedback.gather, key, branch)  # type: ignore[no-any-return]

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` in its review thread, else in its conversation (a ``FeedbackSource``)."""
        self._call(self._feedback.reply, piece, body)

    def mirror(self, branch: str, piece: Feedback, body: str) -> None:
        """Say beflow's answer to a page review's ``piece`` in ``branch``'s open pull request (a ``MirrorsAnswers``);
        nothing when there is none."""
        pull = self._call(self._open_pull, branch)
        if pull is not None:
            self._call(self._feedback.replies.mirror, pull.number, piece, body)

    def look_again(self) -> None:
        """The next :meth:`gather` reads the repository's changes afresh (a refresh asked for by a person)."""
        self._feedback.look_again()

    # -- landing (after_review.merge) -------------------------------------------------------------------------------

    def landing(self, branch: str) -> Landing | None:
        """The open pull request of ``branch``, its approvals and its head's checks (a ``Lands``)."""
        return self._call(self._landing.landing, branch)  # type: ignore[no-any-return]

    def land(self, landing: Landing, method: str) -> bool:
        """Merge it at ``landing.head`` by ``method``, then delete its branch (a ``Lands``)."""
        return self._call(self._landing.land, landing, method)  # type: ignore[no-any-return]

    def held_secrets(self) -> list[str]:
        """The token this code host calls GitHub and pushes with (from its variable, or ``gh auth token``)."""
        return [self.api.token] if self.api.token else []

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the API, turning "the repository is not there for this token" into an error naming the setting."""
        try:
            return fn(*args, **kwargs)
        except GitHubAuthError:
            raise
        except GitHubError as error:
            if error.status == 403:
                raise GitHubAccessError(
                    f"{error.message} — the token in ${self.settings.token_env} may not do this in {self.repo}",
                    fix="Give the token contents and pull requests: read and write.",
                ) from None
            raise
