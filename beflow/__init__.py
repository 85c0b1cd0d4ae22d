"""beflow: turn issues into coding-agent runs through acpx, with per-run MCP servers."""

__version__ = "0.1.0"

#: The acpx release beflow is built and tested against (installed with ``npx`` when acpx is not on PATH).
ACPX_VERSION = "0.19.1"

#: The Node.js release npx fetches beside the pinned acpx when this machine's is older than acpx needs (22.13), and
#: the one scripts/test installs into tools/node for the suite (``npm view node@22 version``).
NODE_VERSION = "22.23.3"
