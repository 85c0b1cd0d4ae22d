"""How an operation's failure crosses to a client (an MCP client, or beflow's own server in a run): a validation
message without the input it quotes, and an unexpected error's traceback in a log file rather than in the answer."""

from __future__ import annotations

import datetime as dt
import logging
import re
import traceback

from beflow.paths import beflow_home
from beflow.system.files import atomic_write

logger = logging.getLogger("beflow.mcp")


def without_input(message: str) -> str:
    """A validation message without the values it quotes: an error never echoes the raw input."""
    return "\n".join(re.sub(r" \(got .*\)$", "", line) for line in message.splitlines())


def log_internal(error: BaseException) -> str:
    """The traceback of an unexpected error, in a log file under ``$BEFLOW_HOME/logs``; its path."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = beflow_home() / "logs" / f"mcp-{stamp}.log"
    try:
        atomic_write(path, "".join(traceback.format_exception(error)), mode=0o600)
    except OSError:
        logger.error("beflow mcp: unexpected error", exc_info=error)
        return "beflow's stderr"
    return str(path)
