"""The coding agent as beflow starts it: acpx's command line and stream, the agent's environment, what beflow knows of
each agent, and their native clients."""
