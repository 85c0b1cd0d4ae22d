"""A small client for GitLab's REST API (v4): what the GitLab tracker and code host need and nothing more.

Plain httpx, as for GitHub (:mod:`beflow.trackers.github_api`): a generated SDK is slow to import and sends no
conditional requests, and the parts that matter here — ETags, pagination, rate-limit backoff, one write at a time,
errors that name the setting to change — are a few dozen lines we control and test against the description of
GitLab's API.

Polling is polite: a GET of a single resource carries the ETag of its last answer (a 304 is served from the cache;
GitLab's listings answer no 304, so they are not kept); a rate limit (a 429 with ``Retry-After``, or
``RateLimit-Remaining: 0``) closes a gate until GitLab says to come back, and every request meanwhile fails at once
with :class:`RateLimited` instead of hammering; writes go one at a time. The token is sent in the ``Authorization``
header only (it works for personal, project, group and OAuth tokens) and never appears in an error message.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import re
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from beflow import __version__
from beflow.config import GitLabCodeHostSettings, GitLabTrackerSettings, Project
from beflow.errors import BeflowError, ConfigError
from beflow.system import proc
from beflow.trackers import gitlab_wire as wire

#: Waits up to this long are taken in line (a short ``Retry-After``); longer ones close the gate and fail fast.
INLINE_WAIT = 5.0
#: How many answers of single resources the ETag cache keeps.
CACHE_SIZE = 4096
#: Items a listing asks for per page (GitLab's most).
PER_PAGE = 100


class GitLabError(BeflowError):
    """GitLab answered with an error (or not at all)."""

    code = "gitlab"

    def __init__(self, message: str, *, status: int | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.status = status


class GitLabAuthError(ConfigError):
    """The token is missing or GitLab refuses it (401): a setting to change, exit 2."""

    code = "gitlab_auth"


class GitLabAccessError(ConfigError):
    """The project is not there for this token (404), or the token may not do this (403)."""

    code = "gitlab_access"


class RateLimited(GitLabError):
    """GitLab asked beflow to slow down; nothing is sent until ``until`` (epoch seconds)."""

    code = "rate_limited"

    def __init__(self, message: str, until: float) -> None:
        allowed = time.strftime("%H:%M:%S", time.localtime(until))
        fix = f"Run the command again after {allowed}, when GitLab allows it (`beflow watch` waits by itself)."
        super().__init__(message, status=429, fix=fix)
        self.until = until


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


@dataclass
class Response:
    status: int
    #: The answer's JSON; the text of an answer that is no JSON (a job's log); None when empty.
    data: Any
    headers: httpx.Headers
    #: Whether the answer came from the ETag cache (GitLab said 304).
    cached: bool = False


@dataclass
class Stats:
    """What the client sent, for ``--json`` views and the tests."""

    requests: int = 0
    not_modified: int = 0
    rate_limited: int = 0
    remaining: int | None = None
    reset: float | None = None
    by_method: dict[str, int] = field(default_factory=dict)


class Api:
    """One GitLab REST API (``https://host/api/v4``) with one token. Thread-safe: runs renew their claims from worker
    threads."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        token_name: str = "GITLAB_TOKEN",
        timeout: float = 30.0,
        inline_wait: float = INLINE_WAIT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token_name = token_name
        self.token = token  # for git's credential helper only (over a socket); never in argv, a file or a message
        self.inline_wait = inline_wait
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={
                "Accept": "application/json",
                "Authorization": f"Bearer {token}",
                "User-Agent": f"beflow/{__version__}",
            },
        )
        self._cache: OrderedDict[str, tuple[str, Any, httpx.Headers]] = OrderedDict()
        self._lock = threading.Lock()
        self._writes = threading.Lock()
        self._gate = 0.0  # nothing is sent before this time (epoch seconds)
        self._gate_reason = ""
        #: Server time minus local time, from the ``Date`` of the last answer: leases are timed on GitLab's clock.
        self.clock_offset = 0.0
        self.stats = Stats()
        self.timeout = timeout
        self._local = threading.local()  # this thread's deadline (monotonic), if a caller set one

    def close(self) -> None:
        self._client.close()

    def now(self) -> float:
        """GitLab's clock (epoch seconds), as its last answer's ``Date`` showed it."""
        return time.time() + self.clock_offset

    @contextlib.contextmanager
    def deadline(self, at: float) -> Iterator[None]:
        """Every request of this thread inside the block ends by ``at`` (``time.monotonic()``): its timeouts, its
        retries and its waits (the gate, the one-write-at-a-time lock) all fit in what is left, and a request that
        cannot is :class:`Unavailable` at once. A claim's lease bounds the requests made under it this way."""
        outer = getattr(self._local, "deadline", None)
        self._local.deadline = at if outer is None else min(outer, at)
        try:
            yield
        finally:
            self._local.deadline = outer

    def _left(self) -> float | None:
        """Seconds left before this thread's deadline (None: no deadline)."""
        at = getattr(self._local, "deadline", None)
        return None if at is None else at - time.monotonic()

    def _out_of_time(self, method: str, path: str) -> Unavailable:
        return Unavailable(f"GitLab: {method} {path}: no answer in the time the lease had left", fix=_TRY_AGAIN)

    # -- requests --------------------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        ok: tuple[int, ...] = (),
        retry: bool | None = None,
    ) -> Response:
        """Send one request; 2xx (and any status in ``ok``) is returned, anything else raised as a GitLabError.

        No answer or a 5xx is tried again (twice) for every method but POST: a POST whose answer was lost may have
        been done, and doing it again files a second note or merge request. Its caller looks first (a note by its
        marker, a merge request by its branch), or says ``retry=True`` for a POST that is harmless twice. A rate
        limit (a 429) is waited out for every method: GitLab did nothing."""
        again = method != "POST" if retry is None else retry
        if method == "GET":
            return self._send(method, path, params, json, ok, again)
        left = self._left()
        # No parallel bursts of writes (GitLab's limits on notes and issues punish them); a write with a deadline
        # waits for its turn no longer than it has.
        if not self._writes.acquire(timeout=-1 if left is None else max(left, 0.0)):
            raise self._out_of_time(method, path)
        try:
            return self._send(method, path, params, json, ok, again)
        finally:
            self._writes.release()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params).data

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
        while url is not None and (max_pages is None or pages < max_pages):
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
                f"GitLab: GET {path}: the next page is on {_origin(link)}, not on {_origin(self.base_url)}; "
                "beflow sends its token to tracker.url only",
                fix="Set tracker.url to the address GitLab calls itself (its external_url).",
            )
        return link, None

    def _same_origin(self, url: str) -> bool:
        mine, theirs = urlsplit(self.base_url), urlsplit(url)
        return (
            (theirs.scheme, theirs.hostname, theirs.port) == (mine.scheme, mine.hostname, mine.port)
            and theirs.path.startswith(mine.path + "/")
            and not theirs.username
        )

    def _send(
        self, method: str, path: str, params: dict[str, Any] | None, body: Any, ok: tuple[int, ...], again: bool
    ) -> Response:
        for attempt in range(4):
            self._wait_for_gate()
            left = self._left()
            if left is not None and left <= 0:
                raise self._out_of_time(method, path)
            timeout = self.timeout if left is None else min(self.timeout, left)
            request = self._client.build_request(method, path, params=params, json=body, timeout=timeout)
            key = str(request.url)
            with self._lock:
                cached = self._cache.get(key) if method == "GET" else None
            if cached is not None:
                request.headers["If-None-Match"] = cached[0]
            try:
                answer = self._client.send(request)
            except httpx.HTTPError as error:
                if again and attempt < 2 and self._can_wait(0.5 * (attempt + 1)):
                    time.sleep(0.5 * (attempt + 1))
                    continue
                left = self._left()
                if left is not None and left <= 0.5:  # the timeout was what the deadline left
                    raise self._out_of_time(method, path) from None
                raise Unavailable(
                    f"GitLab ({self.base_url}) does not answer: {type(error).__name__}", fix=_TRY_AGAIN
                ) from None
            self._note(method, answer)
            if answer.status_code == 304 and cached is not None:
                with self._lock:
                    self.stats.not_modified += 1
                    self._cache.move_to_end(key)
                return Response(200, cached[1], cached[2], cached=True)
            if self._rate_limited(answer):
                if self._gate - time.time() <= self.inline_wait and attempt < 3:
                    continue  # a short wait, taken in line by _wait_for_gate
                raise RateLimited(self._gate_reason, self._gate)
            if answer.status_code >= 500 and again and attempt < 2 and self._can_wait(0.5 * (attempt + 1)):
                time.sleep(0.5 * (attempt + 1))
                continue
            data = _body(answer)
            if answer.is_success or answer.status_code in ok:
                # Only single resources are kept: GitLab's listings answer no 304, keeping them would only cost memory.
                etag = answer.headers.get("etag")
                if method == "GET" and answer.status_code == 200 and etag and isinstance(data, dict):
                    with self._lock:
                        self._cache[key] = (etag, data, answer.headers)
                        while len(self._cache) > CACHE_SIZE:
                            self._cache.popitem(last=False)
                return Response(answer.status_code, data, answer.headers)
            raise self._error(method, path, answer, data)
        raise RateLimited(self._gate_reason or "GitLab keeps asking beflow to slow down", self._gate)

    def _can_wait(self, seconds: float) -> bool:
        """Whether a wait of ``seconds`` (and a try after it) fits before this thread's deadline."""
        left = self._left()
        return left is None or left > seconds + 0.5

    def _wait_for_gate(self) -> None:
        wait = self._gate - time.time()
        if wait <= 0:
            return
        if wait > self.inline_wait or not self._can_wait(wait):
            raise RateLimited(self._gate_reason, self._gate)
        time.sleep(wait)

    def _note(self, method: str, answer: httpx.Response) -> None:
        with self._lock:
            self.stats.requests += 1
            self.stats.by_method[method] = self.stats.by_method.get(method, 0) + 1
            rate = wire.RateHeaders.of(answer.headers)
            if rate.remaining is not None:
                self.stats.remaining = rate.remaining
            if rate.reset is not None:
                self.stats.reset = float(rate.reset)
            date = answer.headers.get("date")
            if date:
                try:
                    server = email.utils.parsedate_to_datetime(date).timestamp()
                except (TypeError, ValueError):
                    return
                self.clock_offset = server - time.time()

    def _rate_limited(self, answer: httpx.Response) -> bool:
        """Whether GitLab asked to slow down (a 429); if so, the gate is closed until it says to come back."""
        if answer.status_code != 429:
            return False
        rate = wire.RateHeaders.of(answer.headers)
        now = time.time()
        if rate.retry_after is not None:
            until = now + float(rate.retry_after)
        elif rate.remaining == 0 and rate.reset is not None:
            until = float(rate.reset) - self.clock_offset + 1
        else:
            until = now + 60.0
        with self._lock:
            self.stats.rate_limited += 1
            self._gate = max(self._gate, until)
            wait = self._gate - now
            self._gate_reason = f"GitLab asked beflow to slow down (its rate limit); waiting {wait:.0f} s"
        return True

    def _error(self, method: str, path: str, answer: httpx.Response, data: Any) -> BeflowError:
        said = wire.error_message(data)
        if said is not None:  # GitLab's messages repeat the status ("404 Project Not Found"): said once
            said = said.removeprefix(f"{answer.status_code} ")
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


def _body(answer: httpx.Response) -> Any:
    """An answer's JSON, or its text when it is no JSON (a job's log); None when it is empty."""
    if not answer.content:
        return None
    if "json" not in answer.headers.get("content-type", "application/json"):
        return answer.text
    try:
        return answer.json()
    except ValueError:
        return None


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
    token = os.environ.get(settings.token_env, "").strip()
    if token:
        return token
    host = urlsplit(settings.url).netloc.rpartition("@")[2] or web_host(settings.url)
    glab = shutil.which("glab")
    if glab:
        try:
            result = proc.run_sync(["glab", "config", "get", "token", "--host", host], timeout=15)
        except BeflowError:
            result = None
        if result is not None and result.ok and result.stdout.strip():
            return result.stdout.decode("utf-8", "replace").strip()
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
