"""A small client for GitHub's REST API: what the GitHub tracker needs and nothing more.

Plain httpx rather than a generated SDK: the tracker uses about fifteen endpoints, and the parts that matter here —
conditional requests with ETags, pagination, rate-limit backoff, one write at a time, errors that name the setting to
change — are a few dozen lines we control and test against GitHub's published OpenAPI description.

Polling is polite: every GET carries the ETag of its last answer (a 304 costs no rate limit); a primary rate limit
(``x-ratelimit-remaining: 0``) or a secondary one (``retry-after``) closes a gate until GitHub says to come back,
and every request meanwhile fails at once with :class:`RateLimited` instead of hammering; writes go one at a time.
The token is sent in the ``Authorization`` header only and never appears in an error message. What GitLab's client
does alike (the gate, retries, the ETag cache, deadlines, the clock) is :mod:`beflow.trackers.forge_api`; this module
says what is GitHub's: its headers, how it says to slow down, its errors and its pages.
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from beflow.errors import BeflowError, ConfigError
from beflow.trackers import github_wire as wire
from beflow.trackers.forge_api import Clock, ForgeApi, ForgeError, Limited, RateHeaders, quoted

PUBLIC_API = "https://api.github.com"
API_VERSION = "2022-11-28"
_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


class GitHubError(ForgeError):
    """GitHub answered with an error (or not at all)."""

    code = "github"
    forge = "GitHub"


class GitHubAuthError(ConfigError):
    """The token is missing or GitHub refuses it (401): a setting to change, exit 2."""

    code = "github_auth"


class GitHubAccessError(ConfigError):
    """The repository is not there for this token (404), or the token may not do this (403)."""

    code = "github_access"


class RateLimited(Limited, GitHubError):
    """GitHub asked beflow to slow down; nothing is sent until ``until`` (epoch seconds)."""


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


class Api(ForgeApi):
    """One GitHub REST API endpoint with one token. Thread-safe: runs renew their claims from worker threads."""

    forge = "GitHub"
    try_again = _TRY_AGAIN
    unavailable = Unavailable
    rate_limited = RateLimited
    token_variable = "GITHUB_TOKEN"
    rate_headers = staticmethod(wire.RateHeaders.of)

    def _headers(self) -> dict[str, str]:
        return {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION}

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

    def _clock(self) -> Clock:
        return time  # (this module's, read at each use: a test sets this machine's clock apart from GitHub's)

    # -- what GitHub says, as beflow's errors ------------------------------------------------------------------------

    def _asked_to_wait(self, answer: httpx.Response, rate: RateHeaders, now: float) -> tuple[float, str] | None:
        """A primary rate limit (``x-ratelimit-remaining: 0``, until its reset on GitHub's clock) or a secondary one
        (``retry-after``, or a 403/429 that says so: a minute)."""
        if answer.status_code not in (403, 429):
            return None
        if rate.retry_after is not None:
            return now + float(rate.retry_after), "a secondary rate limit"
        if rate.remaining == 0 and rate.reset is not None:
            return float(rate.reset) - self.clock_offset + 1, "the rate limit"
        if answer.status_code == 429 or "rate limit" in answer.text.lower():
            return now + 60.0, "a secondary rate limit"
        return None

    def _error(self, method: str, path: str, answer: httpx.Response, data: Any) -> BeflowError:
        said = quoted(wire.error_message(data))
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
