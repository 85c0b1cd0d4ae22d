"""What the REST clients of GitHub and GitLab share (:mod:`beflow.trackers.github_api`,
:mod:`beflow.trackers.gitlab_api`): a thin httpx client that is polite and bounded.

- **Conditional GETs.** An answer with an ``ETag`` is kept (the forge says which); the next GET of it carries
  ``If-None-Match``, and a 304 is served from the cache.
- **A gate for rate limits.** When the forge asks to slow down, nothing is sent until it says to come back: a short
  wait is taken in line, a long one fails every request at once with the forge's ``RateLimited``.
- **Retries.** No answer or a 5xx is tried again (twice, with backoff) for every method but POST, unless told.
- **One write at a time**, and **deadlines**: every request of a thread inside :meth:`ForgeApi.deadline` ends by then.
- **The forge's clock** from the last answers' ``Date`` (their median): leases are timed on it.

Each forge's client says only what differs: its headers, its errors, how it says to slow down, which answers are
worth keeping, and how its listings page.
"""

from __future__ import annotations

import abc
import contextlib
import email.utils
import json
import os
import shutil
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import httpx

from beflow import __version__
from beflow.errors import BeflowError, excerpt
from beflow.system import proc

#: Waits up to this long are taken in line (a short ``retry-after``); longer ones close the gate and fail fast.
INLINE_WAIT = 5.0
#: The longest a rate limit closes the gate, whatever the answer says (GitHub's window is an hour, GitLab's a minute).
MAX_WAIT = 3600.0
#: The most of an error's body :meth:`ForgeApi.tail` reads (its message is at the start).
ERROR_BODY = 64 * 1024
#: How many of the last answers' ``Date`` the forge's clock is the median of.
CLOCK_ANSWERS = 5
#: How many GET answers the ETag cache keeps.
CACHE_SIZE = 4096


def find_token(variable: str, argv: list[str]) -> str | None:
    """The token in ``$variable``, else what the forge's CLI prints when asked (``argv``: ``gh auth token``), when
    it is installed; None when neither gives one."""
    token = os.environ.get(variable, "").strip()
    if token:
        return token
    if shutil.which(argv[0]):
        try:
            result = proc.run_sync(argv, timeout=15)
        except BeflowError:
            result = None
        if result is not None and result.ok and result.stdout.strip():
            return result.stdout.decode("utf-8", "replace").strip()
    return None


#: How much of what a forge's error answer says an error message quotes.
SAID = 200


def quoted(said: str | None) -> str | None:
    """What a forge's error answer says, as beflow's error message may quote it: control characters escaped, cut
    to about :data:`SAID` characters (a proxy's page, or a hostile server's, is no message to show whole)."""
    return None if said is None else excerpt(said, SAID, quote=False)


class ForgeError(BeflowError):
    """A forge answered with an error (or not at all); ``status``: its HTTP status, when it answered."""

    #: The forge's name in messages (``GitHub``).
    forge: ClassVar[str] = "The forge"

    def __init__(self, message: str, *, status: int | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.status = status


class Limited(ForgeError):
    """The forge asked beflow to slow down; nothing is sent until ``until`` (epoch seconds). Each forge's
    ``RateLimited`` is this and its own error (``class RateLimited(Limited, GitHubError)``)."""

    code = "rate_limited"

    def __init__(self, message: str, until: float) -> None:
        allowed = time.strftime("%H:%M:%S", time.localtime(until))
        fix = f"Run the command again after {allowed}, when {self.forge} allows it (`beflow watch` waits by itself)."
        super().__init__(message, status=429, fix=fix)
        self.until = until


class RateHeaders(Protocol):
    """What a forge's answer says of its rate limit (each None when it does not say)."""

    @property
    def remaining(self) -> int | None: ...
    @property
    def reset(self) -> int | None: ...
    @property
    def retry_after(self) -> int | None: ...


class Clock(Protocol):
    """What the client reads the time from (the ``time`` module)."""

    def time(self) -> float: ...
    def sleep(self, seconds: float, /) -> None: ...
    def monotonic(self) -> float: ...


@dataclass
class Response:
    status: int
    #: The answer's JSON (GitLab: the text of an answer that is no JSON, a job's log); None when empty.
    data: Any
    headers: httpx.Headers
    #: Whether the answer came from the ETag cache (the forge said 304).
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


def _whole(answer: httpx.Response, ends: float, clock: Clock) -> httpx.Response:
    """``answer`` read whole by ``ends`` (``clock.monotonic()``), else httpx's ``ReadTimeout``: httpx's timeouts are
    per read, and a server that drips its answer a byte at a time would otherwise hold the request without end. (A
    chunk comes within one read's timeout or the read fails: the request ends within about twice its time.)"""
    content = bytearray()
    try:
        for chunk in answer.iter_bytes():
            content += chunk
            if clock.monotonic() > ends:
                raise httpx.ReadTimeout("the answer took longer than the timeout", request=answer.request)
    finally:
        answer.close()
    # The bytes are decoded already: the answer that holds them says no encoding.
    headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() != "content-encoding"]
    return httpx.Response(answer.status_code, headers=headers, content=bytes(content), request=answer.request)


class ForgeApi(abc.ABC):
    """One forge's REST API with one token. Thread-safe: runs renew their claims from worker threads."""

    #: The forge's name in messages (``GitHub``).
    forge: ClassVar[str]
    #: What the user does when the forge does not answer: shown where a command ends on the error, never by
    #: ``beflow watch``, which only says the error and looks again on its next tick.
    try_again: ClassVar[str]
    #: The forge's errors for no answer (or a 5xx), and for a rate limit.
    unavailable: ClassVar[type[ForgeError]]
    rate_limited: ClassVar[type[Limited]]
    #: The variable the token is in unless the settings name another (``GITHUB_TOKEN``).
    token_variable: ClassVar[str]

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        token_name: str | None = None,
        timeout: float = 30.0,
        inline_wait: float = INLINE_WAIT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        #: The variable the token came from, as errors name it (``token_variable`` unless told).
        self.token_name = token_name or self.token_variable
        self.token = token  # for git's credential helper only (over a socket); never in argv, a file or a message
        self.inline_wait = inline_wait
        headers = {"Authorization": f"Bearer {token}", "User-Agent": f"beflow/{__version__}", **self._headers()}
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport, headers=headers)
        self._cache: OrderedDict[str, tuple[str, Any, httpx.Headers]] = OrderedDict()
        self._lock = threading.Lock()
        self._writes = threading.Lock()
        self._gate = 0.0  # nothing is sent before this time (epoch seconds)
        self._gate_reason = ""
        #: Server time minus local time, from the ``Date`` of the last answer: leases are timed on the forge's clock.
        self.clock_offset = 0.0
        self._offsets: deque[float] = deque(maxlen=CLOCK_ANSWERS)
        self.stats = Stats()
        self.timeout = timeout
        self._local = threading.local()  # this thread's deadline (monotonic), if a caller set one

    # -- what differs by forge ---------------------------------------------------------------------------------------

    @abc.abstractmethod
    def _headers(self) -> dict[str, str]:
        """The headers the forge asks for on every request, besides the token and the user agent."""

    @staticmethod
    @abc.abstractmethod
    def rate_headers(headers: Mapping[str, str]) -> RateHeaders:
        """What an answer's headers say of the rate limit (the forge's ``wire.RateHeaders.of``)."""

    @abc.abstractmethod
    def _asked_to_wait(self, answer: httpx.Response, rate: RateHeaders, now: float) -> tuple[float, str] | None:
        """Whether the answer (saying ``rate`` of the limit) asks to slow down: until when (epoch seconds, local
        clock), and which limit it is."""

    @abc.abstractmethod
    def _error(self, method: str, path: str, answer: httpx.Response, data: Any) -> BeflowError:
        """The forge's error for an answer that is no success."""

    def _clock(self) -> Clock:
        """Where the client reads the time and sleeps (``time``'s ``time``, ``sleep`` and ``monotonic``), asked at
        each use: a forge's module may give its own (its tests then set this machine's clock apart from the
        forge's)."""
        return time

    def _keeps(self, data: Any) -> bool:
        """Whether a GET's answer with an ETag is worth keeping (the forge answers 304 to it)."""
        return True

    def _decode(self, answer: httpx.Response) -> Any:
        """An answer's body as the caller gets it: its JSON, None when empty or no JSON."""
        if not answer.content:
            return None
        try:
            return answer.json()
        except ValueError:
            return None

    # -- the clock and deadlines -------------------------------------------------------------------------------------

    def close(self) -> None:
        self._client.close()

    def now(self) -> float:
        """The forge's clock (epoch seconds), as its last answer's ``Date`` showed it."""
        return self._clock().time() + self.clock_offset

    @contextlib.contextmanager
    def deadline(self, at: float) -> Iterator[None]:
        """Every request of this thread inside the block ends by ``at`` (``time.monotonic()``): its timeouts, its
        retries and its waits (the gate, the one-write-at-a-time lock) all fit in what is left, and a request that
        cannot is the forge's ``Unavailable`` at once. A claim's lease bounds the requests made under it this way."""
        outer = getattr(self._local, "deadline", None)
        self._local.deadline = at if outer is None else min(outer, at)
        try:
            yield
        finally:
            self._local.deadline = outer

    def _left(self) -> float | None:
        """Seconds left before this thread's deadline (None: no deadline)."""
        at = getattr(self._local, "deadline", None)
        return None if at is None else at - self._clock().monotonic()

    def _out_of_time(self, method: str, path: str) -> ForgeError:
        return self.unavailable(
            f"{self.forge}: {method} {path}: no answer in the time the lease had left", fix=self.try_again
        )

    def _can_wait(self, seconds: float) -> bool:
        """Whether a wait of ``seconds`` (and a try after it) fits before this thread's deadline."""
        left = self._left()
        return left is None or left > seconds + 0.5

    # -- requests ----------------------------------------------------------------------------------------------------

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
        """Send one request; 2xx (and any status in ``ok``) is returned, anything else raised as the forge's error.

        No answer or a 5xx is tried again (twice) for every method but POST: a POST whose answer was lost may have
        been done, and doing it again files a second comment or issue. Its caller looks first (a comment by its
        marker, a pull request by its branch), or says ``retry=True`` for a POST that is harmless twice. A rate
        limit is waited out for every method: the forge did nothing."""
        again = method != "POST" if retry is None else retry
        if method == "GET":
            return self._send(method, path, params, json, ok, again)
        left = self._left()
        # No parallel bursts of writes (forges' secondary limits punish them); a write with a deadline waits for
        # its turn no longer than it has.
        if not self._writes.acquire(timeout=-1 if left is None else max(left, 0.0)):
            raise self._out_of_time(method, path)
        try:
            return self._send(method, path, params, json, ok, again)
        finally:
            self._writes.release()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params).data

    def _send(
        self, method: str, path: str, params: dict[str, Any] | None, body: Any, ok: tuple[int, ...], again: bool
    ) -> Response:
        for attempt in range(4):
            self._wait_for_gate()
            left = self._left()
            if left is not None and left <= 0:
                raise self._out_of_time(method, path)
            timeout = self.timeout if left is None else min(self.timeout, left)
            ends = self._clock().monotonic() + timeout  # the whole request's bound (httpx's timeouts are per read)
            request = self._client.build_request(method, path, params=params, json=body, timeout=timeout)
            key = str(request.url)
            with self._lock:
                cached = self._cache.get(key) if method == "GET" else None
            if cached is not None:
                request.headers["If-None-Match"] = cached[0]
            try:
                answer = _whole(self._client.send(request, stream=True), ends, self._clock())
            except httpx.HTTPError as error:
                if again and attempt < 2 and self._can_wait(0.5 * (attempt + 1)):
                    self._clock().sleep(0.5 * (attempt + 1))
                    continue
                left = self._left()
                if left is not None and left <= 0.5:  # the timeout was what the deadline left
                    raise self._out_of_time(method, path) from None
                raise self.unavailable(
                    f"{self.forge} ({self.base_url}) does not answer: {type(error).__name__}", fix=self.try_again
                ) from None
            self._note(method, answer)
            if answer.status_code == 304 and cached is not None:
                with self._lock:
                    self.stats.not_modified += 1
                    self._cache.move_to_end(key)
                return Response(200, cached[1], cached[2], cached=True)
            if self._rate_limited(answer):
                if self._gate - self._clock().time() <= self.inline_wait and attempt < 3:
                    continue  # a short wait, taken in line by _wait_for_gate
                raise self.rate_limited(self._gate_reason, self._gate)
            if answer.status_code >= 500 and again and attempt < 2 and self._can_wait(0.5 * (attempt + 1)):
                self._clock().sleep(0.5 * (attempt + 1))
                continue
            data = self._decode(answer)
            if answer.is_success or answer.status_code in ok:
                etag = answer.headers.get("etag")
                if method == "GET" and answer.status_code == 200 and etag and self._keeps(data):
                    with self._lock:
                        self._cache[key] = (etag, data, answer.headers)
                        while len(self._cache) > CACHE_SIZE:
                            self._cache.popitem(last=False)
                return Response(answer.status_code, data, answer.headers)
            raise self._error(method, path, answer, data)
        raise self.rate_limited(self._gate_reason or f"{self.forge} keeps asking beflow to slow down", self._gate)

    def tail(self, path: str, size: int) -> bytes:
        """The last ``size`` bytes of a GET's answer (a job's log), read as it streams: however long the answer, no
        more than about twice ``size`` is held. Not retried (the caller asks again on a later poll); its errors are
        :meth:`request`'s, an error's body read up to :data:`ERROR_BODY` bytes."""
        self._wait_for_gate()
        left = self._left()
        if left is not None and left <= 0:
            raise self._out_of_time("GET", path)
        timeout = self.timeout if left is None else min(self.timeout, left)
        ends = self._clock().monotonic() + timeout  # the whole request's bound (httpx's timeouts are per read)
        request = self._client.build_request("GET", path, timeout=timeout)
        try:
            answer = self._client.send(request, stream=True)
        except httpx.HTTPError as error:
            raise self.unavailable(
                f"{self.forge} ({self.base_url}) does not answer: {type(error).__name__}", fix=self.try_again
            ) from None
        try:
            self._note("GET", answer)
            if self._rate_limited(answer):
                raise self.rate_limited(self._gate_reason, self._gate)
            kept = bytearray()
            limit = size if answer.is_success else ERROR_BODY
            try:
                for chunk in answer.iter_bytes():
                    left = self._left()
                    if left is not None and left <= 0:
                        raise self._out_of_time("GET", path)
                    if self._clock().monotonic() > ends:  # (a drip: every read in time, the whole too long)
                        raise httpx.ReadTimeout("the answer took longer than the timeout", request=request)
                    if answer.is_success:
                        kept += chunk
                        if len(kept) > 2 * size:
                            del kept[: len(kept) - size]
                    elif len(kept) < limit:
                        kept += chunk[: limit - len(kept)]
            except httpx.HTTPError as error:
                raise self.unavailable(
                    f"{self.forge}: GET {path}: the answer broke off: {type(error).__name__}", fix=self.try_again
                ) from None
            if answer.is_success:
                return bytes(kept[-size:]) if size else b""
            try:
                data = json.loads(kept) if kept else None
            except ValueError:
                data = None
            raise self._error("GET", path, answer, data)
        finally:
            answer.close()

    def _wait_for_gate(self) -> None:
        wait = self._gate - self._clock().time()
        if wait <= 0:
            return
        if wait > self.inline_wait or not self._can_wait(wait):
            raise self.rate_limited(self._gate_reason, self._gate)
        self._clock().sleep(wait)

    def _note(self, method: str, answer: httpx.Response) -> None:
        with self._lock:
            self.stats.requests += 1
            self.stats.by_method[method] = self.stats.by_method.get(method, 0) + 1
            rate = self.rate_headers(answer.headers)
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
                # The median of the last few answers' clocks: one answer's Date far off (a proxy's cached answer, a
                # broken clock) moves neither the leases nor the watermarks timed on it.
                self._offsets.append(server - self._clock().time())
                self.clock_offset = sorted(self._offsets)[(len(self._offsets) - 1) // 2]

    def _rate_limited(self, answer: httpx.Response) -> bool:
        """Whether the forge asked to slow down; if so, the gate is closed until it says to come back."""
        now = self._clock().time()
        asked = self._asked_to_wait(answer, self.rate_headers(answer.headers), now)
        if asked is None:
            return False
        until, kind = asked
        # However long an answer says (a broken proxy's Retry-After of years): no forge's window is longer than an
        # hour, and beflow would otherwise stay silent until restarted.
        until = min(until, now + MAX_WAIT)
        with self._lock:
            self.stats.rate_limited += 1
            self._gate = max(self._gate, until)
            wait = self._gate - now
            self._gate_reason = f"{self.forge} asked beflow to slow down ({kind}); waiting {wait:.0f} s"
        return True
