"""beflow's HTTP server, served for real on a socket (its own thread, as beside a watch) and asked with httpx: the
API against its own JSON Schema, the event stream and its resume, the guard (Host, Origin, token, actions)."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import jsonschema
import pytest
from pydantic import BaseModel

from beflow.app import open_project, open_tracker
from beflow.config import load_project
from beflow.records.record import RunRecord, new_run_id
from beflow.records.store import RunStore
from beflow.trackers.issue import utc_now
from beflow.web import api
from beflow.web.guard import TOKEN_ENV, Bind, load_token, parse_bind
from beflow.web.live import RING, Hub
from beflow.web.serving import Serving, beside
from tests.support import acp_schema
from tests.support.projects import config_file
from tests.support.waiting import eventually

TOKEN = "t" * 20 + "-secret-token"


@pytest.fixture
def project(repo: Path) -> Path:
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text(json.dumps({"http": {"actions": True}}) + "\n")
    tracker = open_tracker(load_project(config_file(repo)))
    tracker.create("<script>alert('title')</script> \x1b[31mred\x1b[0m " + "x" * 10_000, "a hostile title")
    tracker.create("Second issue", "plain")
    return repo


@contextmanager
def serving(project: Path, host: str = "127.0.0.1", hub: Hub | None = None) -> Iterator[tuple[Serving, Hub]]:
    hub = hub or Hub()
    with beside(load_project(config_file(project)), Bind(host, 0), hub, None) as served:
        yield served, hub


def client(served: Serving, **headers: str) -> httpx.Client:
    base = f"http://127.0.0.1:{served.bind.port}"
    return httpx.Client(base_url=base, headers=headers, timeout=10)


def schema_of(document: dict[str, Any], name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}", "components": document["components"]}


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def test_the_api_answers_in_the_shapes_its_openapi_document_gives(project: Path) -> None:
    with serving(project) as (served, _), client(served) as http:
        document = http.get("/api/v1/openapi.json").json()
        assert document["openapi"].startswith("3.1")
        state = http.get("/api/v1/state")
        assert state.status_code == 200
        jsonschema.validate(state.json(), schema_of(document, "State"))
        assert [q["issue"] for q in state.json()["queue"]] == ["1", "2"]
        issue = http.get("/api/v1/issues/1")
        jsonschema.validate(issue.json(), schema_of(document, "IssueDetail"))
        missing = http.get("/api/v1/issues/99")
        assert missing.status_code == 404
        jsonschema.validate(missing.json(), schema_of(document, "Problem"))
        refresh = http.post("/api/v1/refresh")
        assert refresh.status_code == 202
        jsonschema.validate(refresh.json(), schema_of(document, "Accepted"))
        # A run's record and its transcript pages.
        run = unmasked_record(project, "1", "nothing secret")
        record = http.get(f"/api/v1/runs/{run}")
        assert record.status_code == 200 and record.json()["outcome"] == "failed"
        jsonschema.validate(record.json(), schema_of(document, "RunRecord"))
        page = http.get(f"/api/v1/runs/{run}/transcript", params={"limit": 1})
        assert page.status_code == 200 and len(page.json()["lines"]) == 1
        jsonschema.validate(page.json(), schema_of(document, "TranscriptPage"))
        jsonschema.validate(
            http.get(f"/api/v1/runs/{run}/transcript?offset=5").json(), schema_of(document, "TranscriptPage")
        )
        # The actions, done and refused.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        done = http.post("/api/v1/issues/2/status", json={"status": "open", "note": "later"}, headers=auth)
        assert done.status_code == 200
        jsonschema.validate(done.json(), schema_of(document, "ActionDone"))
        jsonschema.validate(http.post("/api/v1/issues/2/retry", headers=auth).json(), schema_of(document, "ActionDone"))
        ended = http.post(f"/api/v1/runs/{run}/cancel", headers=auth)  # (the run has ended: nothing to cancel)
        assert ended.status_code == 409 and ended.json()["error"]["code"] == "conflict"
        jsonschema.validate(ended.json(), schema_of(document, "Problem"))
        assert http.get("/api/v1/issues/1").json()["issue"]["status"] == "ready"
        refused = http.post("/api/v1/issues/2/retry")
        assert refused.status_code == 401
        jsonschema.validate(refused.json(), schema_of(document, "Problem"))
        bad = http.post("/api/v1/issues/2/status", json={"status": "open", "bogus": 1}, headers=auth)
        assert bad.status_code == 400
        jsonschema.validate(bad.json(), schema_of(document, "Problem"))
        for path, method in (("/api/v1/runs/{id}", "get"), ("/api/v1/issues/{key}/status", "post")):
            assert document["paths"][path][method]["responses"]["200"]["content"]["application/json"]


def test_every_kind_of_event_has_its_schema_and_the_stream_answers_in_them(project: Path) -> None:
    from beflow.events import RUN_PAYLOADS, WATCH_PAYLOADS, RunEvent, WatchEvent

    events = [
        RunEvent.of("started", "r1", "1", attempt=1, branch="beflow/1"),
        RunEvent.of("activity", "r1", "1", latest="Read file"),
        RunEvent.of("progress", "r1", "1", text="halfway"),
        RunEvent.of("usage", "r1", "1", context_used=10, context_size=100, tokens=10),
        RunEvent.of("finished", "r1", "1", outcome="succeeded", commit="abc", changed=2, usage={"tokens": 3}),
        WatchEvent.of("dispatched", "1", attempt=1, round=0),
        WatchEvent.of("finished", "1", run="r1", outcome="succeeded"),
        WatchEvent.of("retry_scheduled", "1", attempt=2, delay=1.5),
        WatchEvent.of("skipped", "2", reason="claimed elsewhere"),
        WatchEvent.of("config_reloaded", path="/p/.beflow/config.json"),
        WatchEvent.of("error", message="GitHub is down"),
        WatchEvent.of("stopping", running=1),
        WatchEvent.of("budget_reached", message="spent", spent=1.0, limit=1.0, currency="USD"),
    ]
    hub = Hub(ring=len(events))
    with serving(project, hub=hub) as (served, _), client(served) as http:
        document = http.get("/api/v1/openapi.json").json()
        schemas = document["components"]["schemas"]
        assert {f"Run{k.title().replace('_', '')}Event" for k in RUN_PAYLOADS} <= set(schemas)
        assert {f"Watch{k.title().replace('_', '')}Event" for k in WATCH_PAYLOADS} <= set(schemas)
        stream = document["paths"]["/api/v1/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
        assert stream["schema"] == {"$ref": "#/components/schemas/Event"}
        hub.publish({"event": "dispatched", "issue": "0", "time": 1.0, "attempt": 1})  # (pushed out of the ring)
        for event in events:
            hub.publish(event.to_json())
        seen = read_events(http, {"Last-Event-ID": "0"}, len(events) + 1)
    assert seen[0][1]["event"] == "notice"  # the server's own: one event is no longer kept
    jsonschema.validate(seen[0][1], schema_of(document, "MissedNotice"))
    for (_, data), event in zip(seen[1:], events, strict=True):
        side = "Run" if isinstance(event, RunEvent) else "Watch"
        jsonschema.validate(data, schema_of(document, f"{side}{event.type.title().replace('_', '')}Event"))
        jsonschema.validate(data, schema_of(document, "Event"))
    # The schemas hold the payloads as they are: a field no emitter sets is not an event.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**seen[6][1], "bogus": 1}, schema_of(document, "Event"))


def test_the_event_stream_numbers_events_and_resumes_after_last_event_id(project: Path) -> None:
    with serving(project) as (served, hub), client(served) as http:
        for n in range(5):
            hub.publish({"event": "dispatched", "issue": str(n), "time": 1.0, "attempt": 1})
        seen = read_events(http, {"Last-Event-ID": "0"}, 5)
        assert [e["issue"] for _, e in seen] == ["0", "1", "2", "3", "4"]
        ids = [int(i) for i, _ in seen]
        assert ids == sorted(ids) and len(set(ids)) == 5
        resumed = read_events(http, {"Last-Event-ID": str(ids[2])}, 2)
        assert [e["issue"] for _, e in resumed] == ["3", "4"]


def test_a_client_that_resumes_from_before_the_ring_is_told_what_it_missed(project: Path) -> None:
    hub = Hub(ring=3)
    with serving(project, hub=hub) as (served, _), client(served) as http:
        for n in range(6):
            hub.publish({"event": "dispatched", "issue": str(n), "time": 1.0})
        seen = read_events(http, {"Last-Event-ID": "1"}, 4)
        assert seen[0][1]["event"] == "notice" and "2 events are no longer kept" in seen[0][1]["message"]
        assert [e["issue"] for _, e in seen[1:]] == ["3", "4", "5"]


def test_event_streams_are_bounded(project: Path) -> None:
    hub = Hub(max_clients=1)
    with serving(project, hub=hub) as (served, _), client(served) as http:
        hub.publish({"event": "dispatched", "issue": "1", "time": 1.0})
        with http.stream("GET", "/api/v1/events", headers={"Last-Event-ID": "0"}) as first:
            assert first.status_code == 200
            lines = first.iter_lines()  # (held: a dropped iterator closes the stream)
            assert next(lines) == ": beflow events"
            second = httpx.get(f"http://127.0.0.1:{served.bind.port}/api/v1/events", timeout=10)
            assert second.status_code == 503
            assert second.json()["error"]["code"] == "too_many_clients"


def test_secrets_are_masked_in_what_the_server_sends(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "ghp_" + "s3cr3t" * 6
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    config_file(project).write_text(json.dumps({"tracker": {"kind": "github", "repo": "o/r"}}))
    hub = Hub()
    with serving(project, hub=hub) as (served, _), client(served) as http:
        hub.publish({"event": "error", "issue": None, "time": 1.0, "message": f"GitHub said no to {secret}"})
        (_, event), *_ = read_events(http, {"Last-Event-ID": "0"}, 1)
        assert secret not in json.dumps(event) and "GitHub said no to" in event["message"]
        assert secret not in http.get("/api/v1/openapi.json").text


def test_the_page_shows_a_hostile_title_as_text(project: Path) -> None:
    with serving(project) as (served, _), client(served) as http:
        page = http.get("/")
        assert page.status_code == 200
        assert "<script>alert" not in page.text
        assert "&lt;script&gt;alert(&#39;title&#39;)&lt;/script&gt;" in page.text
        assert "\x1b" not in page.text
        assert "more characters]" in page.text or "x" * 10_000 not in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]


# -- the guard --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1:1", ""])
def test_a_forged_host_is_refused(project: Path, host: str) -> None:
    with serving(project) as (served, _), client(served) as http:
        answer = http.get("/api/v1/state", headers={"Host": host})
        assert answer.status_code in (400, 421)
        if answer.status_code == 421:
            assert answer.json()["error"]["code"] == "bad_host"


def test_an_api_path_or_method_that_does_not_exist_is_answered_as_every_api_error_is(project: Path) -> None:
    with serving(project) as (served, _), client(served) as http:
        problem = schema_of(http.get("/api/v1/openapi.json").json(), "Problem")
        missing = http.get("/api/v1/nope")
        wrong = http.delete("/api/v1/state")
        page = http.get("/nope")

    assert (missing.status_code, missing.headers["content-type"]) == (404, "application/json")
    assert missing.json() == {
        "error": {
            "code": "not_found",
            "message": "no endpoint /api/v1/nope",
            "fix": "GET /api/v1/openapi.json describes every endpoint (`beflow docs dashboard` too).",
        }
    }
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (405, "method")
    assert wrong.json()["error"]["message"] == "/api/v1/state does not take DELETE"
    assert "GET" in wrong.headers["allow"]
    for answer in (missing, wrong):
        jsonschema.validate(answer.json(), problem)
    assert (page.status_code, page.text) == (404, "Not Found")  # a page's 404 is not the API's


def test_an_issue_that_does_not_exist_is_not_found_in_words_that_name_no_path_of_the_server(project: Path) -> None:
    with serving(project) as (served, _), client(served) as http:
        answer = http.get("/api/v1/issues/999")

    error = answer.json()["error"]
    assert (answer.status_code, error["code"]) == (404, "not_found")
    assert error["message"].startswith("no issue 999 in .beflow/issues")  # as MCP over HTTP says it
    assert str(project) not in answer.text


def test_a_foreign_origin_is_refused(project: Path) -> None:
    with serving(project) as (served, _), client(served) as http:
        answer = http.get("/api/v1/state", headers={"Origin": "http://evil.example"})
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "bad_origin"
        own = http.get("/api/v1/state", headers={"Origin": f"http://127.0.0.1:{served.bind.port}"})
        assert own.status_code == 200


def test_off_loopback_every_request_needs_the_token(project: Path) -> None:
    with serving(project, host="0.0.0.0") as (served, _), client(served) as http:
        assert served.policy.token_required
        refused = http.get("/api/v1/state")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        assert http.get("/api/v1/state", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
        assert http.get("/", follow_redirects=False).status_code == 401
        assert http.get("/api/v1/state", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        # The page's link: the token becomes a cookie, and the page answers with it.
        landing = http.get(f"/?token={TOKEN}", follow_redirects=False)
        assert landing.status_code == 303 and landing.headers["location"] == "/"
        assert http.get("/").status_code == 200


def test_a_401_says_a_bearer_token_is_what_it_takes_and_where_the_resource_metadata_is(project: Path) -> None:
    """RFC 6750's challenge, and RFC 9728's metadata (open to all: it is read before a client has the token), so that
    an MCP client asks for the token instead of looking for an OAuth server there is none of."""
    with serving(project, host="0.0.0.0") as (served, _), client(served) as http:
        base = f"http://127.0.0.1:{served.bind.port}"
        metadata = f"{base}/.well-known/oauth-protected-resource"
        challenges = {
            path: http.post(path, json={}, headers=headers).headers.get("www-authenticate")
            for path, headers in (
                ("/mcp", {}),
                ("/mcp/issues/1", {"Authorization": "Bearer wrong-token-0123456789"}),
                ("/api/v1/refresh", {}),
            )
        }
        assert challenges == {
            "/mcp": f'Bearer realm="beflow", resource_metadata="{metadata}/mcp"',
            "/mcp/issues/1": f'Bearer realm="beflow", resource_metadata="{metadata}/mcp/issues/1", '
            'error="invalid_token", error_description="not this server\'s token"',
            "/api/v1/refresh": f'Bearer realm="beflow", resource_metadata="{metadata}"',
        }
        described = {
            path: http.get(f"/.well-known/oauth-protected-resource{path}").json()
            for path in ("", "/mcp", "/mcp/issues/1")
        }
        assert described == {
            path: {
                "resource": f"{base}{path or '/'}",
                "resource_name": "beflow",
                "bearer_methods_supported": ["header"],
            }
            for path in ("", "/mcp", "/mcp/issues/1")
        }
        assert (
            "/.well-known/oauth-protected-resource/mcp"
            in http.get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()["paths"]
        )


def test_on_loopback_mcp_still_needs_the_token(project: Path) -> None:
    with serving(project) as (served, _), client(served) as http:
        assert http.get("/api/v1/state").status_code == 200
        assert http.post("/mcp", json={}).status_code == 401


def test_an_action_needs_the_token_and_the_servers_own_origin(project: Path) -> None:
    with serving(project) as (served, _), client(served) as http:
        body = {"status": "open", "note": "not now"}
        assert http.post("/api/v1/issues/2/status", json=body).status_code == 401
        own = f"http://127.0.0.1:{served.bind.port}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        cross = http.post("/api/v1/issues/2/status", json=body, headers={**auth, "Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403
        assert http.get("/api/v1/issues/2").json()["issue"]["status"] == "ready"
        done = http.post("/api/v1/issues/2/status", json=body, headers={**auth, "Origin": own})
        assert done.status_code == 200, done.text
        assert done.json()["operation"] == "issue.set_status"
        assert http.get("/api/v1/issues/2").json()["issue"]["status"] == "open"
        assert http.post("/api/v1/issues/2/retry", headers=auth).json()["result"]["status"] == "ready"


def test_actions_are_off_unless_configured(project: Path) -> None:
    config_file(project).write_text("{}\n")
    with serving(project) as (served, _), client(served) as http:
        answer = http.post("/api/v1/issues/2/retry", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "actions_off"


def test_request_bodies_are_bounded(project: Path) -> None:
    with serving(project) as (served, _), client(served) as http:
        big = http.post(
            "/api/v1/issues/2/status",
            content=b"x" * (1 << 20),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        assert big.status_code == 413


# -- binding and the token -----------------------------------------------------------------------------------------


def test_bind_addresses_default_to_loopback() -> None:
    assert parse_bind("8765") == Bind("127.0.0.1", 8765)
    assert parse_bind("0.0.0.0:80") == Bind("0.0.0.0", 80)
    assert parse_bind("[::1]:9000") == Bind("::1", 9000)
    assert parse_bind("8765").loopback and not parse_bind("0.0.0.0:1").loopback
    for bad in ("", "host:", "99999", "a:b"):
        with pytest.raises(Exception, match="is not \\[HOST:\\]PORT"):
            parse_bind(bad)


def test_a_token_is_made_once_and_stored_for_the_user_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV)
    first = load_token()
    assert first.created and first.path is not None
    assert stat.S_IMODE(os.stat(first.path).st_mode) == 0o600
    again = load_token()
    assert not again.created and again.value == first.value


def read_events(http: httpx.Client, headers: dict[str, str], count: int) -> list[tuple[str, dict[str, Any]]]:
    """The first ``count`` events of ``/api/v1/events``: (id, event)."""
    found: list[tuple[str, dict[str, Any]]] = []
    current: dict[str, str] = {}
    with http.stream("GET", "/api/v1/events", headers=headers) as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if not line:
                if "data" in current:
                    found.append((current.get("id", ""), json.loads(current["data"])))
                    if len(found) == count:
                        return found
                current = {}
                continue
            name, _, value = line.partition(":")
            current[name] = value.removeprefix(" ")
    return found


@pytest.mark.slow  # it waits out the server's 5 s write timeout
def test_a_client_that_does_not_read_is_dropped_and_never_holds_up_the_watch(project: Path) -> None:
    hub = Hub()
    with serving(project, hub=hub) as (served, _):
        stalled = socket.create_connection(("127.0.0.1", served.bind.port))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(f"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:{served.bind.port}\r\n\r\n".encode())
        eventually(lambda: hub.clients == 1, "the stalled client subscribed")
        # It never reads: what the watch hands over still takes no time, and the ring stays bounded.
        started = time.perf_counter()
        for n in range(3000):
            hub.publish({"event": "activity", "issue": "1", "time": 1.0, "latest": f"{n} " + "x" * 2000})
        assert time.perf_counter() - started < 2.0
        assert len(hub.since(0)[1]) <= RING
        eventually(lambda: hub.clients == 0, "the stalled client was let go", timeout=30)
        stalled.close()


def test_the_state_carries_the_head_of_a_long_queue_and_counts_it_all(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api, "MAX_QUEUE", 3)  # (100 in use)
    tracker = open_tracker(load_project(config_file(project)))
    for n in range(3):
        tracker.create(f"queued {n}", "")
    with serving(project) as (served, _), client(served) as http:
        state = http.get("/api/v1/state").json()
    assert [q["issue"] for q in state["queue"]] == ["1", "2", "3"] and state["totals"]["queued"] == 5


def test_the_hub_keeps_the_issues_the_watch_skipped_until_a_run_of_them_starts() -> None:
    hub = Hub()
    claimed = "issue 7 is claimed by ann (pid 9 on box since …)"
    hub.publish({"event": "skipped", "issue": "7", "reason": claimed})
    hub.publish({"event": "skipped", "issue": "8", "reason": "no longer ready"})
    hub.publish({"event": "dispatched", "issue": "8", "attempt": 1})
    assert {key: why for key, (why, _) in hub.skips().items()} == {"7": claimed}
    for n in range(100):
        hub.publish({"event": "skipped", "issue": str(n + 100), "reason": "x"})
    assert len(hub.skips()) == 50 and "199" in hub.skips()  # bounded, the newest kept
    hub.forget({"199", "nope"})  # (an issue the state shows as unreadable)
    assert "199" not in hub.skips() and len(hub.skips()) == 49


def test_an_issues_page_names_who_holds_its_claim(project: Path) -> None:
    claim = open_tracker(load_project(config_file(project))).claim("2", "<b>ann</b>")
    try:
        with serving(project) as (served, _), client(served) as http:
            page = http.get("/issues/2").text
    finally:
        claim.release()
    assert "claimed by &lt;b&gt;ann&lt;/b&gt; (pid" in page


def edit_transcript() -> list[str]:
    """A transcript of file edits as an agent on the ACP SDK sends them: a new file, a change whose text is
    hostile markup and terminal escapes, the same diff sent again when the call ends, and a huge edit."""
    from acp import schema

    def update(value: BaseModel) -> str:
        params = schema.SessionNotification(session_id="s", update=value)
        line = {"jsonrpc": "2.0", "method": "session/update", "params": params.model_dump(mode="json", by_alias=True)}
        return json.dumps(line)

    def diff(path: str, old: str | None, new: str) -> schema.FileEditToolCallContent:
        return schema.FileEditToolCallContent(type="diff", path=path, old_text=old, new_text=new)

    hostile = "<script>window.__pwned=1</script>\x1b[31mred\x1b[0m</pre><img src=x onerror=alert(1)>"
    changed = diff("/w/<b>app</b>.py", "a = 1\nb = 2\n", f"a = 1\nb = '{hostile}'\n")
    huge = diff("/w/big.txt", None, "line\n" * 100_000)
    return [
        update(schema.ToolCallStart(session_update="tool_call", tool_call_id="t1", title="Write new.py", kind="edit")),
        update(
            schema.ToolCallProgress(
                session_update="tool_call_update",
                tool_call_id="t1",
                status="completed",
                content=[diff("/w/new.py", None, "print('hi')\n")],
            )
        ),
        update(
            schema.ToolCallStart(
                session_update="tool_call", tool_call_id="t2", title="Edit app.py", kind="edit", content=[changed]
            )
        ),
        update(
            schema.ToolCallProgress(
                session_update="tool_call_update", tool_call_id="t2", status="completed", content=[changed]
            )
        ),
        update(schema.ToolCallStart(session_update="tool_call", tool_call_id="t3", title="Write big", content=[huge])),
    ]


def test_the_run_page_shows_file_edits_as_unified_diffs_and_their_text_as_text(project: Path) -> None:
    lines = edit_transcript()
    assert {acp_schema.message(line) for line in lines} == {"session/update"}  # ACP as its SDK defines it
    store = RunStore(project)
    record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="a", started_at=utc_now())
    store.create(record, "prompt")
    store.write(record.id, "transcript.jsonl", "\n".join(lines) + "\n")
    with serving(project) as (served, _), client(served) as http:
        page = http.get(f"/runs/{record.id}").text
        transcript = http.get(f"/api/v1/runs/{record.id}/transcript").json()
    diffs = [line["text"] for line in transcript["lines"] if line["kind"] == "diff"]
    assert len(diffs) == 3  # the diff sent twice for one call is shown once
    assert diffs[0].splitlines() == ["--- /dev/null", "+++ /w/new.py", "@@ -0,0 +1 @@", "+print('hi')"]
    assert "-b = 2" in diffs[1].splitlines() and diffs[1].splitlines()[-1].startswith("+b = '<script>")
    assert "too large to show: a new file → 100,000 lines" in diffs[2]
    # On the page, every line of a diff is a line of text: the markup in it is characters, the escapes are gone.
    assert '<span class="d-add">+print(&#39;hi&#39;)</span>' in page
    assert '<span class="d-del">-b = 2</span>' in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;red&lt;/pre&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>window" not in page and "<img" not in page and "\x1b" not in page
    assert '<span class="d-file">+++ /w/&lt;b&gt;app&lt;/b&gt;.py</span>' in page


def test_the_state_lists_an_issue_the_tracker_cannot_read_once_with_why(  # type: ignore[no-untyped-def]
    auto_project, github, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.system import threads
    from beflow.watch.dispatcher import Dispatcher
    from beflow.web.live import WatchSource
    from tests.support.github import TOKEN as GITHUB_TOKEN

    monkeypatch.setenv("GITHUB_TOKEN", GITHUB_TOKEN)
    auto_project.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 30})
    github.add_issue("Good", labels=["beflow", "beflow:ready"])
    github.add_issue("Hostile", labels=["beflow", "beflow:ready", "two\nlines"])
    project = load_project(auto_project.config_path)
    hub = Hub()

    async def scenario() -> dict[str, Any]:
        dispatcher = Dispatcher(project, opens=open_project, listener=lambda event: hub.publish(event.to_json()))
        source = WatchSource(dispatcher, hub)
        source.attach()
        await threads.blocking(dispatcher._survey, False)  # one look at the tracker, as a tick's
        with beside(project, Bind("127.0.0.1", 0), hub, source) as served:
            url = f"http://127.0.0.1:{served.bind.port}/api/v1/state"
            got: dict[str, Any] = await anyio.to_thread.run_sync(lambda: httpx.get(url, timeout=30).json())
            return got

    state = anyio.run(scenario)
    assert [q["issue"] for q in state["queue"]] == ["1"]
    (held,) = state["held"]  # named as unreadable, not again as skipped
    assert held["issue"] == "2" and held["held"]["check"] == "unreadable" and held["held"]["fix"]
    assert "issue 2 in octo/hello cannot be read: labels" in held["held"]["message"]


def test_the_state_lists_an_issue_held_for_its_blockers_with_why(auto_project) -> None:  # type: ignore[no-untyped-def]
    from beflow.system import threads
    from beflow.watch.dispatcher import Dispatcher
    from beflow.web.live import WatchSource

    first = auto_project.new_issue("reply: x", title="first")
    second = auto_project.new_issue("reply: x", title="second")
    path = auto_project.issue(second).path
    path.write_text(path.read_text().replace("priority: 2", f"priority: 2\nblocked_by: [{first}]"))
    project = load_project(auto_project.config_path)
    hub = Hub()

    async def scenario() -> dict[str, Any]:
        dispatcher = Dispatcher(project, opens=open_project, listener=lambda event: hub.publish(event.to_json()))
        source = WatchSource(dispatcher, hub)
        source.attach()
        await threads.blocking(dispatcher._survey, False)  # one look at the tracker, as a tick's
        with beside(project, Bind("127.0.0.1", 0), hub, source) as served:
            url = f"http://127.0.0.1:{served.bind.port}/api/v1/state"
            got: dict[str, Any] = await anyio.to_thread.run_sync(lambda: httpx.get(url, timeout=30).json())
            return got

    state = anyio.run(scenario)
    assert [q["issue"] for q in state["queue"]] == [first]
    (held,) = state["held"]
    assert held["issue"] == second and held["held"]["check"] == "blocked"
    assert held["held"]["message"] == f"blocked by {first} (ready)" and "done or closed" in held["held"]["fix"]


def test_a_lane_in_a_review_round_says_which_round(project: Path) -> None:
    from beflow.system import threads
    from beflow.watch.dispatcher import Dispatcher
    from beflow.watch.lanes import Running
    from beflow.web.live import WatchSource

    loaded = load_project(project / ".beflow" / "config.json")
    hub = Hub()

    async def scenario() -> tuple[dict[str, Any], str]:
        dispatcher = Dispatcher(loaded, opens=open_project)
        dispatcher.running["1"] = Running("1", 1, anyio.CancelScope(), dispatcher.tracker, round=2)
        source = WatchSource(dispatcher, hub)
        source.attach()
        await threads.blocking(lambda: None)
        with beside(loaded, Bind("127.0.0.1", 0), hub, source) as served:
            base = f"http://127.0.0.1:{served.bind.port}"
            state = await anyio.to_thread.run_sync(lambda: httpx.get(f"{base}/api/v1/state", timeout=30).json())
            page = await anyio.to_thread.run_sync(lambda: httpx.get(f"{base}/", timeout=30).text)
            return state, page

    state, page = anyio.run(scenario)
    (lane,) = state["lanes"]
    assert lane["issue"] == "1" and lane["round"] == 2
    assert "round 2, attempt 1" in page


def test_the_tracker_is_unreachable_only_when_the_tracker_failed_and_reachable_again_after_a_good_look(  # type: ignore[no-untyped-def]
    auto_project, github, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.system import threads
    from beflow.watch.dispatcher import Dispatcher
    from beflow.web.live import WatchSource
    from tests.support.github import TOKEN as GITHUB_TOKEN

    monkeypatch.setenv("GITHUB_TOKEN", GITHUB_TOKEN)
    auto_project.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 30})
    github.add_issue("Good", labels=["beflow", "beflow:ready"])
    project = load_project(auto_project.config_path)
    hub = Hub()

    async def scenario() -> list[dict[str, Any]]:
        dispatcher = Dispatcher(project, opens=open_project, listener=lambda event: hub.publish(event.to_json()))
        source = WatchSource(dispatcher, hub)
        source.attach()
        seen: list[dict[str, Any]] = []
        with beside(project, Bind("127.0.0.1", 0), hub, source) as served:
            url = f"http://127.0.0.1:{served.bind.port}/api/v1/state"

            async def look() -> None:
                await threads.blocking(dispatcher._survey, False)  # one look at the tracker, as a tick's
                got = await anyio.to_thread.run_sync(lambda: httpx.get(url, timeout=30).json())
                seen.append(got["health"])

            await look()  # the tracker answered
            auto_project.config_path.write_text("{ not json")  # a broken edit: the reload fails, loudly
            await look()
            github.fail(503, times=50)  # GitHub is down: the tracker's look fails
            await look()
            github.faults.clear()  # back: the next look succeeds
            await look()
        return seen

    good, bad_config, down, back = anyio.run(scenario)
    assert good["tracker_reachable"] is True and good["errors"] == []
    assert any("config not reloaded" in e for e in bad_config["errors"])
    assert bad_config["tracker_reachable"] is True  # a config that did not reload is not the tracker's failing
    assert len(down["errors"]) > len(bad_config["errors"]) and down["tracker_reachable"] is False
    assert back["tracker_reachable"] is True


OPS = "http://ops.example:3000"  # a page of another origin, which http.origins names


def with_origins(project: Path) -> None:
    config_file(project).write_text(json.dumps({"http": {"actions": True, "origins": [OPS]}}) + "\n")


def test_an_origin_the_config_names_gets_cors_and_acts_with_the_token_only(project: Path) -> None:
    with_origins(project)
    with serving(project) as (served, hub), client(served, Origin=OPS) as http:
        state = http.get("/api/v1/state")
        assert state.status_code == 200
        assert state.headers["access-control-allow-origin"] == OPS and "Origin" in state.headers["vary"]
        assert "access-control-allow-credentials" not in state.headers  # the token goes in a header, never a cookie
        # The browser's preflight of an action: no token on it, told the methods and headers it may send.
        preflight = http.options(
            "/api/v1/issues/2/status",
            headers={"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"},
        )
        assert preflight.status_code == 204, preflight.text
        assert preflight.headers["access-control-allow-origin"] == OPS
        assert {m.strip() for m in preflight.headers["access-control-allow-methods"].split(",")} >= {"GET", "POST"}
        allowed = {h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
        assert allowed == {"authorization", "content-type", "last-event-id"}
        assert "access-control-allow-credentials" not in preflight.headers
        body = {"status": "open", "note": "from ops"}
        # The action needs the token as a bearer token: the server's cookie a browser sends along does not count.
        refused = http.post("/api/v1/issues/2/status", json=body, headers={"Cookie": f"beflow_token={TOKEN}"})
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == OPS
        assert http.get("/api/v1/issues/2").json()["issue"]["status"] == "ready"
        done = http.post(
            "/api/v1/issues/2/status",
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}", "Sec-Fetch-Site": "cross-site"},
        )
        assert done.status_code == 200, done.text
        assert done.headers["access-control-allow-origin"] == OPS
        assert http.get("/api/v1/issues/2").json()["issue"]["status"] == "open"
        # The event stream too (an EventSource of the other origin's page reads it).
        hub.publish({"event": "dispatched", "issue": "1", "time": 1.0, "attempt": 1})
        with http.stream("GET", "/api/v1/events", headers={"Last-Event-ID": "0"}) as stream:
            assert stream.status_code == 200 and stream.headers["access-control-allow-origin"] == OPS


def test_an_origin_the_config_does_not_name_gets_no_cors_and_cannot_act(project: Path) -> None:
    with_origins(project)
    evil = "http://evil.example"
    with serving(project) as (served, _), client(served, Origin=evil) as http:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for answer in (
            http.get("/api/v1/state"),
            http.options(
                "/api/v1/issues/2/status",
                headers={"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"},
            ),
            http.post("/api/v1/issues/2/status", json={"status": "open"}, headers=auth),
            http.post("/api/v1/issues/2/retry", headers={**auth, "Origin": "null"}),
        ):
            assert answer.status_code == 403, answer.text
            assert not [h for h in answer.headers if h.lower().startswith("access-control-")]
    with serving(project) as (served, _), client(served) as http:
        assert http.get("/api/v1/issues/2").json()["issue"]["status"] == "ready"


def test_off_loopback_a_configured_origin_still_needs_the_token_past_its_preflight(project: Path) -> None:
    with_origins(project)
    with serving(project, host="0.0.0.0") as (served, _), client(served, Origin=OPS) as http:
        preflight = http.options(
            "/api/v1/state",
            headers={"Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"},
        )
        assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == OPS
        refused = http.get("/api/v1/state")
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == OPS
        assert http.get("/api/v1/state", headers={"Cookie": f"beflow_token={TOKEN}"}).status_code == 401
        assert http.get("/api/v1/state", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


# -- masking ---------------------------------------------------------------------------------------------------


MASK = "••••"


def unmasked_record(project: Path, key: str, *secrets: str) -> str:
    """A run record, progress and transcript holding ``secrets`` as they are (as a record beflow did not write
    would): what the server shows of it is masked all the same."""
    store = RunStore(project)
    said = " ".join(secrets)
    record = RunRecord(
        id=new_run_id(key), issue=key, mode="auto", agent="a", started_at=utc_now(), title=f"run of {said}"
    )
    store.create(record, f"prompt {said}")
    transcript = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "s",
            "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"I saw {said}"}},
        },
    }
    store.write(record.id, "transcript.jsonl", json.dumps(transcript) + "\n")
    record.finished_at, record.outcome, record.stop_reason = utc_now(), "failed", f"failed on {said}"
    store.write(record.id, "run.json", record.model_dump_json())
    return record.id


def everything_shown(http: httpx.Client, key: str, run: str) -> dict[str, str]:
    shown = {
        path: http.get(path).text
        for path in (
            "/api/v1/state",
            "/",
            f"/runs/{run}",
            f"/api/v1/runs/{run}",
            f"/api/v1/runs/{run}/transcript",
            f"/issues/{key}",
            f"/api/v1/issues/{key}",
        )
    }
    shown["events"] = json.dumps(read_events(http, {"Last-Event-ID": "0"}, 1), ensure_ascii=False)
    return shown


def test_an_injected_servers_value_and_the_trackers_token_are_masked_everywhere_the_server_shows(  # type: ignore[no-untyped-def]
    auto_project, github, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.github import TOKEN as GITHUB_TOKEN
    from tests.support.projects import SECRET_ENV, SECRET_HEADER

    monkeypatch.setenv("GITHUB_TOKEN", GITHUB_TOKEN)
    auto_project.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 30})
    secrets = (SECRET_ENV, SECRET_HEADER, GITHUB_TOKEN)
    github.add_issue(f"Fix {' '.join(secrets)}", labels=["beflow", "beflow:ready"])
    run = unmasked_record(auto_project.directory, "1", *secrets)
    hub = Hub()
    with serving(auto_project.directory, hub=hub) as (served, _), client(served) as http:
        hub.publish({"event": "error", "issue": "1", "time": 1.0, "message": f"no {' '.join(secrets)}"})
        shown = everything_shown(http, "1", run)
    for where, text in shown.items():
        assert MASK in text, where  # (where a secret was, the mask is)
        assert [s for s in secrets if s in text] == [], where


def test_a_secret_a_config_reload_adds_is_masked_from_then_on(project: Path) -> None:
    from beflow.system import threads
    from beflow.watch.dispatcher import Dispatcher
    from beflow.web.live import WatchSource
    from tests.support.projects import MCP_JSON, SECRET_ENV

    (project / ".mcp.json").write_text(json.dumps(MCP_JSON) + "\n")
    loaded = load_project(config_file(project))  # (injection off: the servers' values are nobody's secret yet)
    key = open_tracker(loaded).create(f"Uses {SECRET_ENV}", "").key
    run = unmasked_record(project, key, SECRET_ENV)
    hub = Hub()

    async def scenario() -> tuple[dict[str, str], dict[str, str]]:
        dispatcher = Dispatcher(loaded, opens=open_project, listener=lambda event: hub.publish(event.to_json()))
        source = WatchSource(dispatcher, hub)
        source.attach()
        await threads.blocking(dispatcher._survey, False)
        hub.publish({"event": "error", "issue": key, "time": 1.0, "message": f"no {SECRET_ENV}"})
        with beside(loaded, Bind("127.0.0.1", 0), hub, source) as served, client(served) as http:
            before = await anyio.to_thread.run_sync(everything_shown, http, key, run)
            config = json.loads(config_file(project).read_text())
            config_file(project).write_text(json.dumps({**config, "mcp": {"enabled": True}}) + "\n")
            await threads.blocking(dispatcher._survey, False)  # the watch reloads its config
            assert hub.config_reloaded is not None
            after = await anyio.to_thread.run_sync(everything_shown, http, key, run)
        return before, after

    before, after = anyio.run(scenario)
    assert SECRET_ENV in before["/api/v1/state"]  # (not a secret of this project before the reload)
    for where, text in after.items():
        assert SECRET_ENV not in text and MASK in text, where


# -- the lists -------------------------------------------------------------------------------------------------


def some_runs(project: Path, key: str, count: int) -> list[str]:
    store = RunStore(project)
    made = []
    for n in range(count):
        record = RunRecord(id=new_run_id(key), issue=key, mode="auto", agent="a", started_at=utc_now(), title=f"r{n}")
        store.create(record, "prompt")
        made.append(record.id)
    return made


def test_the_issues_and_the_runs_are_listed_page_by_page_through_the_registry(project: Path) -> None:
    from beflow.trackers import Status

    tracker = open_tracker(load_project(config_file(project)))
    for n in range(10):
        tracker.create(f"issue {n}", "", status=Status.OPEN if n % 2 else Status.READY)
    runs = {"1": some_runs(project, "1", 7), "2": some_runs(project, "2", 3)}
    with serving(project) as (served, _), client(served) as http:
        document = http.get("/api/v1/openapi.json").json()
        pages = [http.get("/api/v1/issues", params={"per_page": 5, "page": n}).json() for n in (1, 2, 3, 4)]
        for page in pages:
            jsonschema.validate(page, schema_of(document, "IssuePage"))
        assert [p["total"] for p in pages] == [12] * 4 and pages[0]["pages"] == 3
        keys = [i["key"] for p in pages for i in p["issues"]]
        assert keys == [str(n) for n in range(1, 13)]  # by key, each once, the last page past the end empty
        assert [len(p["issues"]) for p in pages] == [5, 5, 2, 0]
        ready = http.get("/api/v1/issues", params={"status": "ready"}).json()
        assert ready["total"] == 7 and {i["status"] for i in ready["issues"]} == {"ready"}
        assert ready["per_page"] == api.PER_PAGE
        wrong = http.get("/api/v1/issues", params={"status": "redy"})
        assert wrong.status_code == 400
        jsonschema.validate(wrong.json(), schema_of(document, "Problem"))
        assert http.get("/api/v1/issues", params={"per_page": 10**6}).json()["per_page"] == api.MAX_PER_PAGE

        listed: list[str] = []
        page: dict[str, Any] = {"next": 1}
        while page["next"] is not None:
            page = http.get("/api/v1/runs", params={"per_page": 4, "page": page["next"]}).json()
            jsonschema.validate(page, schema_of(document, "RunPage"))
            listed += [r["id"] for r in page["runs"]]
        assert page["page"] == 3 and len(listed) == 10 and set(listed) == set(runs["1"] + runs["2"])
        starts = [r.split("-")[0] + r.split("-")[1] for r in listed]
        assert starts == sorted(starts, reverse=True)  # newest first
        of_two = http.get("/api/v1/runs", params={"issue": "2", "per_page": 2}).json()
        assert of_two["next"] == 2 and {r["issue"] for r in of_two["runs"]} == {"2"}
        # The pages link each other, and the live page links them.
        issues_page = http.get("/issues", params={"per_page": 5, "page": 2}).text
        assert 'href="/issues?page=1&amp;per_page=5"' in issues_page
        assert 'href="/issues?page=3&amp;per_page=5"' in issues_page
        assert issues_page.count('<tr data-issue="') == 5
        runs_page = http.get("/runs", params={"issue": "1", "per_page": 4}).text
        assert runs_page.count('<tr data-run="') == 4 and 'href="/runs?issue=1&amp;page=2&amp;per_page=4"' in runs_page
        home = http.get("/").text
        assert 'href="/issues"' in home and 'href="/runs"' in home


def test_the_state_keeps_the_recent_runs_until_a_run_finishes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from beflow.web import views

    monkeypatch.setattr(views, "RECENT_FOR", 600.0)  # (2 s in use: a run another process finished)
    reads: list[int] = []
    records = RunStore.records
    monkeypatch.setattr(RunStore, "records", lambda self, *a, **k: reads.append(1) or records(self, *a, **k))
    hub = Hub()
    with serving(project, hub=hub) as (served, _), client(served) as http:
        assert http.get("/api/v1/state").json()["recent"] == []
        before = len(reads)
        run = unmasked_record(project, "1", "nothing secret")
        for _ in range(5):  # the page reads the state after every event: the records are not read again each time
            assert http.get("/api/v1/state").json()["recent"] == []
        assert len(reads) == before
        hub.publish({"event": "finished", "run": run, "issue": "1", "time": 1.0, "outcome": "failed"})
        assert [r["id"] for r in http.get("/api/v1/state").json()["recent"]] == [run]  # a run finished: read again


def test_a_lanes_tail_is_the_transcripts_last_lines_read_from_its_end_and_not_again_while_it_is_unchanged(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.agent import acpx
    from beflow.web.guard import Policy
    from beflow.web.server import Server
    from beflow.web.transcripts import TAIL_LINES, Transcripts

    def said(text: str) -> str:
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        return json.dumps(
            {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": update}}
        )

    def called(n: int) -> str:
        update = {"sessionUpdate": "tool_call", "toolCallId": f"t{n}", "title": f"Read f{n}.py", "status": "completed"}
        return json.dumps(
            {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": update}}
        )

    store = RunStore(project)
    record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="a", started_at=utc_now())
    store.create(record, "prompt")
    lines = [line for n in range(500) for line in (said(f"step {n}"), called(n))]
    store.write(record.id, "transcript.jsonl", "\n".join(lines) + "\n")
    parsed: list[int] = []
    readable = acpx.readable
    monkeypatch.setattr(acpx, "readable", lambda raw, *a: parsed.append(len(raw)) or readable(raw, *a))
    server = Server(load_project(config_file(project)), Policy(Bind("127.0.0.1", 1), TOKEN), mcp=False)
    transcripts = Transcripts(server.store, server.call)
    tail = transcripts.tail(record.id)
    assert [(line.kind, line.text) for line in tail][-2:] == [
        ("agent", "step 499"),
        ("tool", "Read f499.py [?] completed"),
    ]
    assert len(tail) == TAIL_LINES and parsed[0] < 200  # a few KiB of a 1,000-line transcript
    assert transcripts.tail(record.id) == tail and len(parsed) == 1  # unchanged: not read again
    # A last line longer than the first read: the tail reads further back for it.
    with (store.directory(record.id) / "transcript.jsonl").open("a") as file:
        file.write(said("y" * 20_000) + "\n")
    tail = transcripts.tail(record.id)
    assert tail[-1].text.startswith("yyy") and len(tail) == TAIL_LINES


def test_a_lanes_tail_reads_paths_in_the_runs_worktree_and_the_repository_as_the_repositorys(project: Path) -> None:
    from beflow.web.guard import Policy
    from beflow.web.server import Server
    from beflow.web.transcripts import Transcripts

    store = RunStore(project)
    worktree = project.parent / "worktrees" / "1"
    record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="a", started_at=utc_now())
    record.worktree = str(worktree)
    store.create(record, "prompt")
    text = f"edited {worktree}/src/app.py and {project}/README.md (the issue: file://{project}/.beflow/issues/1.md)"
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    line = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": update}}
    store.write(record.id, "transcript.jsonl", json.dumps(line) + "\n")
    server = Server(load_project(config_file(project)), Policy(Bind("127.0.0.1", 1), TOKEN), mcp=False)
    transcripts = Transcripts(server.store, server.call)
    said = f"edited src/app.py and README.md (the issue: file://{project}/.beflow/issues/1.md)"
    assert [line.text for line in transcripts.tail(record.id)] == [said]  # (the run's page says the same)
    assert [line.text for line in transcripts.page(record.id, 0, 10).lines] == [said]


def test_an_empty_list_or_transcript_says_so_in_a_line_not_an_empty_table(project: Path) -> None:
    store = RunStore(project)
    record = RunRecord(id=new_run_id("1"), issue="1", mode="attend", agent="a", started_at=utc_now())
    store.create(record, "prompt")  # (an attended run keeps no transcript)
    with serving(project) as (served, _), client(served) as http:
        runs = http.get("/runs", params={"issue": "2"}).text
        assert '<p class="empty" id="no-runs">No runs.</p>' in runs and '<div class="scroll" hidden>' in runs
        issues = http.get("/issues", params={"status": "done"}).text
        assert 'id="no-issues">No issues with status done.</p>' in issues and "<tr data-issue" not in issues
        assert 'id="no-issues"' not in http.get("/issues").text
        run = http.get(f"/runs/{record.id}").text
        assert "Transcript" not in run and 'id="outcome"' in run


def test_pages_asking_for_a_watchs_state_while_nothing_happened_share_one_reading(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.system import threads
    from beflow.watch.dispatcher import Dispatcher
    from beflow.web import views
    from beflow.web.live import WatchSource

    monkeypatch.setattr(views, "FRESH_FOR", 600.0)  # (0.5 s in use: no read of this test may outlast it)
    loaded = load_project(project / ".beflow" / "config.json")
    hub = Hub()
    snapshots: list[int] = []  # (whole readings; a look at whether the watch's data changed is cheap, and not one)
    read = views.Views._read_state
    monkeypatch.setattr(views.Views, "_read_state", lambda self: snapshots.append(1) or read(self))
    dumped: list[int] = []  # (the shared reading is serialized and masked once for all the pages too)
    dump = api.State.model_dump_json
    monkeypatch.setattr(api.State, "model_dump_json", lambda self, **k: dumped.append(1) or dump(self, **k))

    async def scenario() -> list[int]:
        source = WatchSource(Dispatcher(loaded, opens=open_project), hub)
        source.attach()
        monkeypatch.setattr(source, "looked", lambda: None)  # (no watch loop here looks at the tracker)
        await threads.blocking(lambda: None)
        with beside(loaded, Bind("127.0.0.1", 0), hub, source) as served:
            base = f"http://127.0.0.1:{served.bind.port}"

            def pages() -> list[int]:
                counts = []
                with httpx.Client(base_url=base, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                    bodies = {http.get("/api/v1/state").text for _ in range(5)}  # five pages, one event
                    assert len(bodies) == 1 and dumped == [1]
                    counts.append(len(snapshots))
                    hub.publish({"event": "dispatched", "issue": "2", "attempt": 1, "time": 1.0})
                    http.get("/api/v1/state").raise_for_status()  # an event since: read again
                    http.get("/api/v1/state").raise_for_status()
                    counts.append(len(snapshots))
                    http.post("/api/v1/issues/2/priority", json={"priority": 0}).raise_for_status()
                    assert http.get("/api/v1/state").json()["actions"] is True  # an action since: read again
                    counts.append(len(snapshots))
                return counts

            return await anyio.to_thread.run_sync(pages)

    assert anyio.run(scenario) == [1, 2, 3]
