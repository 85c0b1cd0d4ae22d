"""beflow as a server: its operations served to MCP clients (``beflow mcp serve``, over stdio) and to the agents of
its own runs (``mcp.self``, through each run's private channel). ``schema`` says what is exposed and how,
``mcp`` serves it (``subscriptions``: what its clients hear of changes), ``stdio`` is the bounded transport,
``channel`` the run's side of ``mcp.self``; ``failures`` how errors cross to clients. The HTTP server of
``beflow watch --http`` and ``beflow serve``: ``web`` (the page, ``/api/v1/``, ``/mcp``), ``api`` (the API's
models), ``guard`` (Host, Origin, token), ``live`` (a running watch as it sees it), ``serving`` (its thread),
``remote`` (MCP over Streamable HTTP) and ``diffs`` (file edits as unified diffs)."""
