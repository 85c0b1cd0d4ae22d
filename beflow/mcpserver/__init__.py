"""beflow as an MCP server: its operations served over stdio (``beflow mcp serve``) and to the agents of its own runs
through each run's private channel."""
