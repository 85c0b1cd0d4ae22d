"""What a tool call answers, as data: a result cut to fit the server's limit (types kept, so that it still matches
its schema), or an error — ``isError`` with ``{"error": {"code", "message", "fix", "docs"}}`` as text and the error
object in ``_meta["beflow/error"]`` (not ``structuredContent``, which must match the tool's output schema); never a
stack, the raw input or a secret."""

from __future__ import annotations

import copy
import json
from typing import Any

import mcp_types as types

from beflow.docs import docs_dir

CUT = "… [cut]"
#: The ``_meta`` key of a tool error's code, message, fix and docs (structured, for clients that act on it).
ERROR_META = "beflow/error"


def docs_link(code: str, remote: bool = False) -> str:
    """Where error codes are explained: the installed docs page (it matches this version), its error-codes table;
    for a ``remote`` client (MCP over HTTP), which cannot read the server's files, the page's topic and the command
    that prints it."""
    if remote:
        return "mcp-server#error-codes (`beflow docs mcp-server`, section Error codes)"
    return f"{docs_dir() / 'mcp-server.md'}#error-codes"


def error_payload(code: str, message: str, fix: str | None, remote: bool = False) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fix": fix, "docs": docs_link(code, remote)}}


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


def tool_error(code: str, message: str, fix: str | None, remote: bool = False) -> types.CallToolResult:
    """A tool call's error, as data (``remote``: for a client on another machine, see :func:`docs_link`)."""
    payload = error_payload(code, message, fix, remote)
    # No structuredContent: it must match the tool's outputSchema, and an error is not a result (clients that
    # validate it, such as the MCP Inspector, refuse the call). The error goes as text, and as data in _meta.
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(payload, ensure_ascii=False))],
        is_error=True,
        _meta={ERROR_META: payload["error"]},
    )


def tool_result(name: str, data: Any, limit: int, whole: str | None, remote: bool = False) -> types.CallToolResult:
    """The result ``data`` of the tool ``name`` within ``limit`` bytes, cut if need be (``whole``: where the whole
    of it can be read), or a ``too_large`` error when even cut it does not fit."""
    # The JSON goes twice (structured, and as text for clients that read text only): each gets half.
    budget = limit // 2 - 512
    fitted = fit(data, budget)
    if fitted is None:
        return tool_error(
            "too_large",
            f"{name}: the result does not fit in {limit} bytes, even cut",
            f"Read it whole with {whole or 'the beflow command line'}.",
            remote,
        )
    content: list[types.ContentBlock] = []
    meta = None
    if fitted is not data:
        whole = whole or "the beflow command line"
        note = (
            f"Note: this result was cut to fit this server's limit of {limit} bytes; long texts end with '{CUT}' "
            f"and long lists lost their tail. The whole of it: {whole}."
        )
        content.append(types.TextContent(text=note))
        meta = {"beflow/cut": {"limit": limit, "whole": whole}}
    content.append(types.TextContent(text=json.dumps(fitted, ensure_ascii=False)))
    return types.CallToolResult(content=content, structured_content=fitted, _meta=meta)
