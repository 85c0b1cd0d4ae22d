"""MCP over Streamable HTTP at ``/mcp``, driven by the official SDK's Streamable HTTP client: the same tools as
``beflow mcp serve``, a server bound to an issue that refuses another, the token, and resource updates pushed from
the watch's events."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.repository.authors import user_name
from beflow.web.guard import TOKEN_ENV, Bind
from beflow.web.live import Hub
from beflow.web.serving import Serving, beside
from tests.support.mcp_revisions import HANDSHAKE, MODERN, subscribe
from tests.support.projects import config_file

#: The old way of hearing of a change is served beside the new one, and the tests use neither through a helper the
#: SDK says is gone (tests.support.mcp_revisions).
pytestmark = pytest.mark.filterwarnings("error::mcp.shared.exceptions.MCPDeprecationWarning")

TOKEN = "m" * 24
AGENT_SAFE = {
    "docs_locate",
    "issue_show",
    "issue_new",
    "issue_comment",
    "issue_set_status",
    "issue_ask",
    "run_show",
    "run_status",
    "run_progress",
    "candidate_choose",
}


@pytest.fixture
def served(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Serving, Hub]]:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text("{}\n")
    tracker = open_tracker(load_project(config_file(repo)))
    tracker.create("Fix the login crash", "It crashes on an empty password.")
    tracker.create("Someone else's issue", "Not yours.")
    hub = Hub()
    with beside(load_project(config_file(repo)), Bind("127.0.0.1", 0), hub, None) as serving:
        yield serving, hub


@contextlib.asynccontextmanager
async def connect(
    serving: Serving, path: str = "/mcp", token: str | None = TOKEN, on_message: Any = None
) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http,
        streamable_http_client(f"{serving.url}{path}", http_client=http) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        yield session


def run(main: Any) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(60):
            return await main()

    return anyio.run(bounded)


def test_lists_and_calls_the_same_tools_as_mcp_serve(served: tuple[Serving, Hub]) -> None:
    serving, _ = served

    async def main() -> None:
        async with connect(serving) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == AGENT_SAFE
            shown = await session.call_tool("issue_show", {"key": "1"})
            assert not shown.is_error
            assert shown.structured_content is not None and shown.structured_content["title"] == "Fix the login crash"
            jsonschema.validate(shown.structured_content, tools["issue_show"].output_schema)

    run(main)


def test_a_bound_server_refuses_another_issue_with_an_error_every_client_accepts(served: tuple[Serving, Hub]) -> None:
    serving, _ = served

    async def main() -> None:
        async with connect(serving, "/mcp/issues/1") as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert "issue 1" in (session.initialize_result.instructions or "")  # type: ignore[union-attr]
            mine = await session.call_tool("issue_show", {})
            assert not mine.is_error and mine.structured_content["key"] == "1"  # type: ignore[index]
            other = await session.call_tool("issue_comment", {"key": "2", "text": "not mine"})
            assert other.is_error
            # The Inspector checks structuredContent against the output schema even for errors: there is none.
            assert other.structured_content is None
            assert other.meta is not None and other.meta["beflow/error"]["code"] == "out_of_scope"
            assert json.loads(other.content[0].text)["error"]["code"] == "out_of_scope"  # type: ignore[union-attr]
            assert "issue_comment" in tools

    run(main)
    issue = open_tracker(load_project(config_file(Path.cwd()))).get("2")
    assert issue.comments == []


def test_a_bound_server_for_an_issue_that_does_not_exist_is_not_found(served: tuple[Serving, Hub]) -> None:
    """As MCP answers what does not exist (a resource's ``-32602``), naming no command-line option."""
    serving, _ = served
    answer = httpx2.post(
        f"{serving.url}/mcp/issues/99",
        headers={"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 7, "method": "ping"},
    )
    assert answer.status_code == 404
    said = answer.json()
    assert (said["jsonrpc"], said["id"], said["error"]["code"], said["error"]["data"]["code"]) == (
        "2.0",
        7,
        -32602,
        "not_found",
    )
    assert said["error"]["message"].startswith("no issue 99") and "--issue" not in answer.text
    # Nor where the project lies on the server: its paths are the project's own.
    assert said["error"]["message"].startswith("no issue 99 in .beflow/issues;") and str(Path.cwd()) not in answer.text


def test_errors_over_http_name_no_path_of_the_server(served: tuple[Serving, Hub], tmp_path: Path) -> None:
    """A tool's error tells a remote client where things are in the project, not where the project is."""
    serving, _ = served

    async def main() -> dict[str, Any]:
        async with connect(serving) as session:
            missing = await session.call_tool("issue_show", {"key": "99"})
            return json.loads(missing.content[0].text)["error"]  # type: ignore[union-attr,no-any-return]

    error = run(main)
    assert error["code"] == "not_found" and error["message"].startswith("no issue 99 in .beflow/issues;")
    assert str(Path.cwd()) not in json.dumps(error) and "/tmp" not in json.dumps(error)


def test_a_client_of_either_revision_hears_of_a_change_its_own_way(served: tuple[Serving, Hub]) -> None:
    """2026-07-28: ``subscriptions/listen``; 2025-11-25: ``resources/subscribe`` and its notifications. The SDK's
    client negotiates the newest it can: the new one when it may, the old one when told to."""
    serving, hub = served
    heard: dict[str, list[str]] = {"modern": [], "legacy": []}
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard["legacy"].append(str(message.params.uri))
            arrived.set()

    async def main() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
            transport = streamable_http_client(f"{serving.url}/mcp/issues/1", http_client=http)
            async with Client(transport, mode="auto") as modern:
                assert modern.protocol_version == MODERN
                assert (await modern.call_tool("issue_show", {})).structured_content["key"] == "1"  # type: ignore[index]
                async with modern.listen(resource_subscriptions=["beflow://issue/1"]) as listening:
                    assert listening.honored is not None
                    assert listening.honored.resource_subscriptions == ["beflow://issue/1"]
                    hub.publish({"event": "progress", "run": "r1", "issue": "1", "time": 1.0, "text": "halfway"})
                    async for event in listening:
                        assert isinstance(event, ResourceUpdated)
                        heard["modern"].append(event.uri)
                        break
            transport = streamable_http_client(f"{serving.url}/mcp/issues/1", http_client=http)
            async with Client(transport, mode="legacy", message_handler=on_message) as legacy:
                assert legacy.protocol_version == HANDSHAKE
                await subscribe(legacy.session, "beflow://issue/1")
                hub.publish({"event": "progress", "run": "r1", "issue": "1", "time": 2.0, "text": "done"})
                await arrived.wait()

    run(main)
    assert heard == {"modern": ["beflow://issue/1"], "legacy": ["beflow://issue/1"]}


def test_over_http_a_client_is_told_topics_not_the_servers_files_and_acts_as_a_person(
    served: tuple[Serving, Hub],
) -> None:
    """A client over HTTP cannot read the server's files: errors' ``docs`` and ``docs_locate`` give the topic and
    the command that prints it. Its comments are a person's (signed as git's user.name), not an agent's; and a key
    sent as a number (as the MCP Inspector sends "e.g. 7") is the key."""
    serving, _ = served

    async def main() -> tuple[Any, ...]:
        async with connect(serving) as session:
            failed = await session.call_tool("issue_set_status", {"key": 1, "status": "review"})
            located = await session.call_tool("docs_locate", {"topic": "config"})
            commented = await session.call_tool("issue_comment", {"key": 1, "text": "Looked at it from my laptop."})
            floated = await session.call_tool("issue_show", {"key": 1.5})
            return failed, located, commented, floated

    failed, located, commented, floated = run(main)
    assert failed.is_error and failed.meta["beflow/error"]["code"] == "transition"
    assert (
        failed.meta["beflow/error"]["docs"] == "mcp-server#error-codes (`beflow docs mcp-server`, section Error codes)"
    )
    found = located.structured_content
    assert found["directory"] is None and found["hint"].startswith("Run `beflow docs config` where beflow is installed")
    assert found["pages"][0] == {
        "topic": "config",
        "title": "Configuration: .beflow/config.json",
        "command": "beflow docs config",
        "path": None,
    }
    assert str(Path.cwd()) not in located.model_dump_json() and "/docs/" not in located.model_dump_json()
    assert not commented.is_error and commented.structured_content["key"] == "1"
    person = user_name(Path.cwd())
    assert person != "agent"
    assert [(c.author, c.text) for c in open_tracker(load_project(config_file(Path.cwd()))).get("1").comments] == [
        (person, "Looked at it from my laptop.")
    ]
    assert floated.is_error and floated.meta["beflow/error"]["code"] == "usage"


def test_mcp_needs_the_token(served: tuple[Serving, Hub]) -> None:
    serving, _ = served
    answer = httpx2.post(
        f"{serving.url}/mcp",
        headers={"Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
    )
    assert answer.status_code == 401
    wrong = httpx2.post(f"{serving.url}/mcp", headers={"Authorization": "Bearer nope-nope-nope-nope"}, json={})
    assert wrong.status_code == 401


def test_a_resource_update_is_pushed_when_a_run_progresses(served: tuple[Serving, Hub]) -> None:
    serving, hub = served
    updated: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            arrived.set()

    async def main() -> None:
        async with connect(serving, on_message=on_message) as session:
            await subscribe(session, "beflow://issue/1")
            # (nothing about the issue changes: only the event can make the server announce it)
            hub.publish({"event": "progress", "run": "r1", "issue": "1", "time": 1.0, "text": "halfway"})
            await arrived.wait()

    run(main)
    assert "beflow://issue/1" in updated


def test_every_client_that_subscribed_hears_of_the_update_not_only_the_last(served: tuple[Serving, Hub]) -> None:
    serving, hub = served
    heard: dict[str, list[str]] = {"first": [], "second": [], "other": []}
    events = {name: anyio.Event() for name in heard}

    def listener(name: str) -> Any:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                heard[name].append(str(message.params.uri))
                events[name].set()

        return on_message

    async def main() -> None:
        async with (
            connect(serving, on_message=listener("first")) as first,
            connect(serving, on_message=listener("second")) as second,
            connect(serving, on_message=listener("other")) as other,
        ):
            await subscribe(first, "beflow://issue/1")
            await subscribe(second, "beflow://issue/1")
            await subscribe(other, "beflow://issue/2")
            hub.publish({"event": "progress", "run": "r1", "issue": "1", "time": 1.0, "text": "halfway"})
            await events["first"].wait()
            await events["second"].wait()
            await other.send_ping()  # anything announced to it would have arrived before the answer

    run(main)
    assert heard["first"] == heard["second"] == ["beflow://issue/1"]
    assert heard["other"] == []
