"""A small client for Linear's GraphQL API: one endpoint, one token, the documents of
:mod:`beflow.trackers.linear_queries`.

Plain httpx rather than Linear's SDK (a TypeScript one): the tracker sends a score of documents, and what matters —
errors read by their ``extensions.code``, the rate-limit gate, retries only where a request is harmless twice,
deadlines under a lease, a token that never reaches a message — is a few dozen lines we control and test against the
fake Linear, which executes every request against Linear's published schema.

- **The token** goes in ``Authorization``: a personal API key (``lin_api_...``) bare, an OAuth token after
  ``Bearer`` (Linear refuses either the other way). It never appears in an error message.
- **Errors** come the GraphQL way, beside ``data`` under a status that may be 200, 400 or 429: beflow reads the
  errors' codes, not the status. ``AUTHENTICATION_ERROR`` is a setting to change (:class:`LinearAuthError`);
  ``RATELIMITED`` closes a gate until the buckets' reset headers say to come back, and every request meanwhile fails
  at once with :class:`RateLimited` (a short wait is taken in line), as GitHub's and GitLab's clients do.
- **Retries**: no answer or a 5xx is tried again (twice) for a query, and for a mutation its caller says is safe
  twice (``retry=True``): an edit to a fixed text, or a create with an id beflow chose (a second create with a taken
  id is refused, so it cannot double). Any other mutation's lost answer is its caller's to settle.
- **Deadlines**: within :meth:`Api.deadline` every request of the thread ends by then, waits and retries included: a
  claim's lease bounds the writes made under it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from beflow import __version__
from beflow.errors import BeflowError, ConfigError
from beflow.trackers import linear_wire as wire

PUBLIC_API = "https://api.linear.app/graphql"
#: Waits up to this long are taken in line; longer ones close the gate and fail fast.
INLINE_WAIT = 5.0
#: How long the gate stays closed after a ``RATELIMITED`` whose headers say nothing of when to come back.
DEFAULT_BACKOFF = 60.0
_OPERATION = re.compile(r"^\s*(?:query|mutation)\s+(\w+)")

_TRY_AGAIN = (
    "Check the network (and tracker.api_url), then run the command again (`beflow watch` keeps looking by itself)."
)
_LINEAR_TROUBLE = (
    "Linear is having trouble (https://linearstatus.com): run the command again in a few minutes "
    "(`beflow watch` keeps looking by itself)."
)


class LinearError(BeflowError):
    """Linear answered with an error (or not at all); ``codes`` are its errors' ``extensions.code``."""

    code = "linear"

    def __init__(
        self, message: str, *, codes: tuple[str, ...] = (), status: int | None = None, fix: str | None = None
    ) -> None:
        super().__init__(message, fix=fix)
        self.codes = codes
        self.status = status


class LinearAuthError(ConfigError):
    """The token is missing or Linear refuses it: a setting to change, exit 2."""

    code = "linear_auth"


class RateLimited(LinearError):
    """Linear asked beflow to slow down; nothing is sent until ``until`` (epoch seconds)."""

    code = "rate_limited"

    def __init__(self, message: str, until: float) -> None:
        allowed = time.strftime("%H:%M:%S", time.localtime(until))
        fix = f"Run the command again after {allowed}, when Linear allows it (`beflow watch` waits by itself)."
        super().__init__(message, codes=(wire.RATELIMITED,), fix=fix)
        self.until = until


class Unavailable(LinearError):
    """No answer (network down, a timeout), a server error (5xx), or an answer that is no GraphQL answer."""

    code = "linear_unavailable"


@dataclass
class Stats:
    """What the client sent, for ``--json`` views, the dashboard and the tests."""

    requests: int = 0
    rate_limited: int = 0
    #: What the requests bucket had left, and when it is full again (epoch seconds), as the last answer said.
    remaining: int | None = None
    reset: float | None = None
    by_operation: dict[str, int] = field(default_factory=dict)


def authorization(token: str) -> str:
    """The ``Authorization`` header for ``token``: a personal API key bare, an OAuth token after ``Bearer``."""
    return token if token.startswith("lin_api_") else f"Bearer {token}"


def operation_of(document: str) -> str:
    """The name of a document's operation (every document of beflow's names one)."""
    match = _OPERATION.match(document)
    if match is None:
        raise ValueError("a document of beflow's names its operation")
    return match.group(1)


class Api:
    """Linear's GraphQL endpoint with one token. Thread-safe: runs renew their claims from worker threads."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        token_name: str = "LINEAR_API_KEY",
        timeout: float = 30.0,
        inline_wait: float = INLINE_WAIT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self.token_name = token_name
        self.token = token  # in the Authorization header only; never in argv, a file or a message
        self.inline_wait = inline_wait
        self.timeout = timeout
        self._client = httpx.Client(
            timeout=timeout,
            transport=transport,
            headers={
                "Authorization": authorization(token),
                "Content-Type": "application/json",
                "User-Agent": f"beflow/{__version__}",
            },
        )
        self._lock = threading.Lock()
        self._gate = 0.0  # nothing is sent before this time (epoch seconds)
        self._gate_reason = ""
        #: Server time minus local time, from the ``Date`` of the last answer: leases are timed on Linear's clock.
        self.clock_offset = 0.0
        self.stats = Stats()
        self._local = threading.local()

    def close(self) -> None:
        self._client.close()

    def now(self) -> float:
        """Linear's clock (epoch seconds), as its last answer's ``Date`` showed it."""
        return time.time() + self.clock_offset

    @contextlib.contextmanager
    def deadline(self, at: float) -> Iterator[None]:
        """Every request of this thread inside the block ends by ``at`` (``time.monotonic()``): its timeouts, its
        retries and its waits all fit in what is left, and a request that cannot is :class:`Unavailable` at once."""
        outer = getattr(self._local, "deadline", None)
        self._local.deadline = at if outer is None else min(outer, at)
        try:
            yield
        finally:
            self._local.deadline = outer

    def _left(self) -> float | None:
        at = getattr(self._local, "deadline", None)
        return None if at is None else at - time.monotonic()

    def _can_wait(self, seconds: float) -> bool:
        left = self._left()
        return left is None or left > seconds + 0.5

    # -- requests --------------------------------------------------------------------------------------------------

    def query(self, document: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """A query's ``data`` (tried again when unanswered: a query changes nothing)."""
        return self.send(document, variables, retry=True)

    def mutate(self, document: str, variables: dict[str, Any], *, retry: bool = False) -> dict[str, Any]:
        """A mutation's ``data``; ``retry``: it is harmless twice (an edit to a fixed text, a create with an id of
        beflow's choosing), so an unanswered one is sent again."""
        return self.send(document, variables, retry=retry)

    def send(self, document: str, variables: dict[str, Any] | None, *, retry: bool) -> dict[str, Any]:
        """One GraphQL request: its ``data``, or the error Linear (or the way to it) gave."""
        operation = operation_of(document)
        body = {"query": document, "variables": variables or {}, "operationName": operation}
        for attempt in range(4):
            self._wait_for_gate()
            left = self._left()
            if left is not None and left <= 0:
                raise self._out_of_time(operation)
            timeout = self.timeout if left is None else min(self.timeout, left)
            try:
                answer = self._client.post(self.url, json=body, timeout=timeout)
            except httpx.HTTPError as error:
                if retry and attempt < 2 and self._can_wait(0.5 * (attempt + 1)):
                    time.sleep(0.5 * (attempt + 1))
                    continue
                left = self._left()
                if left is not None and left <= 0.5:
                    raise self._out_of_time(operation) from None
                raise Unavailable(
                    f"Linear ({self.url}) does not answer {operation}: {type(error).__name__}", fix=_TRY_AGAIN
                ) from None
            rate = self._note(operation, answer)
            envelope = _envelope(answer)
            if (envelope is not None and envelope.rate_limited) or answer.status_code == 429:
                self._close_gate(rate)
                if self._gate - time.time() <= self.inline_wait and attempt < 3:
                    continue  # a short wait, taken in line by _wait_for_gate
                raise RateLimited(self._gate_reason, self._gate)
            if answer.status_code == 401:  # (a proxy's refusal may be no GraphQL answer)
                raise self._error(operation, 401, envelope or wire.Envelope())
            if envelope is None or answer.status_code >= 500:
                if retry and attempt < 2 and self._can_wait(0.5 * (attempt + 1)):
                    time.sleep(0.5 * (attempt + 1))
                    continue
                raise Unavailable(
                    f"Linear: {operation}: {answer.status_code}"
                    + (" (an answer that is no GraphQL answer)" if envelope is None else ""),
                    status=answer.status_code,
                    fix=_LINEAR_TROUBLE if answer.status_code >= 500 else _TRY_AGAIN,
                )
            if envelope.errors:
                raise self._error(operation, answer.status_code, envelope)
            if envelope.data is None:
                raise wire.MalformedAnswer(f"Linear: {operation}: an answer without data or errors")
            return envelope.data
        raise RateLimited(self._gate_reason or "Linear keeps asking beflow to slow down", self._gate)

    def _out_of_time(self, operation: str) -> Unavailable:
        return Unavailable(f"Linear: {operation}: no answer in the time the lease had left", fix=_TRY_AGAIN)

    def _wait_for_gate(self) -> None:
        wait = self._gate - time.time()
        if wait <= 0:
            return
        if wait > self.inline_wait or not self._can_wait(wait):
            raise RateLimited(self._gate_reason, self._gate)
        time.sleep(wait)

    def _note(self, operation: str, answer: httpx.Response) -> wire.RateHeaders:
        rate = wire.RateHeaders.of(answer.headers)
        with self._lock:
            self.stats.requests += 1
            self.stats.by_operation[operation] = self.stats.by_operation.get(operation, 0) + 1
            if rate.requests_remaining is not None:
                self.stats.remaining = rate.requests_remaining
            if rate.requests_reset is not None:
                self.stats.reset = rate.requests_reset.timestamp()
            date = answer.headers.get("date")
            if date:
                with contextlib.suppress(TypeError, ValueError):
                    self.clock_offset = email.utils.parsedate_to_datetime(date).timestamp() - time.time()
        return rate

    def _close_gate(self, rate: wire.RateHeaders) -> None:
        """Linear said ``RATELIMITED``: nothing is sent until its headers say a bucket is full enough again."""
        now = time.time()
        resumes = rate.resumes(dt.datetime.fromtimestamp(self.now(), dt.UTC), limited=True)
        until = now + DEFAULT_BACKOFF if resumes is None else resumes.timestamp() - self.clock_offset + 1
        with self._lock:
            self.stats.rate_limited += 1
            self._gate = max(self._gate, until)
            self._gate_reason = f"Linear asked beflow to slow down (its rate limit); waiting {self._gate - now:.0f} s"

    def _error(self, operation: str, status: int, envelope: wire.Envelope) -> BeflowError:
        codes = tuple(envelope.codes)
        said = "; ".join(dict.fromkeys(error.text for error in envelope.errors))
        if wire.AUTHENTICATION_ERROR in codes or status == 401:
            return LinearAuthError(
                f"Linear refused the token in ${self.token_name} ({said or 'not authenticated'})",
                fix=f"Set {self.token_name} to a valid personal API key (Linear: Settings > Security & access) or "
                "OAuth token; tracker.token_env names the variable.",
            )
        shown = f" ({', '.join(codes)})" if codes else ""
        return LinearError(f"Linear: {operation}: {said}{shown}", codes=codes, status=status)


def _envelope(answer: httpx.Response) -> wire.Envelope | None:
    """The GraphQL answer in ``answer``; None when it is none (a proxy's page, an empty body)."""
    try:
        data = answer.json()
    except ValueError:
        return None
    if not isinstance(data, dict) or not ({"data", "errors"} & data.keys()):
        return None
    try:
        return wire.Envelope.model_validate(data)
    except ValueError:
        return None
