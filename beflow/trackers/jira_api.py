"""A small client for Jira Cloud's REST API (v3): what the Jira tracker needs, on the forges' shared client
(:mod:`beflow.trackers.forge_api`: a gate for rate limits, retries of no answer and 5xx with backoff, one write at a
time, deadlines for the requests made under a lease, Jira's clock from its answers' ``Date``).

Jira Cloud takes an API token with the account's email as basic auth; the header is built here, and both the token
and the header's value are secrets of every run. A 429 (Jira's cost-based limits) closes the gate for its
``Retry-After`` (else until ``X-RateLimit-Reset``, else a minute).
"""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx

from beflow.config import JiraTrackerSettings
from beflow.errors import BeflowError, ConfigError
from beflow.trackers import jira_wire as wire
from beflow.trackers.forge_api import ForgeApi, ForgeError, Limited, RateHeaders, quoted

#: Issues a search page asks for (Jira's most for these fields), and the most pages any listing reads.
PER_PAGE = 100
MAX_PAGES = 200


class JiraError(ForgeError):
    """Jira answered with an error (or not at all)."""

    code = "jira"
    forge = "Jira"


class JiraAuthError(ConfigError):
    """The email or the token is missing, or Jira refuses them (401): a setting to change, exit 2."""

    code = "jira_auth"


class RateLimited(Limited, JiraError):
    """Jira asked beflow to slow down; nothing is sent until ``until`` (epoch seconds)."""


class Unavailable(JiraError):
    """No answer (network down, a timeout) or a server error (5xx)."""

    code = "jira_unavailable"


_TRY_AGAIN = "Check the network (and tracker.site), then run the command again (`beflow watch` keeps looking)."
_JIRA_TROUBLE = (
    "Jira is having trouble (https://jira-software.status.atlassian.com): run the command again in a few minutes "
    "(`beflow watch` keeps looking by itself)."
)


class Api(ForgeApi):
    """Jira Cloud's REST API (``https://site/rest/api/3``) with one account's email and API token."""

    forge = "Jira"
    try_again = _TRY_AGAIN
    unavailable = Unavailable
    rate_limited = RateLimited
    token_variable = "JIRA_API_TOKEN"
    rate_headers = staticmethod(wire.RateHeaders.of)

    def __init__(
        self,
        site: str,
        email: str,
        token: str,
        *,
        token_name: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        #: The basic auth header's value: the email and the token, encoded (a secret as much as the token).
        self.basic = base64.b64encode(f"{email}:{token}".encode()).decode("ascii")
        super().__init__(
            site.rstrip("/") + "/rest/api/3", token, token_name=token_name, timeout=timeout, transport=transport
        )

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Basic {self.basic}", "Accept": "application/json"}

    def _asked_to_wait(self, answer: httpx.Response, rate: RateHeaders, now: float) -> tuple[float, str] | None:
        """A 429 (Jira's burst, per-issue and quota limits, named by ``RateLimit-Reason``): for ``Retry-After``
        seconds, else until ``X-RateLimit-Reset``, else a minute; a 503 with a ``Retry-After`` (a resource limit
        reached) waits it out the same way rather than being tried again at once."""
        assert isinstance(rate, wire.RateHeaders)
        busy = answer.status_code == 503 and rate.retry_after is not None
        if answer.status_code != 429 and not busy:
            return None
        kind = "its rate limit" if answer.status_code == 429 else "a resource limit (503)"
        if rate.reason:
            kind += f": {rate.reason}"
        if rate.retry_after is not None:
            return now + float(rate.retry_after), kind
        if rate.reset is not None:
            return float(rate.reset) - self.clock_offset + 1, kind
        return now + 60.0, kind

    def _keeps(self, data: Any) -> bool:
        return False  # Jira's REST API answers no 304: nothing is worth keeping

    def _error(self, method: str, path: str, answer: httpx.Response, data: Any) -> BeflowError:
        said = quoted(wire.error_message(data))
        what = f"Jira: {method} {path}: {answer.status_code}" + (f" {said}" if said else "")
        if answer.status_code == 401:
            return JiraAuthError(
                f"Jira refused the email and token in ${self.token_name} (401)",
                fix=f"Set {self.token_name} to an API token (https://id.atlassian.com/manage-profile/security/"
                "api-tokens) of the account whose email is in tracker.email_env.",
            )
        if answer.status_code >= 500:
            return Unavailable(what, status=answer.status_code, fix=_JIRA_TROUBLE)
        return JiraError(what, status=answer.status_code)


def credentials(settings: JiraTrackerSettings) -> tuple[str, str]:
    """The account's email and API token, from ``$email_env`` and ``$token_env``; a clear error naming what is not
    set."""
    email = os.environ.get(settings.email_env, "").strip()
    token = os.environ.get(settings.token_env, "").strip()
    missing = [name for name, value in ((settings.email_env, email), (settings.token_env, token)) if not value]
    if missing:
        raise JiraAuthError(
            f"tracker: no Jira credentials: {' and '.join('$' + name for name in missing)} not set",
            fix=f"export {settings.email_env}=<your Atlassian account's email> {settings.token_env}=<an API token "
            "(https://id.atlassian.com/manage-profile/security/api-tokens)>; tracker.email_env and "
            "tracker.token_env name other variables.",
        )
    return email, token
