"""Translating the cascade to the ACP ``McpServer`` shape that acpx forwards to ``session/new``.

- stdio has no ``type`` (it is the untagged variant of ACP's union) and always carries ``args`` and ``env``:
  ``{"name", "command", "args", "env"}``;
- http and sse keep their tag: ``{"type", "name", "url", "headers"}``;
- ``env`` and ``headers`` records become ``[{"name", "value"}]`` lists.

Order is deterministic: servers sorted by name (code point order, as Python's ``sorted``); ``args``, ``env`` and
``headers`` in the order the file gives them. Keys inside every object come in the order above.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter

from beflow.config import Project
from beflow.errors import ConfigError
from beflow.mcp.cascade import (
    RemoteServer,
    Server,
    StdioServer,
    collector_paused,
    expand_all,
    fix_for,
    forget_files,
    load_cascade,
    mask_references,
    summary,
)
from beflow.paths import acpx_home
from beflow.system.files import read_regular

#: The largest global acpx config read.
MAX_GLOBAL_CONFIG = 8 << 20
#: What ``beflow mcp show`` prints instead of a secret.
MASK = "••••"


class NameValue(BaseModel):
    name: str
    value: str


class AcpStdio(BaseModel):
    """ACP ``McpServerStdio``; field order is the key order on the wire."""

    name: str
    command: str
    args: list[str]
    env: list[NameValue]


class AcpRemote(BaseModel):
    """ACP ``McpServerHttp`` / ``McpServerSse``."""

    type: Literal["http", "sse"]
    name: str
    url: str
    headers: list[NameValue]


def _pairs(record: Mapping[str, str], *, reveal: bool) -> list[NameValue]:
    return [NameValue(name=k, value=v if reveal else MASK) for k, v in record.items()]


#: One MCP server as a run hands it to acpx.
AcpServer = AcpStdio | AcpRemote


def acp_servers(servers: Iterable[tuple[str, Server]], *, reveal: bool = True) -> list[AcpServer]:
    """Every server in the ACP shape, sorted by name."""
    ordered = sorted(servers, key=lambda item: item[0])
    # One pydantic-core call per shape for all of them (10k servers in milliseconds), then back in name order.
    stdio = [_stdio_fields(name, s, reveal) for name, s in ordered if isinstance(s, StdioServer)]
    remote = [_remote_fields(name, s, reveal) for name, s in ordered if not isinstance(s, StdioServer)]
    built = {
        StdioServer: iter(_adapter(AcpStdio).validate_python(stdio)),
        RemoteServer: iter(_adapter(AcpRemote).validate_python(remote)),
    }
    return [next(built[StdioServer if isinstance(s, StdioServer) else RemoteServer]) for _, s in ordered]


def _stdio_fields(name: str, server: StdioServer, reveal: bool) -> dict[str, Any]:
    env = [{"name": k, "value": v if reveal else MASK} for k, v in server.env.items()]
    return {"name": name, "command": server.command, "args": server.args, "env": env}


def _remote_fields(name: str, server: Server, reveal: bool) -> dict[str, Any]:
    assert isinstance(server, RemoteServer)
    headers = [{"name": k, "value": v if reveal else MASK} for k, v in server.headers.items()]
    return {"type": server.type, "name": name, "url": server.url, "headers": headers}


@functools.cache
def _adapter(model: type[BaseModel]) -> TypeAdapter[list[Any]]:
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def wire(servers: Iterable[AcpServer]) -> list[dict[str, Any]]:
    """The ``mcpServers`` list as JSON has it (``.acpxrc.json``, ``beflow mcp show --json``)."""
    return [server.model_dump(mode="json") for server in servers]


def masked(server: Server) -> Server:
    """``server`` as shown without ``--reveal``: env and header values masked, and every ``${VAR}`` reference in
    ``command``, ``args`` and ``url`` masked where it stands (the rest of the argument stays readable)."""
    if isinstance(server, StdioServer):
        return server.model_copy(
            update={
                "command": mask_references(server.command, MASK),
                "args": [mask_references(a, MASK) for a in server.args],
                "env": {k: MASK for k in server.env},
            }
        )
    return server.model_copy(
        update={"url": mask_references(server.url, MASK), "headers": {k: MASK for k in server.headers}}
    )


def translate(servers: Iterable[tuple[str, Server]], *, reveal: bool = True) -> list[dict[str, Any]]:
    """The ``mcpServers`` list for ``.acpxrc.json``: every server in the ACP shape, sorted by name."""
    return wire(acp_servers(servers, reveal=reveal))


def secret_values(servers: Iterable[AcpServer]) -> set[str]:
    """Every env and header value of ``servers``: what must never reach a log or a record."""
    return {
        pair.value for server in servers for pair in (server.env if isinstance(server, AcpStdio) else server.headers)
    }


def resolve_servers(project: Project, environ: Mapping[str, str] | None = None) -> list[AcpServer] | None:
    """What a run injects: the translated list, or ``None`` when injection is off or no server resolves.

    ``environ`` (default: beflow's environment) supplies ``${VAR}`` values. A problem anywhere in the cascade is
    a :class:`~beflow.errors.ConfigError` naming the file, the server and the field, never a value.
    """
    if not project.config.mcp.enabled:
        return None
    global _last
    environ = dict(os.environ if environ is None else environ)
    with collector_paused():
        cascade = load_cascade(project)
        # The checks before a run and the run itself resolve the same files in the same environment: once. (Only
        # what resolved is remembered, so the same files and environment again cannot have a problem.)
        key = ([(s.scope, s.path, s.text) for s in cascade.sources], environ)
        last = _last
        if last is not None and last[0] == key:
            return list(last[1]) if last[1] else None
        resolved, problems = expand_all(cascade, environ)
        problems = [*cascade.problems, *problems]
        if problems:
            raise ConfigError(summary(problems), fix=fix_for(problems))
        servers = acp_servers(resolved) or None
    _last = (key, servers)
    return list(servers) if servers else None


#: The last files and environment resolved, and what they resolved to.
_last: tuple[Any, list[AcpServer] | None] | None = None


def forget_resolved() -> None:
    """Forget what was read and resolved (the next :func:`resolve_servers` reads and validates every file again)."""
    global _last
    _last = None
    forget_files()


def server_names(servers: Iterable[AcpServer] | None) -> list[str]:
    """The names of the servers, for run records and logs (never their values)."""
    return [server.name for server in servers or []]


# --- acpx's own global config -------------------------------------------------------------------------------


class Shadowed(BaseModel):
    """Servers of acpx's global config that an injected project list hides (acpx does not merge the two)."""

    path: Path
    names: list[str]


def acpx_global_config(environ: Mapping[str, str] | None = None) -> Path:
    """``~/.acpx/config.json`` as acpx finds it: Node's ``os.homedir()`` is ``$HOME``, else the passwd entry."""
    return acpx_home(environ) / ".acpx" / "config.json"


def shadowed_global_servers(environ: Mapping[str, str] | None = None) -> Shadowed | None:
    """The servers of acpx's global ``mcpServers`` that injection would hide, or ``None`` when there are none.

    acpx uses the project ``.acpxrc.json``'s ``mcpServers`` whenever that key is present and only otherwise the
    global list. A global file that does not parse is acpx's error to report; it shadows nothing here.
    """
    path = acpx_global_config(environ)
    try:
        data = json.loads(read_regular(path, limit=MAX_GLOBAL_CONFIG).decode("utf-8"))  # never a FIFO waited on
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, list) or not servers:
        return None
    names = [str(s.get("name")) if isinstance(s, dict) and s.get("name") else f"#{i}" for i, s in enumerate(servers)]
    return Shadowed(path=path, names=names)
