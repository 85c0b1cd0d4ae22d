"""The private channel between a run and beflow's own MCP server in it (``mcp.self``).

The agent starts beflow's server itself, with the agent's environment, which rightly lacks the tracker's token. So
that server holds no credentials and acts on nothing by itself: it forwards every operation to the beflow process
that runs the issue, which holds the tracker, over a Unix domain socket in a 0700 directory under ``BEFLOW_HOME``.

- The run opens the channel (:class:`RunChannel`) around the agent's session: the socket exists only while the
  agent runs, and the directory is removed when it ends.
- Each call carries the run's capability: a random token, handed to the server only in the injected
  ``.acpxrc.json`` (mode 0600, masked in records), and known to nobody else. A connection from another user
  (``SO_PEERCRED``), a forged capability, an issue other than the run's, or an operation an agent may not use is
  refused.
- Accepted calls run in the run's process through the operations registry, bound to the run's issue and run, with
  the run's tracker. What crosses back is the operation's result as JSON, or its error's code, message and fix.
- The channel counts the server's start-ups and calls (:class:`Usage`), so that a run can tell when the agent's
  calls to beflow's server never reached it.

The frames are JSON lines: ``{"capability", "issue", "op", "arguments", "tool"}`` one way, ``{"result"}`` or
``{"error": {"code", "message", "fix"}}`` the other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import json
import logging
import os
import re
import secrets
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from beflow import guardrails
from beflow.agent.acpx import ToolCallState, Transcript
from beflow.config import Project
from beflow.errors import BeflowError, UsageError, excerpt
from beflow.mcp.acp import AcpServer
from beflow.mcp.own import CAPABILITY_ENV, SERVER_NAME, check_name, own_server
from beflow.mcpserver.failures import log_internal, without_input
from beflow.mcpserver.schema import exposed, load_all
from beflow.ops.operations import AGENT_ACTOR, Context
from beflow.paths import beflow_home
from beflow.records.record import Question
from beflow.system import threads
from beflow.trackers.issue import normalize_key

logger = logging.getLogger("beflow.mcp")

#: The longest request: room for a tool call at the server's input limit, and little for an agent to flood with.
MAX_REQUEST = 4 * 1024 * 1024
#: The longest answer the server reads (a result is cut to the server's output limit only once it has it).
MAX_FRAME = 64 * 1024 * 1024
#: Connections served at once: beflow's server holds one; more are an agent's own doing, and wait or are refused.
MAX_CONNECTIONS = 8
#: Seconds a call through the channel may take (a tracker with retries) before the server gives up on it.
CALL_TIMEOUT = 300.0
#: What an agent's server may ask for: the agent-safe operations, and the issue's run list (its resources).
EXTRA_OPERATIONS = frozenset({"run.list"})
#: Unix socket paths are short (108 bytes on Linux, 104 on macOS).
MAX_SOCKET_PATH = 100


def allowed_operations() -> frozenset[str]:
    return frozenset(name for name, op in load_all().items() if op.agent) | EXTRA_OPERATIONS


@dataclass
class Usage:
    """What went through a run's channel."""

    sessions: int = 0  # connections whose first frame carried the capability: beflow's server started
    calls: int = 0  # tool calls that reached the run (resource reads and start-up checks are not counted)
    refused: int = 0  # frames refused: another user, a forged capability, another issue, an operation not allowed


def _peer_uid(sock: socket.socket) -> int | None:
    """The user on the other end of a Unix socket, where the system says (Linux: ``SO_PEERCRED``)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        data = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", data)
    return int(uid)


#: Seconds after which a channel directory nobody listens in is a killed run's, and removed.
STALE_AFTER = 60.0


def _sweep(root: Path, prefix: str) -> None:
    """Remove the channels of runs that were killed (their directory stayed, nothing listens on the socket): those
    in ``root`` named ``prefix...`` and this user's (``root`` may be the system's temporary directory, shared)."""
    now = time.time()
    for directory in root.iterdir() if root.is_dir() else []:
        if not directory.name.startswith(prefix):
            continue
        try:
            seen = directory.lstat()
            if not stat.S_ISDIR(seen.st_mode) or seen.st_uid != os.getuid() or now - seen.st_mtime < STALE_AFTER:
                continue  # not a channel of this user's, or a run that is opening its channel right now
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(1)
                probe.connect(str(directory / "s"))
        except (ConnectionRefusedError, FileNotFoundError):
            shutil.rmtree(directory, ignore_errors=True)
        except OSError:
            continue


def _error(code: str, message: str, fix: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fix": fix}}


@dataclass
class RunChannel:
    """A run's channel: its socket path and capability are fixed when the run's servers are resolved (they go into
    the injected file); it listens only inside :meth:`serving`."""

    project: Project
    issue: str
    run_id: str
    capability: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    directory: Path = field(init=False)
    usage: Usage = field(default_factory=Usage)
    #: Why beflow's server failed the agent, when it did (:func:`beflow.mcp.own.own_failure`).
    failure: str | None = None
    #: The question the agent asked (``issue.ask``), its last if it asked more than once: the run ends ``asked``.
    question: Question | None = None
    #: Whether the run takes its agent's questions (an unattended one); a person is with an attended one.
    takes_questions: bool = True
    _live: Callable[[], guardrails.Usage | None] = field(default=lambda: None, init=False, repr=False)
    #: What names the channels in the directory :attr:`directory` is in: anything in beflow's own, ``beflow-UID-``
    #: in the system's temporary directory (which everyone's files share).
    _prefix: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        self.issue = normalize_key(self.issue)
        name = secrets.token_hex(6)
        directory = beflow_home() / "channels" / name
        if len(str(directory / "s")) > MAX_SOCKET_PATH:  # a deep BEFLOW_HOME: the system's temporary directory
            self._prefix = f"beflow-{os.getuid()}-"
            directory = Path(tempfile.gettempdir()) / f"{self._prefix}{name}"
        self.directory = directory

    @property
    def path(self) -> Path:
        return self.directory / "s"

    @contextlib.asynccontextmanager
    async def serving(
        self,
        tracker: Any,
        usage: Callable[[], guardrails.Usage | None] = lambda: None,
        secrets: list[str] | None = None,
    ) -> AsyncIterator[RunChannel]:
        """Listen while the body runs (the agent's session), acting with ``tracker``; afterwards the socket and its
        directory are gone, and the capability with them. ``usage``: what the agent reported so far (``run.status``
        says it). ``secrets``: every secret the run holds (:func:`beflow.agent.agent_env.run_secrets`, its code host's
        included), that the agent's words are masked with; by default, its tracker's and beflow's own."""
        self._live = usage
        self.directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _sweep(self.directory.parent, self._prefix)
        os.mkdir(self.directory, 0o700)
        if secrets is None:
            from beflow.agent.agent_env import (
                run_secrets,  # the run's side only: beflow's server never loads the session
            )

            secrets = run_secrets(self.project, tracker)
        context = Context(
            project=self.project,
            actor=AGENT_ACTOR,
            bound_issue=self.issue,
            bound_run=self.run_id,
            # The agent's words are masked with every secret the run holds: a token from `gh auth token` too, which
            # no variable holds (beflow.ops.agent_words).
            tracker=tracker,
            secrets=secrets,
            asks=self._asked if self.takes_questions else None,
        )
        lock = anyio.Lock()  # one call at a time: the run's tracker is shared with the run itself
        slots = anyio.Semaphore(MAX_CONNECTIONS)
        try:
            listener = await anyio.create_unix_listener(self.path, mode=0o600)
            async with listener, anyio.create_task_group() as tasks:

                async def handle(stream: anyio.abc.SocketStream) -> None:
                    async with stream:
                        if slots.value == 0:
                            self.usage.refused += 1
                            return
                        async with slots:
                            try:
                                await self._connection(stream, context, lock)
                            except Exception as error:  # whatever a client sends, the run goes on
                                self.usage.refused += 1
                                logger.debug("the run's channel dropped a connection: %r", error)

                tasks.start_soon(listener.serve, handle)
                try:
                    yield self
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _asked(self, question: Question) -> None:
        self.question = question

    async def _connection(self, stream: anyio.abc.SocketStream, context: Context, lock: anyio.Lock) -> None:
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        uid = _peer_uid(raw)
        if uid is not None and uid != os.getuid():
            self.usage.refused += 1
            return
        frames = BufferedByteReceiveStream(stream)
        first = True
        while True:
            try:
                line = await frames.receive_until(b"\n", MAX_REQUEST)
            except anyio.DelimiterNotFound:  # a frame longer than any request: nothing more is read from it
                self.usage.refused += 1
                return
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                return
            answer, accepted = await self._answer(line, context, lock)
            if not accepted:
                self.usage.refused += 1
            elif first:
                self.usage.sessions += 1
            first = False
            try:
                await stream.send(json.dumps(answer, ensure_ascii=False).encode("utf-8") + b"\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            if not accepted:
                return  # a refused frame ends the connection: nothing more is read from it

    async def _answer(self, line: bytes, context: Context, lock: anyio.Lock) -> tuple[dict[str, Any], bool]:
        try:
            frame = json.loads(line)
        except ValueError:
            return _error("usage", "not a channel frame"), False
        if not isinstance(frame, dict):
            return _error("usage", "not a channel frame"), False
        given = frame.get("capability")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), self.capability.encode()):
            return _error("out_of_scope", "this run's channel refuses the capability it was given"), False
        issue = frame.get("issue")
        if not isinstance(issue, str) or normalize_key(issue) != self.issue:
            message = f"this run works on issue {self.issue} only; it cannot act on issue {excerpt(issue)}"
            return _error("out_of_scope", message, f"Use issue {self.issue!r}."), False
        name = frame.get("op")
        if not isinstance(name, str) or name not in allowed_operations():
            return _error("out_of_scope", f"no operation {excerpt(name)} for an agent's server"), False
        arguments = frame.get("arguments") or {}
        if not isinstance(arguments, dict):
            return _error("usage", f"{name}: the arguments must be an object"), True
        op = load_all()[name]
        if frame.get("tool"):
            self.usage.calls += 1  # answered, whatever the answer: the server did its part
        async with lock:
            # What the agent reported so far, copied here on the loop that updates it, not in the worker thread.
            live = self._live()
            context.live_usage = None if live is None else dataclasses.replace(live)
            try:
                result = await threads.blocking(op.call, context, arguments)
            except BeflowError as error:
                return {"error": error_fields(error)}, True
            except Exception as error:
                where = log_internal(error)
                message = f"{name}: beflow failed unexpectedly; the details are logged in {where}"
                return _error("internal", message), True
        return {"result": result.model_dump(mode="json")}, True


def error_fields(error: BeflowError) -> dict[str, Any]:

    message = without_input(error.message) if isinstance(error, UsageError) else error.message
    return {"code": error.code, "message": message, "fix": error.fix}


class ForwardedError(BeflowError):
    """An operation's error, as the run's process answered it through the channel."""

    def __init__(self, code: str, message: str, fix: str | None) -> None:
        super().__init__(message, fix=fix)
        self.code = code


class ChannelClient:
    """beflow's own server's side: operations forwarded to the run's process (thread-safe, one call at a time)."""

    def __init__(self, path: Path, capability: str, issue: str) -> None:
        self.path = path
        self.capability = capability
        self.issue = issue
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._reader: Any = None

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CALL_TIMEOUT)
        try:
            sock.connect(str(self.path))
        except OSError as error:
            sock.close()
            raise BeflowError(
                f"beflow's run is not reachable ({error.strerror or error}): the run this server belongs to ended",
                fix="Nothing to do: this server works only while its run goes on.",
            ) from None
        self._sock = sock
        self._reader = sock.makefile("rb")

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._reader.close()
                self._sock.close()
        self._sock = None

    def call(self, name: str, arguments: dict[str, Any], *, tool: bool = False) -> Any:
        """The result of operation ``name`` (its output model), run by the run's process."""
        frame = {"capability": self.capability, "issue": self.issue, "op": name, "arguments": arguments, "tool": tool}
        data = json.dumps(frame, ensure_ascii=False).encode("utf-8") + b"\n"
        with self._lock:
            answer = self._exchange(data)
        if "error" in answer:
            error = answer["error"] or {}
            raise ForwardedError(
                str(error.get("code") or "internal"), str(error.get("message") or "failed"), error.get("fix")
            )
        return load_all()[name].output.model_validate(answer.get("result"))

    def _exchange(self, data: bytes) -> dict[str, Any]:
        for attempt in (1, 2):  # a connection the run closed meanwhile is made again, once
            if self._sock is None:
                self._connect()
            assert self._sock is not None
            try:
                self._sock.sendall(data)
                line = self._reader.readline(MAX_FRAME + 1)
            except OSError:
                line = b""
            if line.endswith(b"\n"):
                answer = json.loads(line)
                if isinstance(answer, dict):
                    return answer
            self.close()
            if attempt == 2:
                break
        raise BeflowError(
            "beflow's run did not answer: the run this server belongs to ended",
            fix="Nothing to do: this server works only while its run goes on.",
        )


def client_from_environment(path: str, issue: str | None) -> ChannelClient:
    """The client of ``beflow mcp serve --channel PATH --issue KEY``: the capability comes from
    :data:`CAPABILITY_ENV`."""
    capability = os.environ.get(CAPABILITY_ENV)
    if not capability:
        raise UsageError(f"--channel needs the run's capability in {CAPABILITY_ENV}")
    if issue is None:
        raise UsageError("--channel needs --issue: the issue of the run the channel belongs to")
    return ChannelClient(Path(path), capability, normalize_key(issue))


# -- the run's side -----------------------------------------------------------------------------------------------


def with_own_server(
    project: Project, servers: list[AcpServer] | None, *, issue: str, run_id: str
) -> tuple[list[AcpServer] | None, RunChannel | None]:
    """A run's injected set: the cascade's ``servers`` and, with ``mcp.self``, beflow's own (sorted by name, as
    :func:`beflow.mcp.acp.acp_servers` sorts; ``None`` when there is none), with the run's channel, which the run
    serves around the agent's session (:func:`own_channel`)."""
    if not project.config.mcp.self_server:
        return servers, None
    check_name(project, servers)
    channel = RunChannel(project, issue, run_id)
    combined: list[AcpServer] = [
        *(servers or []),
        own_server(project, issue=issue, run_id=run_id, socket=str(channel.path), capability=channel.capability),
    ]
    return sorted(combined, key=lambda server: server.name), channel


@contextlib.asynccontextmanager
async def own_channel(
    channel: RunChannel | None,
    tracker: Any,
    transcript: Callable[[], Transcript | None],
    notice: Callable[[str], None],
    secrets: list[str] | None = None,
) -> AsyncIterator[RunChannel | None]:
    """While the body runs (the agent's session), the run's channel is served with the run's ``tracker`` (the
    agent's words masked with ``secrets``, see :meth:`RunChannel.serving`); then, if the agent called beflow's
    server more often than the channel answered, ``notice`` says the server failed (its message is the value of
    :attr:`RunChannel.failure` too, for the record)."""
    if channel is None:
        yield None
        return

    def usage() -> guardrails.Usage | None:
        live = transcript()
        return None if live is None else live.usage

    async with channel.serving(tracker, usage, secrets):
        yield channel
    failure = own_failure(channel, transcript())
    if failure is not None:
        channel.failure = failure
        notice(failure)


#: Tool call titles that name beflow's own server: ``mcp beflow.issue_show``, ``mcp__beflow__issue_show``, ...
OWN_TOOL = re.compile(rf"(?<![A-Za-z0-9])(?:mcp__)?{SERVER_NAME}(?:[._]|__)(?P<tool>[a-z]+_[a-z_]+)")


def own_failure(channel: RunChannel, transcript: Transcript | None) -> str | None:
    """Why beflow's own server failed the agent, judged from what the agent tried (its tool calls naming the
    server, in the transcript) and what the channel served; ``None`` when nothing points at a failure. A call
    naming a tool the server does not list never reaches the run: a server that started answered it itself
    (``unknown_tool``), so it is the agent's slip, not the server's failure."""
    tried = []
    if transcript is not None:
        tried = [call for call in transcript.tool_calls.values() if _own_tool(call) is not None]
    usage = channel.usage
    if usage.sessions:  # it started: it reached the run at start-up
        listed = {op.tool_name for op in exposed(None, bound=True)}
        tried = [call for call in tried if _own_tool(call) in listed]
    unanswered = len(tried) - usage.calls
    if tried and unanswered > 0 and any(call.status == "failed" for call in tried):
        started = "it never started" if usage.sessions == 0 else "the run answered fewer of them"
        refused = f"; {usage.refused} refused" if usage.refused else ""
        return (
            f"beflow's own MCP server failed the agent: {unanswered} of its {len(tried)} call(s) to it never "
            f"reached the run ({started}{refused})"
        )
    return None


def _own_tool(call: ToolCallState) -> str | None:
    """The tool of beflow's own server a tool call names (in its title, else its kind), if it names one."""
    found = OWN_TOOL.search(call.title or "") or OWN_TOOL.search(call.kind or "")
    return found["tool"] if found else None
