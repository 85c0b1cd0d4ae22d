"""docs/mcp-server.md says what the registry says."""

from __future__ import annotations

import re

from beflow.docs import docs_dir
from beflow.mcpserver.schema import tool_table


def test_the_tool_table_of_the_docs_page_is_the_registry() -> None:
    page = (docs_dir() / "mcp-server.md").read_text()
    found = re.search(r"<!-- tools:start -->\n(.*?)\n<!-- tools:end -->", page, re.S)
    assert found is not None
    assert found.group(1) == tool_table(), "regenerate the table with beflow.mcpserver.schema.tool_table()"


def test_every_error_code_the_server_sends_is_listed() -> None:
    page = (docs_dir() / "mcp-server.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", page.split("### Error codes")[1], re.M))
    from beflow import errors

    codes = {cls.code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.BeflowError)}
    codes -= {"error", "interrupted", "tool_missing", "skipped"}  # never from a tool call
    assert codes | {"unknown_tool", "internal"} <= listed
