"""beflow: turn issues into coding-agent runs through acpx, with per-run MCP servers."""

__version__ = "0.1.0"

#: The acpx release beflow is built and tested against (installed with ``npx`` when acpx is not on PATH).
ACPX_VERSION = "0.19.1"
