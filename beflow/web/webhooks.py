"""Webhook deliveries from GitHub, GitLab, Linear and Jira (docs/webhooks.md): each checked as its forge signs it, never
replayed, and read for one thing only — whether the event may change what is ready, so that the watch looks now.

Pure: what a delivery is (its headers, its raw body, the secret, the clock) in, a :class:`Delivery` or a
:class:`Refused` out; :mod:`beflow.web.hooks` serves them. Nothing of a delivery's content is ever taken as data:
a verified event only wakes the watch, which reads the tracker as it always does.

- GitHub signs the raw body with HMAC-SHA256 (``X-Hub-Signature-256: sha256=<hex>``), names each delivery
  (``X-GitHub-Delivery``) and its event (``X-GitHub-Event``).
- GitLab sends the shared secret itself (``X-Gitlab-Token``), compared in constant time; ``X-Gitlab-Event-UUID``
  names the delivery, ``X-Gitlab-Event`` the event.
- Linear signs the raw body with HMAC-SHA256 (``Linear-Signature: <hex>``), says when it sent it in the body
  (``webhookTimestamp``, milliseconds), which must be within :data:`LINEAR_WINDOW` of now; ``Linear-Delivery``
  names the delivery (else its signature does: the body carries its own timestamp), ``Linear-Event`` the event.
- Jira Cloud signs the raw body of an admin webhook registered with a secret with HMAC-SHA256 (``X-Hub-Signature:
  sha256=<hex>``, WebSub's form); ``X-Atlassian-Webhook-Identifier`` names the delivery (the same across Jira's
  retries), the body's ``webhookEvent`` the event (``jira:issue_updated``, ``comment_created``, ...).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

Forge = Literal["github", "gitlab", "linear", "jira"]
FORGES: tuple[Forge, ...] = ("github", "gitlab", "linear", "jira")

#: The largest delivery taken (bytes): a forge's event is a few kilobytes, a push of many commits some hundreds.
MAX_BODY = 1 << 20
#: Seconds a Linear delivery's ``webhookTimestamp`` may be from now.
LINEAR_WINDOW = 60.0
#: Seconds a delivery id is remembered (a delivery seen again within it is a replay), and how many at most.
REPLAY_WINDOW = 24 * 3600.0
REPLAY_KEPT = 10_000

M = TypeVar("M", bound=BaseModel)

#: Why a delivery was refused: the word it is counted under, and the HTTP status it is answered with.
REFUSALS: dict[str, int] = {
    "off": 403,  # no secret configured for that forge (or its variable is unset)
    "unsigned": 401,
    "bad_signature": 401,
    "stale": 401,  # Linear: outside the timestamp window
    "no_delivery_id": 400,
    "malformed": 400,
    "replayed": 409,
    "too_large": 413,
}


class Refused(Exception):
    """A delivery that is not acted on: why (a key of :data:`REFUSALS`) and what to tell the sender."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        assert reason in REFUSALS
        self.reason = reason
        self.message = message

    @property
    def status(self) -> int:
        return REFUSALS[self.reason]


@dataclass(frozen=True)
class Delivery:
    """A verified delivery: who sent it, its id, its event, and whether that event may change what is ready."""

    forge: Forge
    id: str
    event: str
    wakes: bool
    #: It may carry a person's stop signal to a running run's agent session (Linear's ``AgentSessionEvent``).
    stops: bool = False


class _Loose(BaseModel):
    """The few fields of a delivery's body read to decide whether it wakes the watch; the rest is not read."""

    model_config = ConfigDict(extra="ignore")


class _GitHubBody(_Loose):
    action: str | None = None
    state: str | None = None  # (a commit status: pending, success, failure, error)


class _GitLabAttributes(_Loose):
    status: str | None = None


class _GitLabBody(_Loose):
    object_attributes: _GitLabAttributes | None = None


class _LinearBody(_Loose):
    webhookTimestamp: int | float
    type: str | None = None


#: GitHub's events about issues and pull requests: each may make an issue ready or bring feedback.
_GITHUB_ALWAYS = frozenset(
    {
        "issues",
        "issue_comment",
        "pull_request",
        "pull_request_review",
        "pull_request_review_comment",
        "pull_request_review_thread",
        "sub_issues",
    }
)
#: GitHub's events about checks: they change nothing until they finish.
_GITHUB_FINISHED = frozenset({"check_run", "check_suite", "workflow_run"})
_GITLAB_ALWAYS = frozenset(
    {"Issue Hook", "Confidential Issue Hook", "Note Hook", "Confidential Note Hook", "Merge Request Hook"}
)
_GITLAB_FINISHED = frozenset({"success", "failed", "canceled", "skipped"})
#: An agent session of beflow's app was opened or prompted (a follow-up, maybe a stop signal): it wakes the watch too.
_LINEAR_SESSION = "AgentSessionEvent"
_LINEAR_WAKING = frozenset({"Issue", "Comment", "IssueLabel", "IssueRelation", _LINEAR_SESSION})


class _JiraBody(_Loose):
    webhookEvent: str


#: Jira's events that may make an issue ready, bring feedback or change what blocks it.
_JIRA_WAKING = frozenset(
    {
        "jira:issue_created",
        "jira:issue_updated",
        "jira:issue_deleted",
        "comment_created",
        "comment_updated",
        "issuelink_created",
        "issuelink_deleted",
    }
)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name.lower())
    return value.strip() if value is not None and value.strip() else None


def _hmac_hex(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _same(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())


def _parsed(model: type[M], body: bytes) -> M:
    try:
        return model.model_validate_json(body)
    except ValidationError:
        raise Refused("malformed", "the body is not the JSON this forge sends") from None


def _hub_signed(headers: Mapping[str, str], body: bytes, secret: str, name: str, missing: str) -> None:
    """Check header ``name``, ``sha256=<HMAC of the body>`` (GitHub's way, which Jira Cloud took up)."""
    signature = _header(headers, name)
    if signature is None:
        raise Refused("unsigned", missing)
    scheme, _, digest = signature.partition("=")
    if scheme != "sha256" or not _same(digest.lower(), _hmac_hex(secret, body)):
        raise Refused("bad_signature", f"{name} does not match the body")


def verify_github(headers: Mapping[str, str], body: bytes, secret: str) -> Delivery:
    _hub_signed(headers, body, secret, "X-Hub-Signature-256", "no X-Hub-Signature-256")
    delivery = _header(headers, "X-GitHub-Delivery")
    if delivery is None:
        raise Refused("no_delivery_id", "no X-GitHub-Delivery")
    event = _header(headers, "X-GitHub-Event") or ""
    wakes = event in _GITHUB_ALWAYS
    if event in _GITHUB_FINISHED:
        wakes = _parsed(_GitHubBody, body).action == "completed"
    elif event == "status":
        wakes = _parsed(_GitHubBody, body).state not in (None, "pending")
    return Delivery("github", delivery, event, wakes)


def verify_gitlab(headers: Mapping[str, str], body: bytes, secret: str) -> Delivery:
    token = _header(headers, "X-Gitlab-Token")
    if token is None:
        raise Refused("unsigned", "no X-Gitlab-Token")
    if not _same(token, secret):
        raise Refused("bad_signature", "X-Gitlab-Token is not the secret")
    delivery = _header(headers, "X-Gitlab-Event-UUID")
    if delivery is None:
        raise Refused("no_delivery_id", "no X-Gitlab-Event-UUID")
    event = _header(headers, "X-Gitlab-Event") or ""
    wakes = event in _GITLAB_ALWAYS
    if event == "Pipeline Hook":
        attributes = _parsed(_GitLabBody, body).object_attributes
        wakes = attributes is not None and attributes.status in _GITLAB_FINISHED
    return Delivery("gitlab", delivery, event, wakes)


def verify_linear(headers: Mapping[str, str], body: bytes, secret: str, now: float) -> Delivery:
    signature = _header(headers, "Linear-Signature")
    if signature is None:
        raise Refused("unsigned", "no Linear-Signature")
    if not _same(signature.lower(), _hmac_hex(secret, body)):
        raise Refused("bad_signature", "Linear-Signature does not match the body")
    parsed = _parsed(_LinearBody, body)
    if abs(now - parsed.webhookTimestamp / 1000) > LINEAR_WINDOW:
        raise Refused("stale", f"webhookTimestamp is more than {LINEAR_WINDOW:.0f} s from now")
    # (no delivery header: the signature names the delivery, its body holding the time it was sent)
    delivery = _header(headers, "Linear-Delivery") or signature.lower()
    event = _header(headers, "Linear-Event") or parsed.type or ""
    return Delivery("linear", delivery, event, event in _LINEAR_WAKING, stops=event == _LINEAR_SESSION)


def verify_jira(headers: Mapping[str, str], body: bytes, secret: str) -> Delivery:
    missing = "no X-Hub-Signature (register the webhook in Jira with a secret)"
    _hub_signed(headers, body, secret, "X-Hub-Signature", missing)
    delivery = _header(headers, "X-Atlassian-Webhook-Identifier")
    if delivery is None:
        raise Refused("no_delivery_id", "no X-Atlassian-Webhook-Identifier")
    event = _parsed(_JiraBody, body).webhookEvent
    return Delivery("jira", delivery, event, event in _JIRA_WAKING)


#: How each forge's delivery is verified: (headers by lowercase name, the raw body, the secret, now).
VERIFIERS: dict[Forge, Callable[[Mapping[str, str], bytes, str, float], Delivery]] = {
    "github": lambda headers, body, secret, now: verify_github(headers, body, secret),
    "gitlab": lambda headers, body, secret, now: verify_gitlab(headers, body, secret),
    "linear": verify_linear,
    "jira": lambda headers, body, secret, now: verify_jira(headers, body, secret),
}


def verify(forge: Forge, headers: Mapping[str, str], body: bytes, secret: str, now: float) -> Delivery:
    """The delivery, verified as ``forge`` signs it; :class:`Refused` saying why not. ``headers`` by lowercase
    name (as an ASGI server gives them)."""
    return VERIFIERS[forge](headers, body, secret, now)


class Replays:
    """Delivery ids seen in the last :data:`REPLAY_WINDOW` seconds, at most :data:`REPLAY_KEPT` (the oldest go
    first): memory stays bounded whatever a forge, or someone replaying its deliveries, sends."""

    def __init__(
        self, window: float = REPLAY_WINDOW, kept: int = REPLAY_KEPT, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window, self.kept, self.clock = window, kept, clock
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def first_time(self, forge: str, delivery: str) -> bool:
        """Whether ``delivery`` is new (then it is remembered); False for one seen within the window."""
        now = self.clock()
        while self._seen:
            oldest, when = next(iter(self._seen.items()))
            if now - when < self.window and len(self._seen) < self.kept:
                break
            del self._seen[oldest]
        key = (forge, delivery[:200])
        if key in self._seen:
            return False
        self._seen[key] = now
        return True


@dataclass
class Tally:
    """What the server's webhooks received since it started (shown in the health panel and ``/api/v1/state``)."""

    #: Verified deliveries that woke the watch.
    woke: int = 0
    #: Verified deliveries not acted on: an event that changes nothing ready, or a forge this project does not use.
    ignored: int = 0
    #: Refused deliveries, by why (:data:`REFUSALS`).
    refused: dict[str, int] = field(default_factory=dict)

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1
