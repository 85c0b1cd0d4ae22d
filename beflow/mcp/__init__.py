"""MCP servers for agent runs: the ``.mcp.json`` cascade, its ACP translation and the managed ``.acpxrc.json``.

A run calls :func:`resolve_servers` (``None`` when injection is off or nothing resolves), wraps the agent session
in :func:`managed_acpxrc`, and records :func:`server_names` (never values).
"""

from beflow.mcp.acp import resolve_servers, server_names, shadowed_global_servers, translate
from beflow.mcp.inject import Injection, managed_acpxrc
from beflow.mcp.journal import Restored, recover_orphans

__all__ = [
    "Injection",
    "Restored",
    "managed_acpxrc",
    "recover_orphans",
    "resolve_servers",
    "server_names",
    "shadowed_global_servers",
    "translate",
]
