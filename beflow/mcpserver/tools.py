"""The tools of one ``beflow mcp serve``: the operations ``--allow`` exposes, listed with their schemas and called
one at a time, in the order the calls arrive (a call waits for the one before it). Every call goes through the
registry (:meth:`beflow.ops.operations.Operation.call`), which enforces the server's binding; inputs above
``max_input`` bytes are refused (``too_large``), and what a call answers is data (:mod:`beflow.mcpserver.results`).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext

from beflow.errors import BeflowError, TooLargeError, UsageError, excerpt
from beflow.mcpserver.channel import ChannelClient
from beflow.mcpserver.failures import log_internal, without_input
from beflow.mcpserver.launch import Limits
from beflow.mcpserver.results import tool_error, tool_result
from beflow.mcpserver.schema import tool
from beflow.mcpserver.subscriptions import ResourceWatch
from beflow.ops.operations import Context, Operation


class Tools:
    """The tool handlers of one server. ``calls``: the lock every call and resource read takes (one at a time);
    ``forward``: a run's own server hands every call to the run's process through its channel."""

    def __init__(
        self,
        context: Context,
        operations: dict[str, Operation[Any, Any]],
        *,
        limits: Limits,
        calls: anyio.Lock,
        watch: ResourceWatch,
        forward: ChannelClient | None,
    ) -> None:
        self.context = context
        self.operations = operations
        self.limits = limits
        self.calls = calls
        self.watch = watch
        self.forward = forward

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.watch.remember(ctx)
        tools = [
            types.Tool.model_validate(tool(op, self.context.project, self.context.bound_issue))
            for op in self.operations.values()
        ]
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        self.watch.remember(ctx)
        op = self.operations.get(params.name)
        if op is None:
            names = ", ".join(self.operations)
            return self.error(
                "unknown_tool", f"no tool {excerpt(params.name)} on this server", f"The tools here are: {names}."
            )
        arguments = params.arguments or {}
        size = len(json.dumps(arguments, ensure_ascii=False).encode("utf-8"))
        if size > self.limits.max_input:
            error = TooLargeError(
                f"{op.tool_name}: the input is {size} bytes; this server takes at most {self.limits.max_input}",
                fix="Send less (shorter text), or split it over several calls.",
            )
            return self.error(error.code, error.message, error.fix)
        async with self.calls:
            # Shielded: once it started, a call finishes (and is answered) even when the server is stopping.
            with anyio.CancelScope(shield=True):
                try:
                    result = await anyio.to_thread.run_sync(self._invoke, op, arguments)
                except BeflowError as error:
                    message = without_input(error.message) if isinstance(error, UsageError) else error.message
                    return self.error(error.code, message, error.fix)
                except Exception as error:
                    where = log_internal(error)
                    return self.error(
                        "internal",
                        f"{op.tool_name}: beflow failed unexpectedly; the details are logged in {where}",
                        "Report it with that log; the call may be retried.",
                    )
        data = result.model_dump(mode="json") if hasattr(result, "model_dump") else result
        return tool_result(op.tool_name, data, self.limits.max_output, op.whole, self.context.remote)

    def error(self, code: str, message: str, fix: str | None) -> types.CallToolResult:
        return tool_error(code, message, fix, self.context.remote)

    def _invoke(self, op: Operation[Any, Any], arguments: dict[str, Any]) -> Any:
        """A tool call: in this process, or, for a run's own server, in the run's (through its channel)."""
        if self.forward is not None:
            return self.forward.call(op.name, arguments, tool=True)
        return op.call(self.context, arguments)
