"""One run of one issue, in every mode: its request and session, the agent's turn, the workspace it works in, what it
delivers, and the decisions of its lifecycle."""
