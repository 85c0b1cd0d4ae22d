"""Waiting for a condition, never for a duration: the one wait loop of the tests."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    condition: Callable[[], T],
    what: str,
    timeout: float = 60.0,
    *,
    interval: float = 0.02,
    alive: subprocess.Popen[str] | None = None,
) -> T:
    """Until ``condition()`` gives something true, which it returns; fails saying ``what`` never happened after
    ``timeout`` seconds, or at once if the process ``alive`` names has exited meanwhile (with its output)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if alive is not None and alive.poll() is not None:
            out, err = alive.communicate()
            raise AssertionError(f"the process exited ({alive.returncode}) before {what}: {out}{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)
