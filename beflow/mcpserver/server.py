"""``beflow mcp serve``: beflow's operations as an MCP server over stdio, with the official SDK's low-level server.

What is served is decided at launch (:class:`Launch`): the operations (``--allow``), the issue and run the server
is bound to (``--issue``, ``--run``), who is acting (``--actor``) and the limits. Every tool call goes through the
registry (:meth:`beflow.ops.operations.Operation.call`), which enforces the binding once for every operation.

- Tool calls run one at a time, in the order they arrive (a call waits for the one before it).
- Errors cross as data: ``isError`` with ``{"error": {"code", "message", "fix", "docs"}}`` as text and the error
  object in ``_meta["beflow/error"]`` (not ``structuredContent``, which must match the tool's output schema);
  never a stack, the raw input or a secret. Anything unexpected is ``internal``, its traceback in a log file the
  error names.
- Inputs above ``max_input`` bytes are refused (``too_large``); results above ``max_output`` are cut, with a note
  saying where the whole of it can be read. Frames above ``max_frame`` are dropped unread.
- stdout carries protocol frames only: while serving, the SDK points file descriptor 1 at stderr, so a stray print
  (ours, a library's, a child's) cannot corrupt the stream.
- stdin EOF, SIGINT, SIGTERM and SIGHUP stop reading (no new call is accepted), let every call already received
  finish and be answered, then the server exits 0.
- Resources ``beflow://issue/<key>`` (Markdown) and ``beflow://run/<id>`` (JSON); a bound server lists only its own
  issue and runs. A subscribed resource that changes (a person comments on the bound issue) is announced with
  ``notifications/resources/updated``; a new run of the bound issue with ``notifications/resources/list_changed``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from beflow import __version__
from beflow.config import Project
from beflow.errors import BeflowError, NotFoundError, TooLargeError, UsageError, excerpt
from beflow.mcp.own import SERVER_NAME
from beflow.mcpserver.channel import client_from_environment
from beflow.mcpserver.failures import log_internal, without_input
from beflow.mcpserver.schema import ISSUE_URI, RUN_URI, exposed, load_all, tool
from beflow.mcpserver.stdio import stdio_streams
from beflow.mcpserver.subscriptions import ResourceWatch
from beflow.ops.issues import IssueView
from beflow.ops.manual import docs_dir
from beflow.ops.operations import Context, Operation
from beflow.records.record import RunRecord
from beflow.trackers.base import Tracker
from beflow.trackers.issue import format_time, normalize_key

logger = logging.getLogger("beflow.mcp")

KIB = 1024
DEFAULT_MAX_INPUT = 256 * KIB
DEFAULT_MAX_OUTPUT = 1024 * KIB
#: Seconds between two looks at the bound issue and the subscribed resources.
DEFAULT_POLL = 2.0
CUT = "… [cut]"
#: The ``_meta`` key of a tool error's code, message, fix and docs (structured, for clients that act on it).
ERROR_META = "beflow/error"
#: Requests received and not yet answered, at most: beyond, the server reads no more until one is answered.
MAX_PENDING = 64


@dataclass(frozen=True)
class Limits:
    max_input: int = DEFAULT_MAX_INPUT
    max_output: int = DEFAULT_MAX_OUTPUT

    @property
    def max_frame(self) -> int:
        """The longest protocol frame read: room for an input at the limit, so that it gets its ``too_large``."""
        return max(1024 * KIB, 4 * self.max_input)


@dataclass(frozen=True)
class Launch:
    """Everything ``beflow mcp serve`` was started with; nothing here can come from a tool argument."""

    project: Project
    allow: list[str] | None = None
    issue: str | None = None
    run: str | None = None
    actor: str = "agent"
    limits: Limits = field(default_factory=Limits)
    poll: float = DEFAULT_POLL
    #: ``mcp.self``: the run's channel (its socket); every operation is forwarded to the run's process.
    channel: str | None = None
    #: How the project's tracker is opened (:func:`beflow.app.open_tracker`), for the operations that need it.
    opens_tracker: Callable[[Project], Tracker] | None = None


def docs_link(code: str) -> str:
    """Where error codes are explained: the installed docs page (it matches this version), its error-codes table."""
    return f"{docs_dir() / 'mcp-server.md'}#error-codes"


def error_payload(code: str, message: str, fix: str | None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fix": fix, "docs": docs_link(code)}}


def _leaves(data: Any) -> tuple[list[tuple[int, Any, Any]], list[tuple[int, Any, Any]]]:
    """Every string and every list in ``data``: ``(length, parent, key)`` (``parent`` None for the root)."""
    strings: list[tuple[int, Any, Any]] = []
    lists: list[tuple[int, Any, Any]] = []

    def walk(node: Any, parent: Any, key: Any) -> None:
        if isinstance(node, str):
            strings.append((len(node), parent, key))
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, node, k)
        elif isinstance(node, list):
            lists.append((len(node), parent, key))
            for i, v in enumerate(node):
                walk(v, node, i)

    walk(data, None, None)
    return strings, lists


def fit(data: Any, budget: int) -> Any | None:
    """``data`` cut until its JSON fits ``budget`` bytes: the longest texts are shortened (ending in ``… [cut]``),
    then the longest lists lose their tail. Types stay as they were, so the result still matches its schema.
    ``None`` when it cannot be made to fit."""

    def size(value: Any) -> int:
        return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))

    if size(data) <= budget:
        return data
    data = copy.deepcopy(data)
    for _ in range(10_000):
        excess = size(data) - budget
        if excess <= 0:
            return data
        strings, lists = _leaves(data)
        longest = max(strings, default=None, key=lambda item: item[0])
        if longest is not None and longest[0] > 200 and longest[1] is not None:
            length, parent, key = longest
            parent[key] = parent[key][: max(100, length - excess - 64)] + CUT
            continue
        biggest = max(lists, default=None, key=lambda item: item[0])
        if biggest is not None and biggest[0] > 1:
            length, parent, key = biggest
            target = data if parent is None else parent[key]
            del target[length // 2 :]
            continue
        return None
    return None


class _Drain:
    """Stream wrappers that hold back the end of input until every request received has been answered: stdin EOF
    and signals end the input, but a call in flight still finishes and its answer is written (the SDK would cancel
    it). ``on_draining`` runs when the input ends (long-lived streams are closed there)."""

    def __init__(
        self,
        read: Any,
        write: Any,
        on_draining: Callable[[], None],
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._read = read
        self._max_pending = max_pending
        self._write = write
        self._on_draining = on_draining
        self._pending: set[types.RequestId] = set()
        self._changed = anyio.Event()
        self.reader = _Reader(self)
        self.writer = _Writer(self)

    def received(self, item: Any) -> None:
        if isinstance(item, SessionMessage):
            message = item.message
            if isinstance(message, types.JSONRPCRequest):
                self._pending.add(message.id)
            elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                # A cancelled request is never answered: nothing to wait for.
                self._settle((message.params or {}).get("requestId"))

    def sent(self, item: Any) -> None:
        if isinstance(item, SessionMessage) and isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self._settle(item.message.id)

    async def room(self) -> None:
        """Wait while :data:`MAX_PENDING` requests are unanswered: what is queued for a client that does not read
        stays bounded (the client's own writes block instead)."""
        while len(self._pending) >= self._max_pending:
            await self._changed.wait()

    def _settle(self, request_id: Any) -> None:
        self._pending.discard(request_id)
        self._changed.set()
        self._changed = anyio.Event()

    async def drained(self) -> None:
        self._on_draining()
        if self._pending:
            logger.info("beflow mcp: input ended; answering %d call(s) in flight, then stopping", len(self._pending))
        while self._pending:
            await self._changed.wait()


class _Reader:
    def __init__(self, drain: _Drain) -> None:
        self._drain = drain

    @property
    def last_context(self) -> Any:
        return getattr(self._drain._read, "last_context", None)

    async def receive(self) -> Any:
        await self._drain.room()
        try:
            item = await self._drain._read.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            await self._drain.drained()
            raise anyio.EndOfStream from None
        self._drain.received(item)
        return item

    async def aclose(self) -> None:
        await self._drain._read.aclose()

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Reader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Writer:
    def __init__(self, drain: _Drain) -> None:
        self._drain = drain

    async def send(self, item: Any) -> None:
        await self._drain._write.send(item)
        self._drain.sent(item)

    async def aclose(self) -> None:
        await self._drain._write.aclose()

    async def __aenter__(self) -> _Writer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _issue_markdown(issue: IssueView) -> str:
    lines = [f"# Issue {issue.key}: {issue.title}", ""]
    lines.append(f"- status: {issue.status.value}")
    lines.append(f"- priority: {issue.priority}")
    if issue.labels:
        lines.append(f"- labels: {', '.join(issue.labels)}")
    lines.append(f"- updated: {format_time(issue.updated)}")
    if issue.claim is not None:
        lines.append(f"- claimed by: {issue.claim.owner}")
    lines += ["", issue.body or "_(no description)_"]
    if issue.comments:
        lines += ["", f"## Comments ({len(issue.comments)}, oldest first)"]
        for comment in issue.comments:
            lines += ["", f"### {comment.author}, {format_time(comment.created)}", "", comment.text]
    return "\n".join(lines) + "\n"


class BeflowServer:
    """One ``beflow mcp serve`` process: the SDK's low-level server with beflow's handlers."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        issue = normalize_key(launch.issue) if launch.issue else None
        self.context = Context(
            project=launch.project,
            actor=launch.actor,
            bound_issue=issue,
            bound_run=launch.run,
            opens_tracker=launch.opens_tracker,
        )
        self.operations: dict[str, Operation[Any, Any]] = {
            op.tool_name: op for op in exposed(launch.allow, bound=issue is not None)
        }
        self.forward = client_from_environment(launch.channel, issue) if launch.channel else None
        self._calls = anyio.Lock()  # one call at a time, first come first served
        #: The subscribed resources (and the bound issue), and what changed in them (beflow.mcpserver.subscriptions).
        self.watch = ResourceWatch(bound_issue=issue, poll=launch.poll, stamp=self._stamp, run_uris=self._run_uris)
        self.server: Server[dict[str, Any]] = Server(
            SERVER_NAME,
            version=__version__,
            title="beflow",
            instructions=self._instructions(),
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self.watch.listen,
        )

    def _instructions(self) -> str:
        bound = self.context.bound_issue
        if bound is None:
            return "beflow's operations on this project's issues and runs. docs_locate finds beflow's own docs."
        run = f" (run {self.context.bound_run})" if self.context.bound_run else ""
        return (
            f"You work on issue {bound}{run}: these tools act on that issue only. Read it with issue_show first; "
            "report progress with run_progress as you go; comment on the issue for what people should read; file "
            "follow-ups with issue_new for work you should not do now."
        )

    # -- the lifespan: the watch of the bound issue and subscribed resources ----------------------------------------

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Server[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.watch.run)
            yield {}
            tasks.cancel_scope.cancel()

    def _stamp(self, uri: str) -> Any:
        try:
            reading = Context(
                project=self.launch.project,
                bound_issue=self.context.bound_issue,
                opens_tracker=self.launch.opens_tracker,
            )
            return self._read_text(uri, reading)
        except Exception:
            return None

    def _run_uris(self) -> list[str]:
        try:
            return [uri for uri, _ in self._run_resources()]
        except Exception:
            return []

    async def announce(self, uri: str | None) -> None:
        """``uri`` changed (None: the list of resources did): tell listen streams and a subscribed session."""
        await self.watch.announce(uri)

    # -- tools ------------------------------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.watch.remember(ctx)
        tools = [
            types.Tool.model_validate(tool(op, self.launch.project, self.context.bound_issue))
            for op in self.operations.values()
        ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self.watch.remember(ctx)
        op = self.operations.get(params.name)
        if op is None:
            names = ", ".join(self.operations)
            return self._error(
                "unknown_tool", f"no tool {excerpt(params.name)} on this server", f"The tools here are: {names}."
            )
        arguments = params.arguments or {}
        size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8"))
        if size > self.launch.limits.max_input:
            error = TooLargeError(
                f"{op.tool_name}: the input is {size} bytes; this server takes at most {self.launch.limits.max_input}",
                fix="Send less (shorter text), or split it over several calls.",
            )
            return self._error(error.code, error.message, error.fix)
        async with self._calls:
            # Shielded: once it started, a call finishes (and is answered) even when the server is stopping.
            with anyio.CancelScope(shield=True):
                try:
                    result = await anyio.to_thread.run_sync(self._invoke, op, arguments)
                except BeflowError as error:
                    message = without_input(error.message) if isinstance(error, UsageError) else error.message
                    return self._error(error.code, message, error.fix)
                except Exception as error:
                    where = log_internal(error)
                    return self._error(
                        "internal",
                        f"{op.tool_name}: beflow failed unexpectedly; the details are logged in {where}",
                        "Report it with that log; the call may be retried.",
                    )
        return self._result(op, result)

    def _invoke(self, op: Operation[Any, Any], arguments: dict[str, Any]) -> Any:
        """A tool call: in this process, or, for a run's own server, in the run's (through its channel)."""
        if self.forward is not None:
            return self.forward.call(op.name, arguments, tool=True)
        return op.call(self.context, arguments)

    def _result(self, op: Operation[Any, Any], result: Any) -> types.CallToolResult:
        data = result.model_dump(mode="json") if hasattr(result, "model_dump") else result
        limit = self.launch.limits.max_output
        # The JSON goes twice (structured, and as text for clients that read text only): each gets half.
        budget = limit // 2 - 512
        fitted = fit(data, budget)
        if fitted is None:
            return self._error(
                "too_large",
                f"{op.tool_name}: the result does not fit in {limit} bytes, even cut",
                f"Read it whole with {op.whole or 'the beflow command line'}.",
            )
        content: list[types.ContentBlock] = []
        meta = None
        if fitted is not data:
            whole = op.whole or "the beflow command line"
            note = (
                f"Note: this result was cut to fit this server's limit of {limit} bytes; long texts end with '{CUT}' "
                f"and long lists lost their tail. The whole of it: {whole}."
            )
            content.append(types.TextContent(text=note))
            meta = {"beflow/cut": {"limit": limit, "whole": whole}}
        content.append(types.TextContent(text=json.dumps(fitted, ensure_ascii=False)))
        return types.CallToolResult(content=content, structured_content=fitted, _meta=meta)

    def _error(self, code: str, message: str, fix: str | None) -> types.CallToolResult:
        payload = error_payload(code, message, fix)
        # No structuredContent: it must match the tool's outputSchema, and an error is not a result (clients that
        # validate it, such as the MCP Inspector, refuse the call). The error goes as text, and as data in _meta.
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(payload, ensure_ascii=False))],
            is_error=True,
            _meta={ERROR_META: payload["error"]},
        )

    # -- resources --------------------------------------------------------------------------------------------------

    def _run_resources(self) -> list[tuple[str, RunRecord]]:
        listing = self.operations_call("run.list", {"limit": 20}, self.context)
        return [(RUN_URI.format(id=record.id), record) for record in listing.runs]

    def operations_call(self, name: str, arguments: dict[str, Any], context: Context) -> Any:
        """An operation this server uses for resources, through the registry (so the binding applies), whether or
        not ``--allow`` exposes it as a tool."""
        if self.forward is not None:
            return self.forward.call(name, arguments)
        return load_all()[name].call(context, arguments)

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self.watch.remember(ctx)

        def collect() -> list[types.Resource]:
            found = []
            if self.context.bound_issue is not None:
                issues = [self.operations_call("issue.show", {}, self.context)]
            else:
                issues = self.operations_call("issue.list", {}, self.context).issues
            for issue in issues:
                found.append(
                    types.Resource(
                        uri=ISSUE_URI.format(key=issue.key),
                        name=f"issue-{issue.key}",
                        title=f"Issue {issue.key}: {issue.title}",
                        description="The issue and its comments, oldest first.",
                        mime_type="text/markdown",
                    )
                )
            for uri, record in self._run_resources():
                found.append(
                    types.Resource(
                        uri=uri,
                        name=f"run-{record.id}",
                        title=f"Run {record.id} ({record.outcome})",
                        description=f"The record of a run of issue {record.issue}.",
                        mime_type="application/json",
                    )
                )
            return found

        try:
            resources = await anyio.to_thread.run_sync(collect)
        except BeflowError as error:
            raise MCPError(code=types.INTERNAL_ERROR, message=error.message) from None
        return types.ListResourcesResult(resources=resources)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=ISSUE_URI,
                    name="issue",
                    title="An issue",
                    description="An issue and its comments as Markdown"
                    + (f" (this server: issue {self.context.bound_issue} only)." if self.context.bound_issue else "."),
                    mime_type="text/markdown",
                ),
                types.ResourceTemplate(
                    uri_template=RUN_URI,
                    name="run",
                    title="A run record",
                    description="A run's record (run.json) with its progress lines"
                    + (
                        f" (this server: runs of issue {self.context.bound_issue})."
                        if self.context.bound_issue
                        else "."
                    ),
                    mime_type="application/json",
                ),
            ]
        )

    def _read_text(self, uri: str, context: Context) -> tuple[str, str]:
        """The text of a resource and its MIME type; :class:`NotFoundError` for a URI this server does not serve."""
        if uri.startswith("beflow://issue/"):
            issue = self.operations_call("issue.show", {"key": uri.removeprefix("beflow://issue/")}, context)
            return _issue_markdown(issue), "text/markdown"
        if uri.startswith("beflow://run/"):
            record = self.operations_call("run.show", {"id": uri.removeprefix("beflow://run/")}, context)
            return record.model_dump_json(indent=2), "application/json"
        raise NotFoundError(f"no resource {excerpt(uri)}: beflow serves beflow://issue/<key> and beflow://run/<id>")

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        self.watch.remember(ctx)
        uri = str(params.uri)
        try:
            async with self._calls:
                text, mime = await anyio.to_thread.run_sync(self._read_text, uri, self.context)
        except BeflowError as error:
            # Another issue's resource does not exist for a bound server.
            raise MCPError(code=types.INVALID_PARAMS, message=without_input(error.message)) from None
        limit = self.launch.limits.max_output
        if len(text.encode("utf-8")) > limit:
            text = text.encode("utf-8")[: limit - 200].decode("utf-8", errors="ignore")
            text += f"\n{CUT} (this server sends at most {limit} bytes; read the rest with the beflow command line)\n"
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        self.watch.remember(ctx)
        uri = str(params.uri)
        try:
            await anyio.to_thread.run_sync(self._read_text, uri, self.context)  # refused like a read
        except BeflowError as error:
            raise MCPError(code=types.INVALID_PARAMS, message=without_input(error.message)) from None
        self.watch.subscribe(ctx, uri)
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        self.watch.unsubscribe(ctx, str(params.uri))
        return types.EmptyResult()

    # -- serving ----------------------------------------------------------------------------------------------------

    async def serve_streams(self, read: Any, write: Any, max_pending: int = MAX_PENDING) -> None:
        """Serve one connection over a stream pair, answering every request received before the input ended."""
        drain = _Drain(read, write, on_draining=self.watch.listen.close, max_pending=max_pending)
        options = self.server.create_initialization_options(
            NotificationOptions(resources_changed=self.context.bound_issue is not None)
        )
        await self.server.run(drain.reader, drain.writer, options)


#: What an issue key given at launch may look like: a tracker's key (``7``, ``#7``, ``PROJ-12``), never a path.
LAUNCH_KEY = re.compile(r"^#?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def existing_issue(issue: str, show: Callable[[str], Any]) -> str:
    """The key of the issue ``--issue`` names, through ``show`` (``issue.show``); a usage error (exit 2) for a key
    that is not one or an issue that does not exist."""
    if not LAUNCH_KEY.match(issue) or ".." in issue:
        raise UsageError(f"--issue {excerpt(issue)} is not an issue key", fix="Give an issue's key, e.g. --issue 7.")
    try:
        key: str = show(issue).key
    except NotFoundError as error:
        raise UsageError(f"--issue: {error.message}", fix=error.fix) from None
    return key


def check_launch(launch: Launch) -> Launch:
    """The launch, with the issue and run it names checked (and the issue taken from the run when only ``--run``
    is given): a server bound to something that does not exist refuses to start."""
    issue = launch.issue
    context = Context(project=launch.project, opens_tracker=launch.opens_tracker)
    registry = load_all()
    forward = client_from_environment(launch.channel, issue) if launch.channel else None

    def call(name: str, arguments: dict[str, Any]) -> Any:
        if forward is not None:  # a run's own server: the run's process answers (it holds the tracker)
            return forward.call(name, arguments)
        return registry[name].call(context, arguments)

    if launch.run is not None:
        record = call("run.show", {"id": launch.run})
        if issue is not None and normalize_key(issue) != record.issue:
            raise UsageError(f"--run {launch.run} is a run of issue {record.issue}, not of issue {issue}")
        issue = record.issue
        launch = dataclasses.replace(launch, run=record.id, issue=issue)
    if issue is not None:
        launch = dataclasses.replace(launch, issue=existing_issue(issue, lambda key: call("issue.show", {"key": key})))
    exposed(launch.allow, bound=launch.issue is not None)  # a bad --allow fails before serving
    if forward is not None:
        forward.close()
    return launch


async def serve(launch: Launch) -> None:
    """Serve MCP on stdin/stdout until stdin ends or a signal (SIGINT, SIGTERM, SIGHUP) arrives."""
    if not logger.handlers:  # what the server says goes to stderr, one line each; stdout is the protocol's
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    server = BeflowServer(launch)
    stop = anyio.Event()
    serving = anyio.CancelScope()

    def on_stuck() -> None:
        serving.cancel()  # the client does not read: its answers cannot be delivered, the server stops anyway

    with serving:
        await _serve(server, launch, stop, on_stuck)


async def _serve(server: BeflowServer, launch: Launch, stop: anyio.Event, on_stuck: Callable[[], None]) -> None:
    async with anyio.create_task_group() as tasks:

        async def on_signals(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
                task_status.started()
                async for signum in signals:
                    logger.info("beflow mcp: %s: finishing the calls in flight, then stopping", signum)
                    stop.set()

        await tasks.start(on_signals)
        async with stdio_streams(stop, launch.limits.max_frame, on_stuck) as (read, write):
            await server.serve_streams(read, write)
        tasks.cancel_scope.cancel()
