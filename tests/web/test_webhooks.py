"""Each forge's deliveries, checked as the forge signs them — with real HMACs over payloads shaped as the forges
document them — and every way a delivery is refused; the replay set stays bounded.

The forges' descriptions of their deliveries:
- GitHub: https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries (the test vector below)
  and https://docs.github.com/en/webhooks/webhook-events-and-payloads (headers, ``issues``, ``check_run``);
- GitLab: https://docs.gitlab.com/user/project/integrations/webhooks/ (``X-Gitlab-Token``, ``X-Gitlab-Event-UUID``)
  and https://docs.gitlab.com/user/project/integrations/webhook_events/ (``Issue Hook``, ``Pipeline Hook``);
- Linear: https://linear.app/developers/webhooks (``Linear-Signature``, ``Linear-Delivery``, ``webhookTimestamp``);
- Jira Cloud: https://developer.atlassian.com/cloud/jira/platform/webhooks/ (an admin webhook's secret signs the body:
  ``X-Hub-Signature: sha256=<hex>``; ``X-Atlassian-Webhook-Identifier``, the same across retries; ``webhookEvent``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from beflow.web.webhooks import (
    LINEAR_WINDOW,
    Refused,
    Replays,
    verify,
    verify_github,
    verify_gitlab,
    verify_jira,
    verify_linear,
)

SECRET = "webhook-secret-of-the-test"
NOW = 1_765_000_000.0


def signed(body: bytes, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github_issue_labeled() -> bytes:
    return json.dumps(
        {
            "action": "labeled",
            "issue": {"number": 7, "title": "Add notes", "labels": [{"name": "beflow:ready"}], "state": "open"},
            "label": {"name": "beflow:ready"},
            "repository": {"full_name": "acme/widgets"},
            "sender": {"login": "octocat"},
        }
    ).encode()


def github_headers(
    body: bytes, event: str = "issues", delivery: str = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
) -> dict[str, str]:
    return {
        "x-github-event": event,
        "x-github-delivery": delivery,
        "x-hub-signature-256": "sha256=" + signed(body),
        "content-type": "application/json",
    }


def gitlab_issue_hook() -> bytes:
    return json.dumps(
        {
            "object_kind": "issue",
            "event_type": "issue",
            "user": {"username": "root"},
            "project": {"path_with_namespace": "acme/widgets"},
            "object_attributes": {"iid": 1, "title": "Add notes", "action": "update", "state": "opened"},
            "labels": [{"title": "beflow:ready"}],
            "changes": {"labels": {"previous": [], "current": [{"title": "beflow:ready"}]}},
        }
    ).encode()


def gitlab_headers(event: str = "Issue Hook", token: str = SECRET) -> dict[str, str]:
    return {
        "x-gitlab-event": event,
        "x-gitlab-token": token,
        "x-gitlab-event-uuid": "13792a34-cac6-4fda-95a8-c58e00a3954e",
        "x-gitlab-webhook-uuid": "0ef3bb6a-4f1c-4d26-a0b8-0c2f5f1a9a1e",
        "content-type": "application/json",
    }


def linear_issue_update(sent: float = NOW) -> bytes:
    return json.dumps(
        {
            "action": "update",
            "type": "Issue",
            "data": {"id": "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9", "identifier": "ENG-7", "title": "Add notes"},
            "updatedFrom": {"stateId": "8d4b2a1c-0000-4000-8000-000000000001"},
            "url": "https://linear.app/acme/issue/ENG-7/add-notes",
            "organizationId": "e0a31a5c-0000-4000-8000-000000000002",
            "webhookTimestamp": int(sent * 1000),
            "webhookId": "000042e3-d123-4980-b49f-8e140eef9329",
        }
    ).encode()


def linear_session_prompted(sent: float = NOW) -> bytes:
    """An ``AgentSessionEvent`` (``prompted``): a person wrote in an agent session of the app, maybe a stop."""
    return json.dumps(
        {
            "action": "prompted",
            "type": "AgentSessionEvent",
            "agentSession": {"id": "5b0c1a4e-0000-4000-8000-000000000003", "issueId": "2174add1-f7c8"},
            "agentActivity": {"content": {"type": "prompt", "body": "Stop"}, "signal": "stop"},
            "organizationId": "e0a31a5c-0000-4000-8000-000000000002",
            "webhookTimestamp": int(sent * 1000),
            "webhookId": "000042e3-d123-4980-b49f-8e140eef9329",
        }
    ).encode()


def linear_headers(
    body: bytes, delivery: str = "234d1a4e-b617-4388-90fe-adc3633d6b72", event: str = "Issue"
) -> dict[str, str]:
    return {
        "linear-signature": signed(body),
        "linear-delivery": delivery,
        "linear-event": event,
        "content-type": "application/json; charset=utf-8",
    }


def refusal(call: Any) -> str:
    with pytest.raises(Refused) as refused:
        call()
    return refused.value.reason


# -- GitHub ------------------------------------------------------------------------------------------------------------


def test_githubs_own_test_vector_verifies() -> None:
    # GitHub's documentation: secret "It's a Secret to Everybody", payload "Hello, World!", this signature.
    headers = {
        "x-hub-signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        "x-github-delivery": "1",
        "x-github-event": "ping",
    }
    delivery = verify_github(headers, b"Hello, World!", "It's a Secret to Everybody")
    assert (delivery.forge, delivery.id, delivery.event, delivery.wakes) == ("github", "1", "ping", False)


def test_a_signed_github_issue_event_wakes() -> None:
    body = github_issue_labeled()
    delivery = verify("github", github_headers(body), body, SECRET, NOW)
    assert delivery.wakes and delivery.id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"


@pytest.mark.parametrize(
    ("event", "payload", "wakes"),
    [
        ("issue_comment", {"action": "created"}, True),
        ("pull_request_review", {"action": "submitted"}, True),
        ("check_run", {"action": "completed", "check_run": {"conclusion": "failure"}}, True),
        ("check_run", {"action": "created"}, False),
        ("workflow_run", {"action": "in_progress"}, False),
        ("status", {"state": "pending"}, False),
        ("status", {"state": "failure"}, True),
        ("push", {"ref": "refs/heads/main"}, False),
        ("star", {"action": "created"}, False),
    ],
)
def test_github_events_wake_when_they_may_change_what_is_ready(
    event: str, payload: dict[str, Any], wakes: bool
) -> None:
    body = json.dumps(payload).encode()
    assert verify_github(github_headers(body, event), body, SECRET).wakes is wakes


def test_github_deliveries_are_refused_unsigned_mis_signed_or_without_an_id() -> None:
    body = github_issue_labeled()
    headers = github_headers(body)
    assert refusal(lambda: verify_github({**headers, "x-hub-signature-256": ""}, body, SECRET)) == "unsigned"
    assert refusal(lambda: verify_github(headers, body + b" ", SECRET)) == "bad_signature"  # the body changed
    assert refusal(lambda: verify_github(headers, body, SECRET + "x")) == "bad_signature"  # another secret
    sha1 = {**headers, "x-hub-signature-256": "sha1=" + signed(body)}
    assert refusal(lambda: verify_github(sha1, body, SECRET)) == "bad_signature"
    no_id = {k: v for k, v in headers.items() if k != "x-github-delivery"}
    assert refusal(lambda: verify_github(no_id, body, SECRET)) == "no_delivery_id"


# -- GitLab ------------------------------------------------------------------------------------------------------------


def test_a_gitlab_issue_event_with_the_secret_wakes() -> None:
    delivery = verify("gitlab", gitlab_headers(), gitlab_issue_hook(), SECRET, NOW)
    assert delivery.wakes and delivery.id == "13792a34-cac6-4fda-95a8-c58e00a3954e"


@pytest.mark.parametrize(
    ("event", "status", "wakes"),
    [
        ("Note Hook", None, True),
        ("Merge Request Hook", None, True),
        ("Pipeline Hook", "failed", True),
        ("Pipeline Hook", "running", False),
        ("Push Hook", None, False),
    ],
)
def test_gitlab_events_wake_when_they_may_change_what_is_ready(event: str, status: str | None, wakes: bool) -> None:
    body = json.dumps({"object_kind": "x", "object_attributes": {"status": status} if status else {}}).encode()
    assert verify_gitlab(gitlab_headers(event), body, SECRET).wakes is wakes


def test_gitlab_deliveries_are_refused_without_the_secret_or_an_id() -> None:
    body = gitlab_issue_hook()
    assert refusal(lambda: verify_gitlab({**gitlab_headers(), "x-gitlab-token": ""}, body, SECRET)) == "unsigned"
    assert refusal(lambda: verify_gitlab(gitlab_headers(token=SECRET[:-1]), body, SECRET)) == "bad_signature"
    no_id = {k: v for k, v in gitlab_headers().items() if k != "x-gitlab-event-uuid"}
    assert refusal(lambda: verify_gitlab(no_id, body, SECRET)) == "no_delivery_id"


# -- Linear ------------------------------------------------------------------------------------------------------------


def test_a_signed_linear_issue_update_within_the_window_wakes() -> None:
    body = linear_issue_update(sent=NOW - 5)
    delivery = verify("linear", linear_headers(body), body, SECRET, NOW)
    assert delivery.wakes and delivery.id == "234d1a4e-b617-4388-90fe-adc3633d6b72"


def test_a_linear_delivery_without_its_id_is_named_by_its_signature() -> None:
    body = linear_issue_update()
    headers = {k: v for k, v in linear_headers(body).items() if k != "linear-delivery"}
    assert verify_linear(headers, body, SECRET, NOW).id == signed(body)


def test_linear_deliveries_are_refused_unsigned_mis_signed_stale_or_malformed() -> None:
    body = linear_issue_update()
    headers = linear_headers(body)
    assert refusal(lambda: verify_linear({**headers, "linear-signature": ""}, body, SECRET, NOW)) == "unsigned"
    assert refusal(lambda: verify_linear(headers, body.replace(b"ENG-7", b"ENG-8"), SECRET, NOW)) == "bad_signature"
    old = linear_issue_update(sent=NOW - LINEAR_WINDOW - 1)
    assert refusal(lambda: verify_linear(linear_headers(old), old, SECRET, NOW)) == "stale"
    ahead = linear_issue_update(sent=NOW + LINEAR_WINDOW + 1)
    assert refusal(lambda: verify_linear(linear_headers(ahead), ahead, SECRET, NOW)) == "stale"
    untimed = b'{"type": "Issue"}'
    assert refusal(lambda: verify_linear(linear_headers(untimed), untimed, SECRET, NOW)) == "malformed"


# -- Jira --------------------------------------------------------------------------------------------------------------


def jira_issue_updated(event: str = "jira:issue_updated") -> bytes:
    return json.dumps(
        {
            "timestamp": int(NOW * 1000),
            "webhookEvent": event,
            "issue_event_type_name": "issue_generic",
            "user": {"accountId": "5b10a2844c20165700ede21g", "displayName": "Ann"},
            "issue": {"id": "10100", "key": "WID-1", "fields": {"summary": "Add notes", "labels": ["beflow"]}},
            "changelog": {"items": [{"field": "labels", "fromString": "", "toString": "beflow"}]},
        }
    ).encode()


def jira_headers(body: bytes, delivery: str = "a1b2c3d4-0000-4000-8000-webhook00001") -> dict[str, str]:
    return {
        "x-atlassian-webhook-identifier": delivery,
        "x-atlassian-webhook-flow": "Primary",
        "x-hub-signature": "sha256=" + signed(body),
        "content-type": "application/json",
    }


def test_a_signed_jira_issue_update_wakes_and_is_named_by_its_identifier() -> None:
    body = jira_issue_updated()
    delivery = verify("jira", jira_headers(body), body, SECRET, NOW)
    assert (delivery.forge, delivery.id, delivery.event, delivery.wakes) == (
        "jira",
        "a1b2c3d4-0000-4000-8000-webhook00001",
        "jira:issue_updated",
        True,
    )


@pytest.mark.parametrize(
    ("event", "wakes"),
    [
        ("jira:issue_created", True),
        ("comment_created", True),
        ("issuelink_created", True),
        ("comment_deleted", False),
        ("worklog_updated", False),
        ("sprint_started", False),
    ],
)
def test_jira_events_wake_when_they_may_change_what_is_ready(event: str, wakes: bool) -> None:
    body = jira_issue_updated(event)
    assert verify_jira(jira_headers(body), body, SECRET).wakes is wakes


def test_jira_deliveries_are_refused_unsigned_mis_signed_without_an_id_or_malformed() -> None:
    body = jira_issue_updated()
    headers = jira_headers(body)
    assert refusal(lambda: verify_jira({**headers, "x-hub-signature": ""}, body, SECRET)) == "unsigned"
    assert refusal(lambda: verify_jira(headers, body + b" ", SECRET)) == "bad_signature"
    sha1 = {**headers, "x-hub-signature": "sha1=" + hmac.new(SECRET.encode(), body, "sha1").hexdigest()}
    assert refusal(lambda: verify_jira(sha1, body, SECRET)) == "bad_signature"
    assert refusal(lambda: verify_jira(headers, body, SECRET + "x")) == "bad_signature"
    no_id = {k: v for k, v in headers.items() if k != "x-atlassian-webhook-identifier"}
    assert refusal(lambda: verify_jira(no_id, body, SECRET)) == "no_delivery_id"
    eventless = b'{"issue": {"key": "WID-1"}}'
    assert refusal(lambda: verify_jira(jira_headers(eventless), eventless, SECRET)) == "malformed"


# -- replays -----------------------------------------------------------------------------------------------------------


def test_a_delivery_id_is_a_replay_within_the_window_and_new_after_it() -> None:
    now = [0.0]
    replays = Replays(window=100, kept=10, clock=lambda: now[0])
    assert replays.first_time("github", "a")
    assert not replays.first_time("github", "a")
    assert replays.first_time("gitlab", "a")  # (each forge names its own deliveries)
    now[0] = 101
    assert replays.first_time("github", "a")


def test_the_replay_set_is_bounded() -> None:
    replays = Replays(window=1e9, kept=100, clock=lambda: 0.0)
    for n in range(1000):
        assert replays.first_time("github", f"delivery-{n}")
    assert len(replays) == 100
    assert not replays.first_time("github", "delivery-999")  # the newest are kept
