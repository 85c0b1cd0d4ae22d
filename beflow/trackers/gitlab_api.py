"""A small client for GitLab's REST API (v4): what the GitLab tracker and code host need and nothing more.

Plain httpx, as for GitHub (:mod:`beflow.trackers.github_api`): a generated SDK is slow to import and sends no
conditional requests, and the parts that matter here — ETags, pagination, rate-limit backoff, one write at a time,
errors that name the setting to change — are a few dozen lines we control and test against the description of
GitLab's API.

Polling is polite: a GET of a single resource carries the ETag of its last answer (a 304 is served from the cache;
GitLab's listings answer no 304, so they are not kept); a rate limit (a 429 with ``Retry-After``, or
``RateLimit-Remaining: 0``) closes a gate until GitLab says to come back, and every request meanwhile fails at once
with :class:`RateLimited` instead of hammering; writes go one at a time. The token is sent in the ``Authorization``
header only (it works for personal, project, group and OAuth tokens) and never appears in an error message. What
GitHub's client does alike is :mod:`beflow.trackers.forge_api`; this module says what is GitLab's.
"""

from __future__ import annotations

import re
import shutil
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

from beflow.config import GitLabCodeHostSettings, GitLabTrackerSettings, Project
from beflow.errors import BeflowError, ConfigError
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.forge_api import ForgeApi, ForgeError, Limited, RateHeaders, find_token, quoted

#: Items a listing asks for per page (GitLab's most).
PER_PAGE = 100
#: The most pages any listing reads (100,000 items): one with more is taken for a listing that never ends.
MAX_PAGES = 1000


class GitLabError(ForgeError):
    """GitLab answered with an error (or not at all)."""

    code = "gitlab"
    forge = "GitLab"


class GitLabAuthError(ConfigError):
    """The token is missing or GitLab refuses it (401): a setting to change, exit 2."""

    code = "gitlab_auth"


class GitLabAccessError(ConfigError):
    """The project is not there for this token (404), or the token may not do this (403)."""

    code = "gitlab_access"


class RateLimited(Limited, GitLabError):
    """GitLab asked beflow to slow down; nothing is sent until ``until`` (epoch seconds)."""


class Unavailable(GitLabError):
    """No answer (network down, a timeout) or a server error (5xx)."""

    code = "gitlab_unavailable"


#: What the user does when GitLab does not answer: the fix is shown where a command ends on the error, never by
#: ``beflow watch``, which only says the error and looks again on its next tick.
_TRY_AGAIN = "Check the network (and tracker.url), then run the command again (`beflow watch` keeps looking by itself)."
_GITLAB_TROUBLE = (
    "GitLab is having trouble (for gitlab.com: https://status.gitlab.com): run the command again in a few minutes "
    "(`beflow watch` keeps looking by itself)."
)


class Api(ForgeApi):
    """One GitLab REST API (``https://host/api/v4``) with one token. Thread-safe: runs renew their claims from worker
    threads."""

    forge = "GitLab"
    try_again = _TRY_AGAIN
    unavailable = Unavailable
    rate_limited = RateLimited
    token_variable = "GITLAB_TOKEN"
    rate_headers = staticmethod(wire.RateHeaders.of)

    def _headers(self) -> dict[str, str]:
        return {"Accept": "application/json"}

    def paginate(self, path: str, params: dict[str, Any] | None = None, *, max_pages: int | None = None) -> list[Any]:
        """Every item of a list endpoint (of its first ``max_pages`` pages): offset pages by ``X-Next-Page``, keyset
        pages (``pagination=keyset``) by the ``Link: rel="next"`` URL as GitLab gives it — on this API's origin
        only, so the token goes nowhere else. A page that is no list is
        :class:`~beflow.trackers.gitlab_wire.MalformedAnswer`; the items are as GitLab gave them (their reader
        parses them, :mod:`beflow.trackers.gitlab_wire`)."""
        items: list[Any] = []
        url: str | None = path
        query: dict[str, Any] | None = {"per_page": PER_PAGE, **(params or {})}
        pages = 0
        asked: set[str] = set()
        while url is not None and (max_pages is None or pages < max_pages):
            # A listing that never ends (a next page it gave already, or pages without end) is an error, not a loop
            # that holds ever more in memory.
            page = f"{url}?{sorted((query or {}).items())}"
            if page in asked or pages >= MAX_PAGES:
                raise GitLabError(
                    f"GitLab: GET {path}: the listing does not end (its next page is one it gave already, or it has "
                    f"more than {MAX_PAGES} pages)",
                    fix=_GITLAB_TROUBLE,
                )
            asked.add(page)
            response = self.request("GET", url, params=query)
            pages += 1
            items.extend(wire.listed(response.data, f"GET {path}"))
            url, query = self._next(path, query, response.headers)
        return items

    def _next(
        self, path: str, query: dict[str, Any] | None, headers: httpx.Headers
    ) -> tuple[str | None, dict[str, Any] | None]:
        """Where a listing goes on after a page with these headers (None: it was the last page)."""
        following = (headers.get("x-next-page") or "").strip()
        if query is not None and "x-next-page" in headers:  # offset pages: the same request, the next page
            return (path, {**query, "page": following}) if following else (None, None)
        link = wire.next_page(headers)
        if link is None:
            return None, None
        if not self._same_origin(link):
            raise GitLabError(
                f"GitLab: GET {path}: the next page is outside {self.base_url} (on {_origin(link)}); "
                "beflow sends its token to tracker.url's API only",
                fix="Set tracker.url to the address GitLab calls itself (its external_url).",
            )
        return link, None

    def _same_origin(self, url: str) -> bool:
        mine, theirs = urlsplit(self.base_url), urlsplit(url)
        # (``/api/v4/../../x`` is outside the API however it starts, ``%2e%2e`` as much to a server that decodes it)
        steps = unquote(theirs.path).replace("\\", "/").split("/")
        return (
            (theirs.scheme, theirs.hostname, theirs.port) == (mine.scheme, mine.hostname, mine.port)
            and theirs.path.startswith(mine.path + "/")
            and "." not in steps
            and ".." not in steps
            and not theirs.username
            and theirs.password is None
        )

    # -- what GitLab says, as beflow's errors ------------------------------------------------------------------------

    def _asked_to_wait(self, answer: httpx.Response, rate: RateHeaders, now: float) -> tuple[float, str] | None:
        """A 429: for ``Retry-After`` seconds, else until ``RateLimit-Reset`` (on GitLab's clock), else a minute."""
        if answer.status_code != 429:
            return None
        if rate.retry_after is not None:
            return now + float(rate.retry_after), "its rate limit"
        if rate.remaining == 0 and rate.reset is not None:
            return float(rate.reset) - self.clock_offset + 1, "its rate limit"
        return now + 60.0, "its rate limit"

    def _keeps(self, data: Any) -> bool:
        # Single resources only: GitLab's listings answer no 304, keeping them would only cost memory.
        return isinstance(data, dict)

    def _decode(self, answer: httpx.Response) -> Any:
        """An answer's JSON, or its text when it is no JSON (a job's log); None when it is empty."""
        if answer.content and "json" not in answer.headers.get("content-type", "application/json"):
            return answer.text
        return super()._decode(answer)

    def _error(self, method: str, path: str, answer: httpx.Response, data: Any) -> BeflowError:
        said = wire.error_message(data)
        if said is not None:  # GitLab's messages repeat the status ("404 Project Not Found"): said once
            said = quoted(said.removeprefix(f"{answer.status_code} "))
        what = f"GitLab: {method} {path}: {answer.status_code}" + (f" {said}" if said else "")
        if answer.status_code == 401:
            return GitLabAuthError(
                f"GitLab refused the token in ${self.token_name} (401 {said or 'Unauthorized'})",
                fix=f"Set {self.token_name} to a valid token with the api scope (token_env names the variable), "
                "or log in with `glab auth login` and unset it.",
            )
        if answer.status_code >= 500:
            return Unavailable(what, status=answer.status_code, fix=_GITLAB_TROUBLE)
        return GitLabError(what, status=answer.status_code)


def _origin(url: str) -> str:
    split = urlsplit(url)
    return f"{split.scheme}://{split.hostname}" + (f":{split.port}" if split.port else "")


# -- where GitLab is, and who beflow is there ----------------------------------------------------------------------


def api_base(url: str) -> str:
    """The REST API of the instance at ``url`` (``https://gitlab.com`` -> ``https://gitlab.com/api/v4``)."""
    return url.rstrip("/").removesuffix("/api/v4") + "/api/v4"


def project_id(path: str) -> str:
    """A project's path as GitLab takes it in place of its id (``acme/widgets`` -> ``acme%2Fwidgets``)."""
    return quote(path, safe="")


def web_host(url: str) -> str:
    """The host people and git use for the instance at ``url`` (``https://gitlab.example.com`` ->
    ``gitlab.example.com``)."""
    return (urlsplit(url).hostname or "gitlab.com").lower()


def resolve_token(settings: GitLabTrackerSettings | GitLabCodeHostSettings, what: str = "tracker") -> str:
    """The token: ``$token_env``, else ``glab config get token --host <host>``; a clear error naming both when
    neither gives one (``what``: the setting it is for, ``tracker`` or ``code_host``)."""
    host = urlsplit(settings.url).netloc.rpartition("@")[2] or web_host(settings.url)
    token = find_token(settings.token_env, ["glab", "config", "get", "token", "--host", host])
    if token:
        return token
    glab = shutil.which("glab")
    raise GitLabAuthError(
        f"{what}: no GitLab token: ${settings.token_env} is not set"
        + (f", and glab has no token for {host}" if glab else ", and the GitLab CLI (glab) is not installed"),
        fix=f"export {settings.token_env}=<a token with the api scope>, or `glab auth login --hostname {host}`; "
        f"{what}.token_env names another variable.",
    )


_SCP = re.compile(r"^(?:[^@/:]+@)?(?P<host>[^@/:]+):(?!//)(?P<path>.+)$")
_PATH = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+")


def project_from_remote(project: Project, url: str, setting: str = "tracker.project") -> str:
    """The project path (``group/subgroup/name``) of the checkout's ``origin`` when it points at the GitLab
    instance at ``url`` (``setting`` left out): https, ssh and scp-like (``git@host:group/name.git``) forms."""
    from beflow.repository import remote

    origin = remote.remote_url(project.directory, "origin")
    host = web_host(url)
    found = _remote_path(origin or "", url)
    if found is not None:
        return found
    where = f"{project.config_path}: " if project.config_path else ""
    said = f"origin is {origin}" if origin else "the checkout has no origin remote"
    raise ConfigError(
        f"{where}{setting}: not set, and {said}, which is not a project on {host}",
        fix=f'Set "project": "group/name" in the {setting.partition(".")[0]} settings.',
    )


def _remote_path(origin: str, url: str) -> str | None:
    """The project path of remote URL ``origin`` on the instance at ``url``, if it is one of its projects."""
    instance = urlsplit(url)
    split = urlsplit(origin)
    if split.scheme in ("http", "https"):
        if (split.hostname or "").lower() != web_host(url):
            return None
        # An instance served under a path (https://host/gitlab) has its projects under that path.
        prefix = instance.path.rstrip("/")
        if prefix and not split.path.startswith(prefix + "/"):
            return None
        path = split.path[len(prefix) :]
    elif split.scheme in ("ssh", "git+ssh"):
        if (split.hostname or "").lower() != web_host(url):
            return None
        path = split.path
    elif "://" not in origin:
        scp = _SCP.match(origin)
        if scp is None or scp.group("host").lower() != web_host(url):
            return None
        path = scp.group("path")
    else:
        return None
    path = path.strip("/").removesuffix(".git")
    return path if _PATH.fullmatch(path) and ".." not in path.split("/") else None
