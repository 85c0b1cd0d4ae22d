"""A small client for GitHub's REST API: what the GitHub tracker needs and nothing more.

Plain httpx rather than a generated SDK: the tracker uses about fifteen endpoints, and the parts that matter here —
conditional requests with ETags, pagination, rate-limit backoff, one write at a time, errors that name the setting to
change — are a few dozen lines we control and test against GitHub's published OpenAPI description.

Polling is polite: every GET carries the ETag of its last answer (a 304 costs no rate limit); a primary rate limit
(``x-ratelimit-remaining: 0``) or a secondary one (``retry-after``) closes a gate until GitHub says to come back,
and every request meanwhile fails at once with :class:`RateLimited` instead of hammering; writes go one at a time.
The token is sent in the ``Authorization`` header only and never appears in an error message.
"""

from __future__ import annotations

import contextlib
import email.utils
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from beflow import __version__
from beflow.errors import BeflowError, ConfigError
from beflow.trackers import github_wire as wire

PUBLIC_API = "https://api.github.com"
API_VERSION = "2022-11-28"
#: Waits up to this long are taken in line (a short ``retry-after``); longer ones close the gate and fail fast.
INLINE_WAIT = 5.0
#: How many GET answers the ETag cache keeps.
CACHE_SIZE = 4096
_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


class GitHubError(BeflowError):
    """GitHub answered with an error (or not at all)."""

    code = "github"

    def __init__(self, message: str, *, status: int | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.status = status


class GitHubAuthError(ConfigError):
    """The token is missing or GitHub refuses it (401): a setting to change, exit 2."""

    code = "github_auth"


class GitHubAccessError(ConfigError):
    """The repository is not there for this token (404), or the token may not do this (403)."""

    code = "github_access"


class RateLimited(GitHubError):
    """GitHub asked beflow to slow down; nothing is sent until ``until`` (epoch seconds)."""

    code = "rate_limited"

    def __init__(self, message: str, until: float) -> None:
        allowed = time.strftime("%H:%M:%S", time.localtime(until))
        fix = f"Run the command again after {allowed}, when GitHub allows it (`beflow watch` waits by itself)."
        super().__init__(message, status=429, fix=fix)
        self.until = until


#: What the user does when GitHub does not answer: the fix is shown where a command ends on the error (a one-shot
#: command, an MCP call), never by ``beflow watch``, which only says the error and looks again on its next tick.
_TRY_AGAIN = (
    "Check the network (and tracker.api_url), then run the command again (`beflow watch` keeps looking by itself)."
)
_GITHUB_TROUBLE = (
    "GitHub is having trouble (https://www.githubstatus.com): run the command again in a few minutes "
    "(`beflow watch` keeps looking by itself)."
)


class Unavailable(GitHubError):
    """No answer (network down, a timeout) or a server error (5xx)."""

    code = "github_unavailable"


@dataclass
class Response:
    status: int
    data: Any
    headers: httpx.Headers
    #: Whether the answer came from the ETag cache (GitHub said 304).
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
    """One GitHub REST API endpoint with one token. Thread-safe: runs renew their claims from worker threads."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        token_name: str = "GITHUB_TOKEN",
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
                "Accept": "application/vnd.github+json",
                "Authorization": f"Bearer {token}",
                "X-GitHub-Api-Version": API_VERSION,
                "User-Agent": f"beflow/{__version__}",
            },
        )
        self._cache: OrderedDict[str, tuple[str, Any, httpx.Headers]] = OrderedDict()
        self._lock = threading.Lock()
        self._writes = threading.Lock()
        self._gate = 0.0  # nothing is sent before this time (epoch seconds)
        self._gate_reason = ""
        #: Server time minus local time, from the ``Date`` of the last answer: leases are timed on GitHub's clock.
        self.clock_offset = 0.0
        self.stats = Stats()
        self.timeout = timeout
        self._local = threading.local()  # this thread's deadline (monotonic), if a caller set one

    def close(self) -> None:
        self._client.close()

    def now(self) -> float:
        """GitHub's clock (epoch seconds), as its last answer's ``Date`` showed it."""
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
        return Unavailable(
            f"GitHub: {method} {path}: no answer in the time the lease had left",
            fix=_TRY_AGAIN,
        )

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
        """Send one request; 2xx (and any status in ``ok``) is returned, anything else raised as a GitHubError.

        No answer or a 5xx is tried again (twice) for every method but POST: a POST whose answer was lost may have
        been done, and doing it again files a second comment or issue. Its caller looks first (a comment by its
        marker, a pull request by its branch), or says ``retry=True`` for a POST that is harmless twice (git
        objects). A rate limit (403/429 with its headers) is waited out for every method: GitHub did nothing."""
        again = method != "POST" if retry is None else retry
        if method == "GET":
            return self._send(method, path, params, json, ok, again)
        left = self._left()
        # No parallel bursts of writes (GitHub's secondary limits punish them); a write with a deadline waits for
        # its turn no longer than it has.
        if not self._writes.acquire(timeout=-1 if left is None else max(left, 0.0)):
            raise self._out_of_time(method, path)
        try:
            return self._send(method, path, params, json, ok, again)
        finally:
            self._writes.release()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params).data

    def paginate(self, path: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Every item of a list endpoint, following ``Link: rel="next"``; each page is a conditional request (and
        one that is no list is :class:`~beflow.trackers.github_wire.MalformedAnswer`). The items are as GitHub gave
        them: their reader parses them (:mod:`beflow.trackers.github_wire`)."""
        items: list[Any] = []
        url: str | None = path
        query: dict[str, Any] | None = {"per_page": 100, **(params or {})}
        while url is not None:
            response = self.request("GET", url, params=query)
            items.extend(wire.listed(response.data, f"GET {path}"))
            match = _NEXT.search(response.headers.get("link", ""))
            url, query = (match.group(1), None) if match else (None, None)
        return items

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
                    f"GitHub ({self.base_url}) does not answer: {type(error).__name__}",
                    fix=_TRY_AGAIN,
                ) from None
            self._note(method, answer)
            if answer.status_code == 304 and cached is not None:
                self.stats.not_modified += 1
                with self._lock:
                    self._cache.move_to_end(key)
                return Response(200, cached[1], cached[2], cached=True)
            if self._rate_limited(answer):
                if self._gate - time.time() <= self.inline_wait and attempt < 3:
                    continue  # a short wait, taken in line by _wait_for_gate
                raise RateLimited(self._gate_reason, self._gate)
            if answer.status_code >= 500 and again and attempt < 2 and self._can_wait(0.5 * (attempt + 1)):
                time.sleep(0.5 * (attempt + 1))
                continue
            data = _json(answer)
            if answer.is_success or answer.status_code in ok:
                if method == "GET" and answer.status_code == 200 and answer.headers.get("etag"):
                    with self._lock:
                        self._cache[key] = (answer.headers["etag"], data, answer.headers)
                        while len(self._cache) > CACHE_SIZE:
                            self._cache.popitem(last=False)
                return Response(answer.status_code, data, answer.headers)
            raise self._error(method, path, answer, data)
        raise RateLimited(self._gate_reason or "GitHub keeps asking beflow to slow down", self._gate)

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
        """Whether GitHub asked to slow down; if so, the gate is closed until it says to come back."""
        if answer.status_code not in (403, 429):
            return False
        rate = wire.RateHeaders.of(answer.headers)
        now = time.time()
        if rate.retry_after is not None:
            until, kind = now + float(rate.retry_after), "a secondary rate limit"
        elif rate.remaining == 0 and rate.reset is not None:
            until, kind = float(rate.reset) - self.clock_offset + 1, "the rate limit"
        elif answer.status_code == 429 or "rate limit" in answer.text.lower():
            until, kind = now + 60.0, "a secondary rate limit"
        else:
            return False
        with self._lock:
            self.stats.rate_limited += 1
            self._gate = max(self._gate, until)
            wait = self._gate - now
            self._gate_reason = f"GitHub asked beflow to slow down ({kind}); waiting {wait:.0f} s"
        return True

    def _error(self, method: str, path: str, answer: httpx.Response, data: Any) -> BeflowError:
        said = wire.error_message(data)
        what = f"GitHub: {method} {path}: {answer.status_code}" + (f" {said}" if said else "")
        if answer.status_code == 401:
            return GitHubAuthError(
                f"GitHub refused the token in ${self.token_name} (401 {said or 'Bad credentials'})",
                fix=f"Set {self.token_name} to a valid token (tracker.token_env names the variable), "
                "or log in with `gh auth login` and unset it.",
            )
        if answer.status_code >= 500:
            return Unavailable(what, status=answer.status_code, fix=_GITHUB_TROUBLE)
        return GitHubError(what, status=answer.status_code)


def _json(answer: httpx.Response) -> Any:
    if not answer.content:
        return None
    try:
        return answer.json()
    except ValueError:
        return None
