"""``beflow mcp serve``: beflow's operations as an MCP server over stdio, with the official SDK's low-level server.

The server is composed of its launch (:mod:`~beflow.mcpserver.launch`), its tools (:mod:`~beflow.mcpserver.tools`,
answering as data: :mod:`~beflow.mcpserver.results`), its resources (:mod:`~beflow.mcpserver.resources`) and, over
stdio, the drain of its input (:mod:`~beflow.mcpserver.drain`).

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
import logging
import signal
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
from mcp.server import NotificationOptions, Server

from beflow import __version__
from beflow.mcp.own import SERVER_NAME
from beflow.mcpserver.channel import client_from_environment
from beflow.mcpserver.drain import MAX_PENDING, Drain
from beflow.mcpserver.launch import Launch, acting_as
from beflow.mcpserver.resources import Resources
from beflow.mcpserver.schema import exposed
from beflow.mcpserver.stdio import stdio_streams
from beflow.mcpserver.tools import Tools
from beflow.ops.operations import Context, Operation
from beflow.trackers.issue import normalize_key

logger = logging.getLogger("beflow.mcp")


class BeflowServer:
    """One ``beflow mcp serve`` process: the SDK's low-level server with beflow's handlers."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        issue = normalize_key(launch.issue) if launch.issue else None
        self.context = Context(
            project=launch.project,
            actor=acting_as(launch),
            bound_issue=issue,
            bound_run=launch.run,
            opens_tracker=launch.opens_tracker,
            remote=launch.remote,
        )
        self.operations: dict[str, Operation[Any, Any]] = {
            op.tool_name: op for op in exposed(launch.allow, bound=issue is not None)
        }
        self.forward = client_from_environment(launch.channel, issue) if launch.channel else None
        calls = anyio.Lock()  # one call (or resource read) at a time, first come first served
        self.resources = Resources(
            self.context, poll=launch.poll, max_output=launch.limits.max_output, calls=calls, forward=self.forward
        )
        #: The subscribed resources (and the bound issue), and what changed in them (beflow.mcpserver.subscriptions).
        self.watch = self.resources.watch
        self.tools = Tools(
            self.context, self.operations, limits=launch.limits, calls=calls, watch=self.watch, forward=self.forward
        )
        self.server: Server[dict[str, Any]] = Server(
            SERVER_NAME,
            version=__version__,
            title="beflow",
            instructions=self._instructions(),
            lifespan=self._lifespan,
            on_list_tools=self.tools.list_tools,
            on_call_tool=self.tools.call_tool,
            on_list_resources=self.resources.list_resources,
            on_list_resource_templates=self.resources.list_templates,
            on_read_resource=self.resources.read_resource,
            on_subscribe_resource=self.resources.subscribe,
            on_unsubscribe_resource=self.resources.unsubscribe,
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

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Server[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        """The watch of the bound issue and the subscribed resources, for as long as the server runs."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.watch.run)
            yield {}
            tasks.cancel_scope.cancel()

    async def announce(self, uri: str | None) -> None:
        """``uri`` changed (None: the list of resources did): tell listen streams and a subscribed session."""
        await self.watch.announce(uri)

    async def serve_streams(self, read: Any, write: Any, max_pending: int = MAX_PENDING) -> None:
        """Serve one connection over a stream pair, answering every request received before the input ended."""
        drain = Drain(read, write, on_draining=self.watch.listen.close, max_pending=max_pending)
        options = self.server.create_initialization_options(
            NotificationOptions(resources_changed=self.context.bound_issue is not None)
        )
        await self.server.run(drain.reader, drain.writer, options)


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
