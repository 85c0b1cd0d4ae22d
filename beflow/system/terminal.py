"""The user's terminal, shared with a child that owns it for a while (acpx's permission prompts, a native client)."""

from __future__ import annotations

import contextlib
import os
import sys
import termios
from collections.abc import Iterator


@contextlib.contextmanager
def settings_kept() -> Iterator[None]:
    """Put the terminal's settings back after the child: acpx switches it to raw mode for a permission prompt,
    and a child stopped in the middle of one would leave it so."""
    try:
        saved = termios.tcgetattr(sys.stdin.fileno())
    except (termios.error, OSError, ValueError):
        saved = None
    try:
        yield
    finally:
        # Only from the foreground: a background process setting the terminal would be stopped (SIGTTOU).
        with contextlib.suppress(termios.error, OSError, ValueError):
            fd = sys.stdin.fileno()
            if saved is not None and os.tcgetpgrp(fd) == os.getpgrp():
                termios.tcsetattr(fd, termios.TCSANOW, saved)


def is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False
