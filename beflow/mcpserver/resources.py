"""The resources of one ``beflow mcp serve``: ``beflow://issue/<key>`` (Markdown) and ``beflow://run/<id>`` (JSON),
listed, read (within ``max_output`` bytes) and subscribed to; a bound server lists only its own issue and runs.
Every read goes through the registry (issue.show, run.show...), so the binding applies whether or not ``--allow``
exposes those operations as tools. What a subscribed resource's change sounds like is
:mod:`beflow.mcpserver.subscriptions`'s.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError

from beflow.errors import BeflowError, NotFoundError, excerpt
from beflow.mcpserver.channel import ChannelClient
from beflow.mcpserver.failures import without_input
from beflow.mcpserver.results import CUT
from beflow.mcpserver.schema import ISSUE_URI, RUN_URI, load_all
from beflow.mcpserver.subscriptions import ResourceWatch
from beflow.ops.issues import IssueView
from beflow.ops.operations import Context
from beflow.records.record import RunRecord
from beflow.trackers.issue import format_time


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


class Resources:
    """The resource handlers of one server, and the watch of what its clients subscribed to (:attr:`watch`, which
    looks at the bound issue and the subscribed resources every ``poll`` seconds). ``calls``: the lock every tool
    call and resource read takes (one at a time); ``forward``: a run's own server reads through the run's channel."""

    def __init__(
        self,
        context: Context,
        *,
        poll: float,
        max_output: int,
        calls: anyio.Lock,
        forward: ChannelClient | None,
    ) -> None:
        self.context = context
        self.max_output = max_output
        self.calls = calls
        self.forward = forward
        self.watch = ResourceWatch(
            bound_issue=context.bound_issue, poll=poll, stamp=self._stamp, run_uris=self._run_uris
        )

    def _stamp(self, uri: str) -> Any:
        try:
            own = self.context
            reading = Context(project=own.project, bound_issue=own.bound_issue, opens_tracker=own.opens_tracker)
            return self.read_text(uri, reading)
        except Exception:
            return None

    def _run_uris(self) -> list[str]:
        try:
            return [uri for uri, _ in self._run_resources()]
        except Exception:
            return []

    def _run_resources(self) -> list[tuple[str, RunRecord]]:
        listing = self.call("run.list", {"limit": 20}, self.context)
        return [(RUN_URI.format(id=record.id), record) for record in listing.runs]

    def call(self, name: str, arguments: dict[str, Any], context: Context) -> Any:
        """An operation this server uses for resources, through the registry (so the binding applies), whether or
        not ``--allow`` exposes it as a tool."""
        if self.forward is not None:
            return self.forward.call(name, arguments)
        return load_all()[name].call(context, arguments)

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self.watch.remember(ctx)

        def collect() -> list[types.Resource]:
            found = []
            if self.context.bound_issue is not None:
                issues = [self.call("issue.show", {}, self.context)]
            else:
                issues = self.call("issue.list", {}, self.context).issues
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

    async def list_templates(
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

    def read_text(self, uri: str, context: Context) -> tuple[str, str]:
        """The text of a resource and its MIME type; :class:`NotFoundError` for a URI this server does not serve."""
        if uri.startswith("beflow://issue/"):
            issue = self.call("issue.show", {"key": uri.removeprefix("beflow://issue/")}, context)
            return _issue_markdown(issue), "text/markdown"
        if uri.startswith("beflow://run/"):
            record = self.call("run.show", {"id": uri.removeprefix("beflow://run/")}, context)
            return record.model_dump_json(indent=2), "application/json"
        raise NotFoundError(f"no resource {excerpt(uri)}: beflow serves beflow://issue/<key> and beflow://run/<id>")

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        self.watch.remember(ctx)
        uri = str(params.uri)
        try:
            async with self.calls:
                text, mime = await anyio.to_thread.run_sync(self.read_text, uri, self.context)
        except BeflowError as error:
            # Another issue's resource does not exist for a bound server.
            raise MCPError(code=types.INVALID_PARAMS, message=without_input(error.message)) from None
        limit = self.max_output
        if len(text.encode("utf-8")) > limit:
            text = text.encode("utf-8")[: limit - 200].decode("utf-8", errors="ignore")
            text += f"\n{CUT} (this server sends at most {limit} bytes; read the rest with the beflow command line)\n"
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        self.watch.remember(ctx)
        uri = str(params.uri)
        try:
            await anyio.to_thread.run_sync(self.read_text, uri, self.context)  # refused like a read
        except BeflowError as error:
            raise MCPError(code=types.INVALID_PARAMS, message=without_input(error.message)) from None
        self.watch.subscribe(ctx, uri)
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        self.watch.unsubscribe(ctx, str(params.uri))
        return types.EmptyResult()
