"""``beflow mcp serve`` as a real process, driven by the official MCP SDK's client over real stdio."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.records.record import RunRecord, new_run_id, now
from beflow.records.store import RunStore
from beflow.repository.authors import user_name
from beflow.trackers import Status
from tests.support.mcp_revisions import HANDSHAKE, MODERN, subscribe
from tests.support.projects import config_file

pytestmark = [
    pytest.mark.slow,  # every test here starts beflow as a real process
    # (the old way of hearing of a change is served beside the new one; no test uses a helper the SDK says is gone)
    pytest.mark.filterwarnings("error::mcp.shared.exceptions.MCPDeprecationWarning"),
]

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
AGENT_SAFE = {
    "docs_locate",
    "issue_ask",
    "issue_show",
    "issue_new",
    "issue_comment",
    "issue_set_status",
    "run_show",
    "run_status",
    "run_progress",
    "candidate_choose",
}


@pytest.fixture
def project(repo: Path) -> Path:
    """A project with two issues: 1 (the one servers are bound to) and 2 (someone else's)."""
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text("{}\n")
    tracker = open_tracker(load_project(config_file(repo)))
    tracker.create("Fix the login crash", "It crashes on an empty password.")
    tracker.create("Someone else's issue", "Not yours.")
    return repo


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {name: tmp_path / f"extra-{name}" for name in ("log", "release", "exit")}


@contextlib.asynccontextmanager
async def connect(
    project: Path,
    *args: str,
    files: dict[str, Path] | None = None,
    on_message: Callable[[Any], Awaitable[None]] | None = None,
    errlog: Path | None = None,
) -> AsyncIterator[ClientSession]:
    """A client session with ``beflow mcp serve ARGS`` (with the test operations when ``files`` is given)."""
    module = "tests.support.mcp_extra" if files else "beflow"
    env = {"BEFLOW_HOME": os.environ["BEFLOW_HOME"], "PYTHONPATH": str(REPO_ROOT)}
    if files:
        env |= {f"MCP_EXTRA_{name.upper()}": str(path) for name, path in files.items()}
    parameters = server_parameters(project, *args, module=module, env=env)
    stderr = errlog.open("w") if errlog else sys.stderr
    async with (
        stdio_client(parameters, errlog=stderr) as (read, write),
        ClientSession(read, write, message_handler=on_message) as s,
    ):
        await s.initialize()
        await s.list_tools()  # as clients do; the SDK's client checks results against the listed output schemas
        yield s


def server_parameters(
    project: Path, *args: str, module: str = "beflow", env: dict[str, str] | None = None
) -> StdioServerParameters:
    """``beflow mcp serve ARGS`` in ``project``, as a client starts it."""
    env = env or {"BEFLOW_HOME": os.environ["BEFLOW_HOME"], "PYTHONPATH": str(REPO_ROOT)}
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", module, "--config", str(config_file(project)), "mcp", "serve", *args],
        env=env,
        cwd=str(project),
    )


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with anyio.fail_after(60):
            await main()

    anyio.run(bounded)


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    """The error of a failed call: as text, and in ``_meta``; never as ``structuredContent``, which every client
    that validates it (the MCP Inspector) would check against the tool's output schema, and refuse."""
    assert result.is_error, result
    assert result.structured_content is None
    assert result.meta is not None
    error = result.meta["beflow/error"]
    assert set(error) == {"code", "message", "fix", "docs"}
    assert json.loads(result.content[0].text) == {"error": error}  # type: ignore[union-attr]
    return error


async def wait_for_line(path: Path, prefix: str) -> str:
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        found = [line for line in lines if line.startswith(prefix)]
        if found:
            return found[0]
        await anyio.sleep(0.02)


def test_discovery_lists_the_agent_safe_tools_with_schemas_annotations_and_metadata(project: Path) -> None:
    async def main() -> None:
        async with connect(project, "--issue", "1") as session:
            assert session.initialize_result is not None
            assert session.initialize_result.protocol_version == "2025-11-25"
            assert "issue 1" in (session.initialize_result.instructions or "")
            tools = {t.name: t for t in (await session.list_tools()).tools}
            templates = (await session.list_resource_templates()).resource_templates

        assert set(tools) == AGENT_SAFE
        for name, tool in tools.items():
            assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name)
            assert tool.input_schema["type"] == "object" and "$ref" not in json.dumps(tool.input_schema)
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
            assert tool.description and tool.title
            meta = (tool.meta or {})["beflow/operation"]
            assert meta["agent"] is True and meta["access"] == ("read" if meta["safety"] == "read" else "write")
            annotations = tool.annotations
            assert annotations is not None and annotations.open_world_hint is False
            assert annotations.read_only_hint == annotations.idempotent_hint == (meta["safety"] == "read")
            assert annotations.destructive_hint is False
        assert tools["issue_show"].annotations.read_only_hint is True  # type: ignore[union-attr]
        assert tools["issue_comment"].annotations.read_only_hint is False  # type: ignore[union-attr]
        # Bound, the issue is implied: the key is optional and says which issue it can only be.
        assert "key" not in tools["issue_comment"].input_schema.get("required", [])
        assert "issue 1 only" in tools["issue_comment"].input_schema["properties"]["key"]["description"]
        assert {t.uri_template for t in templates} == {"beflow://issue/{key}", "beflow://run/{id}"}

    run(main)


def test_a_bound_server_acts_on_its_issue_and_refuses_every_other(project: Path) -> None:
    async def main() -> None:
        async with connect(project, "--issue", "1", "--actor", "agent (run r7)") as session:
            shown = await session.call_tool("issue_show", {})
            commented = await session.call_tool("issue_comment", {"text": "Found it: empty password."})
            refused = await session.call_tool("issue_comment", {"key": "#2", "text": "sneaky"})
            refused_read = await session.call_tool("issue_show", {"key": "2"})
            refused_status = await session.call_tool("issue_set_status", {"key": "2", "status": "closed"})
            resources = (await session.list_resources()).resources
            with pytest.raises(MCPError, match="works on issue 1 only"):
                await session.read_resource("beflow://issue/2")
            markdown = (await session.read_resource("beflow://issue/1")).contents[0]
            hidden = await session.call_tool("issue_list", {})

        assert not shown.is_error and shown.structured_content["key"] == "1"  # type: ignore[index]
        assert not commented.is_error
        for result in (refused, refused_read, refused_status):
            error = error_of(result)
            assert error["code"] == "out_of_scope" and "works on issue 1 only" in error["message"]
        assert [str(r.uri) for r in resources] == ["beflow://issue/1"]
        assert "Found it: empty password." in markdown.text  # type: ignore[union-attr]
        assert error_of(hidden)["code"] == "unknown_tool"
        tracker = open_tracker(load_project(config_file(project)))
        assert [(c.author, c.text) for c in tracker.get("1").comments] == [
            ("agent (run r7)", "Found it: empty password.")
        ]
        assert tracker.get("2").comments == [] and tracker.get("2").status == Status.READY

    run(main)


def test_a_bound_launch_cannot_expose_an_operation_that_is_not_agent_safe(project: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "beflow", "mcp", "serve", "--issue", "1", "--allow", "issue.close"],
        cwd=project,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert result.returncode == 2
    assert "issue.close is not agent-safe" in result.stderr
    assert result.stdout == ""


def test_errors_cross_as_data_with_a_code_a_fix_and_no_raw_input(project: Path) -> None:
    secret = "s3cr3t-value-never-echoed"

    async def main() -> None:
        async with connect(project, "--issue", "1") as session:
            bad_status = await session.call_tool("issue_set_status", {"status": "done-ish"})
            bad_field = await session.call_tool("issue_comment", {"text": "x", "token": secret})
            transition = await session.call_tool("issue_set_status", {"status": "review"})
            progress = await session.call_tool("run_progress", {"text": "no run here"})

        usage = error_of(bad_status)
        assert usage["code"] == "usage" and "status" in usage["message"] and "done-ish" not in usage["message"]
        assert secret not in bad_field.model_dump_json()
        assert error_of(bad_field)["message"].startswith("issue.comment: token: unknown key")
        moved = error_of(transition)
        assert moved["code"] == "transition" and "from ready it can go to" in moved["message"]
        assert moved["docs"].endswith("mcp-server.md#error-codes") and Path(moved["docs"].split("#")[0]).is_file()
        assert error_of(progress)["code"] == "not_bound"

    run(main)


def test_a_key_that_is_neither_a_string_nor_a_whole_number_is_refused_in_words_that_say_what_a_key_is(
    project: Path,
) -> None:
    async def main() -> None:
        async with connect(project) as session:
            float_key = await session.call_tool("issue_show", {"key": 1.0})
            whole = await session.call_tool("issue_show", {"key": 1})

        refused = error_of(float_key)
        assert refused["code"] == "usage"
        assert refused["message"] == "issue.show: key: expected a string or a whole number"
        assert not whole.is_error  # (what the message promises)

    run(main)


def test_inputs_over_the_limit_are_refused_and_results_over_it_are_cut_with_a_note(project: Path) -> None:
    open_tracker(load_project(config_file(project))).comment("1", "long " * 6000, "someone")

    async def main() -> None:
        async with connect(project, "--issue", "1", "--max-input", "2048", "--max-output", "8192") as session:
            too_big = await session.call_tool("issue_comment", {"text": "x" * 5000})
            shown = await session.call_tool("issue_show", {})  # the SDK client checks it against the output schema

        error = error_of(too_big)
        assert error["code"] == "too_large" and "at most 2048" in error["message"]
        assert not shown.is_error
        note, body = shown.content
        assert "cut to fit this server's limit of 8192 bytes" in note.text  # type: ignore[union-attr]
        assert "issue file" in note.text  # type: ignore[union-attr]  # where the whole of it is
        assert len(body.text.encode()) < 8192 // 2  # type: ignore[union-attr]
        assert shown.structured_content["comments"][0]["text"].endswith("… [cut]")  # type: ignore[index]
        assert (shown.meta or {})["beflow/cut"]["limit"] == 8192

    run(main)
    tracker = open_tracker(load_project(config_file(project)))
    assert len(tracker.get("1").comments) == 1  # the refused comment was not written


def test_calls_are_queued_one_at_a_time_in_order(project: Path, files: dict[str, Path]) -> None:
    async def main() -> None:
        async with connect(project, "--allow", "all", files=files) as session, anyio.create_task_group() as tasks:
            tasks.start_soon(session.call_tool, "test_slow", {"tag": "a"})
            await wait_for_line(files["log"], "start a")
            tasks.start_soon(session.call_tool, "test_slow", {"tag": "b"})
            await session.send_ping()  # the server has read the second call by now
            files["release"].touch()

    run(main)
    assert [line.split()[:2] for line in files["log"].read_text().splitlines()] == [
        ["start", "a"],
        ["end", "a"],
        ["start", "b"],
        ["end", "b"],
    ]


def test_a_handler_that_prints_cannot_corrupt_the_protocol_stream(project: Path, files: dict[str, Path]) -> None:
    async def main() -> None:
        async with connect(project, "--allow", "all", files=files) as session:
            noisy = await session.call_tool("test_noisy", {})
            after = await session.call_tool("issue_show", {"key": "1"})
            assert not noisy.is_error and noisy.structured_content["tag"] == "a"  # type: ignore[index]
            assert not after.is_error and after.structured_content["key"] == "1"  # type: ignore[index]

    run(main)
    assert files["exit"].read_text() == "0\n"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_finishes_the_call_in_flight_answers_it_and_exits_0(
    project: Path, files: dict[str, Path], signum: int
) -> None:
    async def main() -> None:
        async with connect(project, "--allow", "all", files=files) as session:
            results: list[types.CallToolResult] = []

            async def call() -> None:
                results.append(await session.call_tool("test_slow", {"tag": "a"}))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                pid = int((await wait_for_line(files["log"], "start a")).split()[2])
                os.kill(pid, signum)
                files["release"].touch()
            (result,) = results
            assert not result.is_error and result.structured_content == {"tag": "a", "pid": pid}
            while not files["exit"].exists():  # it stops by itself, before the client closes its stdin
                await anyio.sleep(0.02)

    run(main)
    assert files["exit"].read_text() == "0\n"


def test_stdin_eof_lets_the_call_in_flight_finish_then_exits_0(project: Path, files: dict[str, Path]) -> None:
    async def main() -> None:
        async with anyio.create_task_group() as tasks:

            async def call(session: ClientSession) -> None:
                with contextlib.suppress(MCPError):  # the client leaves before the answer
                    await session.call_tool("test_slow", {"tag": "a"})

            async def release_once_stopping() -> None:
                await wait_for_line(errlog, "beflow mcp: input ended; answering 1 call(s) in flight")
                files["release"].touch()

            errlog = files["log"].with_name("stderr")
            async with connect(project, "--allow", "all", files=files, errlog=errlog) as session:
                tasks.start_soon(call, session)
                await wait_for_line(files["log"], "start a")
                tasks.start_soon(release_once_stopping)
            # Leaving the session closed the server's stdin with the call still running.

    run(main)
    assert files["exit"].read_text() == "0\n"
    assert "end a" in files["log"].read_text()


def test_stdin_eof_right_away_exits_0_with_nothing_on_stdout(project: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "beflow", "mcp", "serve"],
        cwd=project,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""


def test_a_person_commenting_on_the_bound_issue_notifies_subscribed_clients(project: Path) -> None:
    updates: list[str] = []
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            changed.set()

    async def main() -> None:
        async with connect(project, "--issue", "1", "--poll", "0.1", on_message=on_message) as session:
            await subscribe(session, "beflow://issue/1")
            await session.send_ping()
            open_tracker(load_project(config_file(project))).comment("1", "Try an empty username too.", "ada")
            await changed.wait()
            text = (await session.read_resource("beflow://issue/1")).contents[0].text  # type: ignore[union-attr]
            assert "Try an empty username too." in text

    run(main)
    assert updates[0] == "beflow://issue/1"


def test_a_client_of_the_2026_revision_listens_for_changes_and_one_of_2025_subscribes(project: Path) -> None:
    """The SDK's client negotiates 2026-07-28 with beflow when it may (``mode="auto"``), and hears of a comment and
    of a new run through ``subscriptions/listen``; told to use the handshake (``legacy``), 2025-11-25."""
    heard: list[object] = []

    async def main() -> None:
        parameters = server_parameters(project, "--issue", "1", "--poll", "0.1")
        async with Client(stdio_client(parameters), mode="auto") as modern:
            assert modern.protocol_version == MODERN
            wanted = {"resource_subscriptions": ["beflow://issue/1"], "resources_list_changed": True}
            async with modern.listen(**wanted) as listening:  # type: ignore[arg-type]
                assert listening.honored is not None and listening.honored.resources_list_changed
                open_tracker(load_project(config_file(project))).comment("1", "Try an empty username too.", "ada")
                async for event in listening:
                    heard.append(event)
                    break
                record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="codex", started_at=now())
                RunStore(project).create(record, "prompt")
                async for event in listening:
                    heard.append(event)
                    break
        async with Client(stdio_client(parameters), mode="legacy") as legacy:
            assert legacy.protocol_version == HANDSHAKE
            await subscribe(legacy.session, "beflow://issue/1")

    run(main)
    assert heard == [ResourceUpdated(uri="beflow://issue/1"), ResourcesListChanged()]


def test_a_person_s_comments_through_their_client_are_signed_as_theirs(project: Path) -> None:
    """A server that is not a run's own (no channel) serves a person's client: what they write is signed as
    theirs (git's user.name), not "agent"; ``--actor`` still says otherwise when given."""

    async def main() -> None:
        async with connect(project, "--issue", "1") as session:
            await session.call_tool("issue_comment", {"text": "Mine."})
        async with connect(project, "--issue", "1", "--actor", "reviewer-bot") as session:
            await session.call_tool("issue_comment", {"text": "The bot's."})

    run(main)
    comments = open_tracker(load_project(config_file(project))).get("1").comments
    assert [(c.author, c.text) for c in comments] == [(user_name(project), "Mine."), ("reviewer-bot", "The bot's.")]
    assert user_name(project) != "agent"


def test_an_unbound_server_for_a_person_can_expose_every_operation(project: Path) -> None:
    async def main() -> None:
        async with connect(project, "--allow", "all") as session:
            names = {t.name for t in (await session.list_tools()).tools}
            listed = await session.call_tool("issue_list", {})
            closed = await session.call_tool("issue_close", {"key": "2", "note": "duplicate"})

        assert {"issue_list", "issue_close", "run_logs"} <= names
        assert [i["key"] for i in listed.structured_content["issues"]] == ["1", "2"]  # type: ignore[index]
        assert closed.structured_content["status"] == "closed"  # type: ignore[index]

    run(main)


def test_an_unexpected_failure_is_internal_and_names_the_log_with_the_details(
    project: Path, files: dict[str, Path], isolated_home: Path
) -> None:
    async def main() -> None:
        async with connect(project, "--allow", "all", files=files) as session:
            crashed = await session.call_tool("test_crash", {"tag": "secret-input-77"})
            after = await session.call_tool("issue_show", {"key": "1"})

        error = error_of(crashed)
        assert error["code"] == "internal"
        assert "boom" not in error["message"] and "secret-input-77" not in error["message"]
        (log,) = (isolated_home / "logs").glob("mcp-*.log")
        assert str(log) in error["message"]
        assert "RuntimeError: boom with secret-input-77" in log.read_text()
        assert not after.is_error  # the server goes on

    run(main)


def test_a_new_run_of_the_bound_issue_changes_the_resource_list(project: Path) -> None:

    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            changed.set()

    async def main() -> None:
        async with connect(project, "--issue", "1", "--poll", "0.1", on_message=on_message) as session:
            before = [str(r.uri) for r in (await session.list_resources()).resources]
            record = RunRecord(id="20260101-000000-1-abcd", issue="1", mode="auto", agent="codex", started_at=now())
            RunStore(project).create(record, "prompt")
            await changed.wait()
            after = [str(r.uri) for r in (await session.list_resources()).resources]

        assert before == ["beflow://issue/1"]
        assert after == ["beflow://issue/1", f"beflow://run/{record.id}"]

    run(main)


def test_a_bound_server_finds_its_issues_runs_only_and_never_names_another_issues(project: Path) -> None:

    store = RunStore(project)
    mine = RunRecord(id="20260101-000001-1-bcde", issue="1", mode="auto", agent="codex", started_at=now())
    theirs = RunRecord(id="20260101-000000-2-abcd", issue="2", mode="auto", agent="codex", started_at=now())
    for record in (mine, theirs):
        store.create(record, "prompt")

    async def main() -> None:
        async with connect(project, "--issue", "1") as session:
            by_prefix = await session.call_tool("run_show", {"id": "2026"})  # one of issue 1's: no ambiguity
            # Their id, a close match of it, a prefix of it alone: each as if their run did not exist.
            asked = [
                (wanted, await session.call_tool("run_show", {"id": wanted}))
                for wanted in (theirs.id, theirs.id[:-1], "20260101-000000")
            ]
            with pytest.raises(MCPError) as raised:
                await session.read_resource(f"beflow://run/{theirs.id}")

        assert not by_prefix.is_error and by_prefix.structured_content["id"] == mine.id  # type: ignore[index]
        for wanted, result in asked:
            error = error_of(result)
            assert error["code"] == "not_found"
            assert error["message"] == f"no run {wanted!r} of issue 1"
        assert str(raised.value) == f"no run {theirs.id!r} of issue 1"

    run(main)


def test_errors_quote_hostile_input_short_and_escaped(project: Path) -> None:
    hostile = "\x1b]52;c;" + "A" * 20_000 + "\u202e"

    async def main() -> None:
        async with connect(project, "--issue", "1") as session:
            results = [
                await session.call_tool("issue_comment", {"key": hostile, "text": "x"}),
                await session.call_tool(hostile, {}),
                await session.call_tool("run_show", {"id": hostile}),
            ]
            with pytest.raises(MCPError) as raised:
                await session.read_resource(f"beflow://nothing/{hostile}")
        for result in results:
            message = error_of(result)["message"]
            assert len(message) < 300 and "\x1b" not in message and "\u202e" not in message, message
        assert len(str(raised.value)) < 300 and "\x1b" not in str(raised.value)

    run(main)
