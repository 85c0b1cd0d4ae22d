"""Closing beflow's own process to the agent: on Linux, beflow makes itself non-dumpable.

An agent runs as the same user as beflow, so by default it may read ``/proc/<beflow's pid>/environ`` (the tracker's
token is there), ``/proc/<pid>/mem``, or attach a debugger. ``prctl(PR_SET_DUMPABLE, 0)`` closes all three to other
processes of the same user (root, with ``CAP_SYS_PTRACE``, still can); core dumps are off too. The setting is
reset by ``execve`` in every child beflow starts, so acpx, the agent, git and the hooks are as dumpable as ever
and beflow still reads its children's ``/proc`` entries (``beflow.system.proc``, ``beflow.system.liveness``).

Called by the commands that run agents (``--auto``, ``watch``, ``--attend``, ``--open``), by beflow's MCP server and
by whatever opens a tracker that holds a token. macOS has no such switch: docs/safety.md says what holds there.
"""

from __future__ import annotations

import sys

#: ``<linux/prctl.h>``.
PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3

_done = False


def keep_private() -> bool:
    """Make this process non-dumpable (Linux); whether it is. Idempotent; anywhere else, False."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # only here: every other command starts without it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _done = int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
    return _done


def is_private() -> bool:
    """Whether this process is non-dumpable (for ``beflow doctor`` and tests)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
