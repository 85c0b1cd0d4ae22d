"""MCP servers for agent runs: the ``.mcp.json`` cascade (``cascade``), its ACP translation (``acp``), the managed
``.acpxrc.json`` (``inject``) and its journal (``journal``), redaction (``redact``) and beflow's own server for a run
(``own``).

A run calls :func:`~beflow.mcp.acp.resolve_servers` (``None`` when injection is off or nothing resolves), wraps the
agent session in :func:`~beflow.mcp.inject.managed_acpxrc`, and records :func:`~beflow.mcp.acp.server_names` (never
values). Import from the module that owns a name: the package re-exports nothing, so that none of its modules
imports the package that imports it.
"""
