"""``python -m tests.support.mcp_extra ARGS``: the ``beflow`` CLI with two more operations, for tests of
``beflow mcp serve`` that need a call to take its time or to misbehave.

- ``test.slow``: appends ``start <tag>`` to ``$MCP_EXTRA_LOG``, waits until ``$MCP_EXTRA_RELEASE`` exists, appends
  ``end <tag>``.
- ``test.noisy``: prints to stdout every way a handler can (``print``, ``os.write(1)``, a child process).
- ``test.crash``: fails the way a bug does (an exception that is no ``BeflowError``), quoting its input.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel

from beflow.cli import main
from beflow.ops.operations import Context, Input, operation


class Tag(Input):
    tag: str = "a"


class Done(BaseModel):
    tag: str
    pid: int


def _log(line: str) -> None:
    with Path(os.environ["MCP_EXTRA_LOG"]).open("a") as handle:
        handle.write(line + "\n")


@operation("test.slow", title="Slow", description="Waits for the test to release it.", safety="read", agent=True)
def slow(context: Context, payload: Tag) -> Done:
    _log(f"start {payload.tag} {os.getpid()}")
    release = Path(os.environ["MCP_EXTRA_RELEASE"])
    while not release.exists():  # a test helper: the test creates the file
        time.sleep(0.02)
    _log(f"end {payload.tag}")
    return Done(tag=payload.tag, pid=os.getpid())


@operation("test.noisy", title="Noisy", description="Prints to stdout.", safety="read", agent=True)
def noisy(context: Context, payload: Tag) -> Done:
    print("a stray print from a handler")
    sys.stdout.flush()
    os.write(1, b"a raw write to fd 1\n")
    subprocess.run(["echo", "a child's stdout"], check=True)
    return Done(tag=payload.tag, pid=os.getpid())


@operation("test.crash", title="Crash", description="Raises.", safety="read", agent=True)
def crash(context: Context, payload: Tag) -> Done:
    raise RuntimeError(f"boom with {payload.tag}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except SystemExit as done:
        # The server's own exit code, for tests whose client (the SDK's) does not report it.
        if os.environ.get("MCP_EXTRA_EXIT"):
            Path(os.environ["MCP_EXTRA_EXIT"]).write_text(f"{done.code}\n")
        raise
