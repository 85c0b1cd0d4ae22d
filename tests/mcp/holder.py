"""A real process that manages ``<dir>/.acpxrc.json`` the way a run does, then ends as the tests ask.

    python tests/mcp/holder.py DIR --then sleep|return|raise|timeout|exit [--interrupts] [--lock-timeout S]

It prints one JSON line per event on stdout (``waiting``, ``injected``, ``restored``, ``error``), flushed, so a
test can wait for ``injected`` before it signals or kills the process. ``--then exit`` leaves without any cleanup
(``os._exit``), as a SIGKILL would. ``--interrupts`` runs under beflow's signal handling, as the CLI does.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
from pathlib import Path

import anyio

from beflow.errors import BeflowError, Interrupted
from beflow.mcp.acp import AcpStdio, NameValue
from beflow.mcp.inject import managed_acpxrc
from beflow.system import interrupts

SERVERS = [AcpStdio(name="probe", command="probe-server", args=["--stdio"], env=[NameValue(name="K", value="v")])]


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}, default=str), flush=True)


async def session(directory: Path, then: str, lock_timeout: float) -> None:
    handle = None
    try:
        async with managed_acpxrc(
            directory,
            SERVERS,
            on_wait=lambda message: emit("waiting", message=message),
            lock_timeout=lock_timeout,
            poll_interval=0.05,
        ) as handle:
            emit("injected", pid=os.getpid())
            if then == "sleep":
                await anyio.sleep(60)
            elif then == "raise":
                raise RuntimeError("the agent failed")
            elif then == "timeout":
                with anyio.fail_after(0.2):
                    await anyio.sleep(60)
            elif then == "exit":
                os._exit(0)
            elif then == "wait-file":  # hold the file until the test creates DIR/release
                while not (directory / "release").exists():
                    await anyio.sleep(0.05)
    finally:
        if handle is not None and handle.restored is not None:
            emit("restored", action=handle.restored.action)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--then", default="return")
    parser.add_argument("--interrupts", action="store_true")
    parser.add_argument("--lock-timeout", type=float, default=30.0)
    args = parser.parse_args()

    def work() -> object:
        return session(args.directory, args.then, args.lock_timeout)

    faulthandler.register(signal.SIGUSR1)  # a test that waits too long asks for the stacks before it gives up
    if not args.interrupts:  # Python's own Ctrl-C, even when started with SIGINT ignored (as a background job is)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if args.interrupts:
            interrupts.run(work)
        else:
            anyio.run(work)
    except Interrupted as stop:
        emit("error", kind="Interrupted", message=stop.message)
        return 130
    except KeyboardInterrupt:
        emit("error", kind="KeyboardInterrupt", message="")
        return 130
    except BeflowError as error:
        emit("error", kind=type(error).__name__, message=error.message)
        return error.exit_code
    except Exception as exc:
        emit("error", kind=type(exc).__name__, message=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
