"""The one registry of beflow's operations and the operations themselves, which the CLI and the MCP server both call."""
