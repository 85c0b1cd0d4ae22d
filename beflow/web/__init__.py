"""beflow's HTTP server: the dashboard, the JSON API under ``/api/v1/`` and MCP over HTTP, presenting a watch's events
and state."""
