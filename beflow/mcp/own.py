"""``mcp.self``: beflow's own MCP server in every run's injected set, and the run's side of progress reports.

With ``"mcp": {"self": true}`` a run (``--auto``, ``watch``, ``--attend``) hands its agent one more server, named
``beflow``: ``<this python> -m beflow --config <config> mcp serve --issue KEY --run ID --channel SOCKET``. The
interpreter is the one running beflow (no reliance on PATH), and the config file and ``BEFLOW_HOME`` are explicit,
so the server finds the project from the worktree the agent works in. It is bound to the run's issue and run, and
exposes the agent-safe operations. It holds no credentials: every operation goes through the run's private channel
(:mod:`beflow.mcpserver.channel`) to the run's process, with the run's capability. A cascade server already named
``beflow`` is a configuration error.

The agent's progress lines (``run.progress``) reach the run's process through that channel, which appends them to
the run's ``progress.jsonl`` itself (the server writes nothing of the record: in a sandbox the record is not there
to write); :func:`follow_progress` watches the file during the run and turns each new line into a ``progress``
event for ``beflow watch`` and ``--auto``'s views and ``--json`` streams.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence

import anyio

from beflow.config import Project
from beflow.errors import ConfigError
from beflow.mcp.acp import MASK, AcpServer, AcpStdio, NameValue
from beflow.paths import beflow_home
from beflow.records.record import PROGRESS_FILE, ProgressNote, RunStore
from beflow.system import files

#: The name beflow's server has in MCP client configs (and in injected sets, with ``mcp.self``).
SERVER_NAME = "beflow"
#: The variable the run's capability reaches beflow's own server in (from the injected file's ``env``).
CAPABILITY_ENV = "BEFLOW_MCP_CAPABILITY"

#: Seconds between two looks at the bound issue by beflow's server in a run: local tracker, outside service.
LOCAL_POLL = 2
REMOTE_POLL = 20
#: Seconds between two looks at a run's progress file.
PROGRESS_POLL = 0.5
#: The most of it read at one look.
PROGRESS_READ = 1 << 20


def own_argv(project: Project, *, issue: str, run_id: str, channel: str) -> list[str]:
    """The command line of beflow's own server for one run."""
    argv = [sys.executable, "-m", "beflow"]
    if project.config_path is not None:
        argv += ["--config", str(project.config_path.absolute())]
    # Each look at the bound issue (for change notifications) is a request to the tracker: an outside service's
    # rate limit is shared by every run, so its issue is looked at less often than a local one.
    poll = REMOTE_POLL if project.config.tracker.outside_service() else LOCAL_POLL
    return [*argv, "mcp", "serve", "--issue", issue, "--run", run_id, "--channel", channel, "--poll", str(poll)]


def own_server(
    project: Project, *, issue: str, run_id: str, socket: str = "<SOCKET>", capability: str = MASK
) -> AcpStdio:
    """The ``beflow`` server in the ACP shape acpx forwards to the agent: it forwards every operation to the run's
    channel at ``socket`` with the run's ``capability`` (by default, the shape ``beflow mcp show`` prints)."""
    command, *args = own_argv(project, issue=issue, run_id=run_id, channel=socket)
    env = [
        NameValue(name="BEFLOW_HOME", value=str(beflow_home())),
        NameValue(name=CAPABILITY_ENV, value=capability),
    ]
    return AcpStdio(name=SERVER_NAME, command=command, args=args, env=env)


def secret_part(server: AcpServer) -> AcpServer:
    """What of ``server`` is secret, for masking: beflow's own carries the run's capability, and its
    ``BEFLOW_HOME`` is not to be masked in paths; every other server is secret whole."""
    if not is_own_server(server):
        return server
    assert isinstance(server, AcpStdio)
    return server.model_copy(update={"env": [pair for pair in server.env if pair.name == CAPABILITY_ENV]})


def is_own_server(server: AcpServer) -> bool:
    """Whether ``server`` is beflow's own (its one secret is the run's capability)."""
    return (
        isinstance(server, AcpStdio)
        and server.name == SERVER_NAME
        and server.command == sys.executable
        and server.args[:2] == ["-m", "beflow"]
    )


def check_name(project: Project, servers: Sequence[AcpServer] | None) -> None:
    """With ``mcp.self``, no injected server may already be called ``beflow``."""
    if not project.config.mcp.self_server:
        return
    if any(server.name == SERVER_NAME for server in servers or []):
        where = f"{project.config_path}: " if project.config_path else ""
        raise ConfigError(
            f"{where}mcp.self: the .mcp.json cascade already has a server named {SERVER_NAME!r}, the name of "
            "beflow's own server",
            fix='Rename that server in .mcp.json (or disable it with "disabled": true), or set "self" to false.',
        )


@contextlib.asynccontextmanager
async def follow_progress(
    store: RunStore, run_id: str, on_progress: Callable[[ProgressNote], None]
) -> AsyncIterator[None]:
    """While the block runs, call ``on_progress`` for every progress line added to the run (through its channel, or
    by a server a person started with ``--run``); the lines of the last moments are read once more on the way out."""
    path = store.file(run_id, PROGRESS_FILE)
    state = {"offset": 0}

    def read_new() -> list[ProgressNote]:
        # Without the sandbox the agent can write the record: a FIFO or a link (to /dev/zero) in the file's place is
        # refused, never waited on or read, and each look reads a bounded piece (the rest comes at the next).
        try:
            fd = files.open_regular(path, below=store.project_dir)
        except OSError:
            return []
        try:
            os.lseek(fd, state["offset"], os.SEEK_SET)
            data = os.read(fd, PROGRESS_READ)
        except OSError:
            return []
        finally:
            os.close(fd)
        complete = data[: data.rfind(b"\n") + 1]  # a line being written waits for the next look
        # ... but a piece this long with no line end is no progress line being written: it is passed over.
        state["offset"] += len(complete) if complete or len(data) < PROGRESS_READ else len(data)
        notes = []
        for line in complete.splitlines():
            with contextlib.suppress(ValueError):
                notes.append(ProgressNote.model_validate_json(line))
        return notes

    def deliver() -> None:
        for note in read_new():
            on_progress(note)

    async def poll() -> None:
        while True:
            await anyio.sleep(PROGRESS_POLL)
            deliver()

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(poll)
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
                deliver()
    except BaseExceptionGroup as group:  # the block's own error (a sandbox that cannot start), not anyio's group
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
            raise group.exceptions[0] from None
        raise
