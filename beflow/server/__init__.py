"""beflow as a server: its operations served to MCP clients (``beflow mcp serve``, over stdio) and to the agents of
its own runs (``mcp.self``, through each run's private channel). ``schema`` says what is exposed and how,
``mcp`` serves it (``subscriptions``: what its clients hear of changes), ``stdio`` is the bounded transport,
``channel`` the run's side of ``mcp.self``."""
